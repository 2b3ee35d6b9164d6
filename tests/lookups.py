"""The done-when counts of #64 (typed all the way), outside restartlab/contracts/: the json.load(s)
sites, and the string-key lookups (`x["key"]`, `x.get("key")`), by file, most first.

    python -m tests.lookups [N]     # the N files with the most lookups (default 15)

A lookup is counted by its text: a key read from a framework's JSON or a scenario's YAML counts
the same as one of ours; the count is a bound, not a census."""
import collections
import os
import re
import sys

LOOKUP = re.compile(r"""\[\s*["'][A-Za-z_/][\w/.-]*["']\s*\]|\.get\(\s*["'][A-Za-z_/][\w/.-]*["']""")
JSON_LOAD = re.compile(r"\bjson\.loads?\(")
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "restartlab")


def counts():
    lookups, loads = collections.Counter(), collections.Counter()
    for d, _, files in os.walk(ROOT):
        if os.path.basename(d) == "contracts":
            continue
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                text = open(p).read()
                rel = os.path.relpath(p, os.path.dirname(ROOT))
                lookups[rel], loads[rel] = len(LOOKUP.findall(text)), len(JSON_LOAD.findall(text))
    return lookups, loads


def main(argv=None) -> int:
    n = int((argv or sys.argv[1:] or ["15"])[0])
    lookups, loads = counts()
    print(f"string-key lookups outside contracts/: {sum(lookups.values())}; json.load(s) sites: {sum(loads.values())}")
    for p, k in lookups.most_common(n):
        print(f"  {k:5d}  {p}")
    print("json.load(s) in: " + ", ".join(f"{p} ({k})" for p, k in sorted(loads.items()) if k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
