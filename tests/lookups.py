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


ENV = "the environment (os.environ or the job's env mapping)"
# Every read by a literal key that is left outside contracts/, and what it reads.
# None of them reads a record of ours except the launch spec's. Its strict reader needs the launcher
# registry, so it is not in contracts/.
# tests/test_lookups.py holds each file to its count here and the total below 100.
WHERE = {
    "restartlab/schedulers/pbs.py": (25, "OpenPBS's qstat -f / -Qf and pbsnodes (JSON and text), PBS_EXEC and "
                                         "PBS_CONF_FILE in " + ENV),
    "restartlab/schedulers/slurm.py": (19, "Slurm's scontrol show job / partition fields, sacctmgr's QoS, "
                                           "SLURM_* in " + ENV),
    "restartlab/scenario/validate.py": (5, "the user's YAML before it is checked (at_steps' {step, kind} items)"),
    "restartlab/tools/launch.py": (5, "--launch's JSON: LaunchSpec's own strict reader (ours; it names each bad "
                                      "key and needs the launcher registry)"),
    "restartlab/programs/ezpz_check.py": (3, "PATH and EZPZ_SCHEDULER in " + ENV),
    "restartlab/runtime/warm/pool.py": (3, "OMP_NUM_THREADS and PYTHONUNBUFFERED in " + ENV + ", sys.modules"),
    "restartlab/runtime/linebuf/sitecustomize.py": (3, "a rank's RESTARTLAB_STATE_* and RESTARTLAB_SLOW_WRITES in "
                                                       + ENV + " (a rank's start-up imports none of restartlab)"),
    "restartlab/launchers.py": (2, "MASTER_ADDR in " + ENV),
    "restartlab/programs/base.py": (2, "DeepSpeed's checkpoint (mp_rank_00_model_states.pt's world sizes)"),
    "restartlab/runtime/supervise.py": (2, "MASTER_PORT and PATH in " + ENV),
    "restartlab/runtime/killer.py": (2, "SLURMD_NODENAME in " + ENV),
    "restartlab/runtime/netfault.py": (2, "PATH in " + ENV + ", `ip -j link` (iproute2's JSON)"),
    "restartlab/reference.py": (1, "COLUMNS in " + ENV),
    "restartlab/runtime/pystdio.py": (1, "PYTHONPATH in " + ENV),
    "restartlab/runtime/fanout.py": (1, "PBS_O_WORKDIR in " + ENV),
    "restartlab/runtime/iofault/__init__.py": (1, "LD_PRELOAD in " + ENV),
    "restartlab/job/run.py": (1, "PATH in " + ENV),
    "restartlab/job/preflight.py": (1, "PATH in " + ENV),
    "restartlab/job/queues.py": (1, "USER in " + ENV),
    "restartlab/job/checks/storage.py": (1, "HOME in " + ENV),
    "restartlab/job/checks/environment.py": (1, "PATH in " + ENV),
    "restartlab/analysis/own_metrics.py": (1, "ezpz's History JSONL (its `metrics`)"),
}
# the json.load(s) sites outside contracts/, each a reader of what it parses
JSON_READERS = {
    "restartlab/runtime/tap.py": "the program's progress file and rank 0's probe file, a line at a time (then "
                                 "programs.parse_record / state_record.probe_line)",
    "restartlab/runtime/netfault.py": "`ip -j link`",
    "restartlab/runtime/warm/wire.py": "a message's frame (then contracts/warm_messages)",
    "restartlab/job/probe.py": "the job's Python's answer (then typed_json, probe.Answer)",
    "restartlab/schedulers/pbs.py": "qstat -f -F json, pbsnodes -F json",
    "restartlab/tools/launch.py": "--launch (LaunchSpec.from_json)",
    "restartlab/analysis/own_metrics.py": "ezpz's History JSONL",
}


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
        if k:
            print(f"  {k:5d}  {p}" + (f": {WHERE[p][1]}" if p in WHERE else ""))
    print("json.load(s) in: " + ", ".join(f"{p} ({k})" for p, k in sorted(loads.items()) if k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
