"""The done-when counts of #64 (typed all the way), outside restartlab/contracts/: the json.load(s)
sites, and the string-key lookups, by file, most first.

    python -m tests.lookups [N]     # the N files with the most lookups (default 15)

A lookup is a read by a literal string key, found in the syntax tree: `x["key"]` read (not a store
`x["key"] = v`, not a `del`, not a list literal `["key"]`, not a quoted type `Optional["T"]`) and
`x.get("key", ...)`. A key read from
a framework's JSON, a scheduler's output or the environment counts the same as one of ours: the
count is a bound, not a census. The text count (every `["key"]` and `.get("key")` the regex
finds, the measure before 2026-12-07) is printed beside it."""
import ast
import collections
import os
import re
import sys

TEXT = re.compile(r"""\[\s*["'][A-Za-z_/][\w/.-]*["']\s*\]|\.get\(\s*["'][A-Za-z_/][\w/.-]*["']""")
JSON_LOAD = re.compile(r"\bjson\.loads?\(")
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "restartlab")


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


# a quoted type in an annotation (Optional["WarmRoute"]) is a subscript of one of these, not a read
TYPING = {"Optional", "List", "Dict", "Tuple", "Set", "Type", "Union", "Sequence", "Mapping", "Iterable",
          "Iterator", "Callable", "Deque", "ClassVar", "Literal"}


def _typing(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in TYPING


def lookups_in(text: str) -> int:
    """Reads by a literal string key in a module's source."""
    n = 0
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_key(node.slice) \
                and not _typing(node.value):
            n += 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and _is_key(node.args[0]):
            n += 1
    return n


def counts():
    lookups, text_hits, loads = collections.Counter(), collections.Counter(), collections.Counter()
    for d, _, files in os.walk(ROOT):
        if os.path.basename(d) == "contracts":
            continue
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                text = open(p).read()
                rel = os.path.relpath(p, os.path.dirname(ROOT))
                lookups[rel], text_hits[rel] = lookups_in(text), len(TEXT.findall(text))
                loads[rel] = len(JSON_LOAD.findall(text))
    return lookups, text_hits, loads


def main(argv=None) -> int:
    n = int((argv or sys.argv[1:] or ["15"])[0])
    lookups, text_hits, loads = counts()
    print(f"string-key lookups outside contracts/: {sum(lookups.values())} (text matches: "
          f"{sum(text_hits.values())}); json.load(s) sites: {sum(loads.values())}")
    for p, k in lookups.most_common(n):
        print(f"  {k:5d}  {p}")
    print("json.load(s) in: " + ", ".join(f"{p} ({k})" for p, k in sorted(loads.items()) if k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
