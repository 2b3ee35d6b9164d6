"""The experiment directory's names are spelled in restartlab/contracts/layout.py only: every other module,
the templates, the trainer, the tests and the benchmarks ask it (a name typed twice drifts, as
"attempt.json exists" once meant "the attempt is over" in one module and nothing in another).
Only this file spells them, to look for them."""
import glob
import os
import re

from restartlab.contracts import layout

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
