"""The experiment directory's names are spelled in restartlab/contracts/layout.py only.

Every other module, the templates, the trainer, the tests and the benchmarks ask it. A name typed
twice drifts: "attempt.json exists" once meant "the attempt is over" in one module and nothing in
another. Only this file spells them, to look for them."""
import ast
import glob
import inspect
import os
import re

import pytest

from restartlab.contracts import layout
from tests import source_scan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = re.compile(r"attempt\.json|injections\.jsonl|jobs\.jsonl|summary\.json|report\.md|metrics-[\w<>{}]*\.jsonl"
                   r"|output\.log|nodes\.jsonl|nodes\.bad|hosts\.attempt|teardown\.log|injector\.log"
                   r"|node-check\.log|job\.out|scenario\.yaml|job\.sh")
# a marker or directory name joined onto a path
JOINED = re.compile(r"""join\([^)]*["'](done|completed|hang|walltime|attempts|ckpts|nodefile|jobid|hosts)["']""")


def _sources():
    me = os.path.abspath(__file__)
    for pattern in ("restartlab/**/*.py", "trainer/*.py", "templates/*", "tests/*.py", "bench/*.py"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            if not path.endswith(os.path.join("restartlab", "contracts", "layout.py")) and os.path.abspath(path) != me:
                yield path


# tests and benchmarks of the trainer alone use directories of their own named ckpts, hosts
JOINED_OUTSIDE = re.compile(r"""join\([^)]*["'](done|completed|hang|walltime|attempts|nodefile|jobid)["']""")


def test_names_are_spelled_in_layout_only():
    found = []
    for path in _sources():
        joined = JOINED if os.sep + "restartlab" + os.sep in path or os.sep + "templates" + os.sep in path else JOINED_OUTSIDE
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if "ezpz.examples." in line:  # a program's own output path (ezpz's History JSONL), not ours
                    continue
                if NAMES.search(line) or joined.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not found, "experiment-directory names outside restartlab/contracts/layout.py:\n" + "\n".join(found)


def test_the_check_above_can_fail():
    assert NAMES.search('os.path.join(d, "attempt.json")') and JOINED.search('os.path.join(p, "done")')


def test_layout_paths(tmp_path):
    e = layout.Expt(str(tmp_path))
    ph = e.phase("sync")
    a = ph.attempt(3)
    os.makedirs(a.path)
    os.makedirs(ph.attempt(12).path)
    os.makedirs(os.path.join(ph.attempts_dir, "junk"))
    assert [x.index for x in ph.attempts()] == [3, 12]  # numeric order, not string order
    assert ph.stray_entries() == [os.path.join(ph.attempts_dir, "junk")]
    assert [p.name for p in e.phases()] == ["sync"]
    assert a.metrics(1).endswith(layout.metrics_name(1)) and os.path.dirname(a.record) == a.path
    assert layout.sidecar_scenario("/x/job.pbs").startswith("/x/job.")


# The list above is written by hand, so a name layout gained later escaped it. ft-rank<R>.jsonl,
# supervise.log and <node>.served.jsonl were spelled in six modules (#50). Below, the names are
# taken from layout itself: each path its classes give, each name its name functions make. They are
# looked for in the string constants of restartlab/ and trainer/ (syntax trees, docstrings left out).
# A name with neither a dot nor a dash (done, hang, ckpts: ordinary words too) is left to the check above.
OWNERS = {os.path.join("restartlab", "contracts", "layout.py")}
STAR = "\x00"  # what a name function is given to see its fixed parts


def owned():
    """(the fixed names, the names made by functions as (head, tail) around the variable part)."""
    fixed = set()
    for cls, root in ((layout.Expt, "/E"), (layout.Phase, "/E/p"), (layout.Attempt, "/E/p/attempts/1")):
        obj = cls(root)
        for name, member in inspect.getmembers(cls):
            if isinstance(member, property):
                try:
                    v = getattr(obj, name)
                except (ValueError, TypeError, OSError):
                    continue
                if isinstance(v, str) and v.startswith(root + "/"):
                    fixed.add(os.path.basename(v))
    made = set()
    for name, fn in inspect.getmembers(layout, inspect.isfunction):
        if name.endswith("_name") and fn.__module__ == layout.__name__:
            head, _, tail = fn(STAR).partition(STAR)
            made.add((head, tail))
    return {n for n in fixed if re.search(r"[.-]", n)}, made


def _distinct(part: str) -> bool:
    """A fixed part of a made name worth looking for alone: more than a bare extension (.jsonl)."""
    return len(part) >= 6 and not re.fullmatch(r"\.\w+", part)


def spelled(path: str, fixed, made):
    """[(line, text)] of the string constants in one module that spell a name layout owns."""
    tree, out, joined = source_scan.parse(path), [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "*" for v in node.values]
            text = "".join(parts)
            joined.update(id(v) for v in node.values)
            if any(text == h + "*" + t or text.endswith("*" + h + "*" + t) or text.endswith("/" + h + "*" + t)
                   for h, t in made if h or t):
                out.append((node.lineno, text))
    for line, value in source_scan.constants(tree, joined):
        v = re.sub(r"\{[^{}]*\}", "*", value)  # a str.format template: "ft-rank{rank}.jsonl"
        if v in fixed or any(v == h + "*" + t or (v in (h + t, h, t) and _distinct(v)) for h, t in made):
            out.append((line, v))
    return out


def test_layout_owns_names_to_look_for():
    fixed, made = owned()
    assert {"attempt.json", "output.log", "ended.jsonl", "supervise.log", "summary.json"} <= fixed, fixed
    assert {("ft-rank", ".jsonl"), ("ft-rank", "-crash.json"), ("", ".served.jsonl"), ("metrics-", ".jsonl")} <= made


def test_no_module_but_layout_spells_a_name_layout_owns():
    fixed, made = owned()
    found = {rel: hits for rel in source_scan.modules(OWNERS) if (hits := spelled(os.path.join(ROOT, rel), fixed, made))}
    assert not found, "\n".join(f"{rel}:{line}: {text!r} (ask contracts/layout.py)"
                                for rel, hits in sorted(found.items()) for line, text in hits)


@pytest.mark.parametrize("code", [
    'open(os.path.join(d, "supervise.log"))',
    'path = f"{d}/ft-rank{rank}.jsonl"',
    'name.endswith(".served.jsonl")',
    'glob.glob(os.path.join(d, "metrics-*.jsonl"))',
    'CRASH = "ft-rank{rank}-crash.json"',
])
def test_a_spelled_name_is_found(tmp_path, code):
    """The check itself fails on each way the tree spelled a name before layout owned it."""
    f = tmp_path / "m.py"
    f.write_text(f'"""a module that mentions ft-rank<R>.jsonl in its docstring only is fine"""\n{code}\n')
    fixed, made = owned()
    assert spelled(str(f), fixed, made), code


def test_the_listings_by_rank(tmp_path):
    """The made names are listed back by the same functions: ranks as numbers, nothing else taken."""
    ph = layout.Phase(str(tmp_path / "ft" / "groups" / "g0"))
    a = ph.attempt(1)
    os.makedirs(a.path)
    for name in (layout.ft_record_name(0), layout.ft_record_name(12), layout.ft_crash_name(1),
                 "ft-rank1-x.jsonl", "ft-rankX.jsonl", layout.metrics_name(0)):
        open(os.path.join(a.path, name), "w").close()
    assert a.ft_records() == {0: os.path.join(a.path, "ft-rank0.jsonl"), 12: os.path.join(a.path, "ft-rank12.jsonl")}
    assert a.ft_crashes() == {1: os.path.join(a.path, "ft-rank1-crash.json")}
    assert ph.supervise_log == os.path.join(ph.path, "supervise.log")
