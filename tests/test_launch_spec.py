"""The launch spec (restartlab/tools/launch.py): what the job script hands the supervisor.

Each route of an attempt is a change of one field: cold, warm, a shrunk relaunch, a torchft group.
No module takes a launch's words apart again. A scan of the tree checks this, and it finds each
idiom the spec replaced when that idiom is planted."""
import ast
import dataclasses
import json
import os

import pytest

from restartlab.contracts.envvars import TAG_VAR
from restartlab.tools.launch import LaunchSpec, SpecError
from tests import source_scan

PY = "/venv/bin/python"
TRAINER = (PY, "-m", "restartlab.trainer", "--model", "tiny", "--outdir", "{attempt_dir}")


def _spec(**kw):
    base = dict(python=PY, program=TRAINER, launcher="hydra", nodes=2, ranks_per_node=4,
                env={TAG_VAR: "rl-x", "A": "1"})
    return LaunchSpec(**dict(base, **kw))


def test_each_route_puts_restartlabs_wrapper_between_the_launcher_and_the_program():
    s = _spec()
    launcher = ["mpiexec", "-n", "8", "-ppn", "4", "-genv", TAG_VAR, "rl-x", "-genv", "A", "1"]
    assert s.launcher_argv() == launcher and s.argv() == launcher + list(TRAINER)
    assert s.cold_argv("/a/1") == launcher + [PY, "-m", "restartlab.runtime.rankexit", "--dir", "/a/1", "--", *TRAINER]
    assert s.stub_argv("/pool", "/a/1") == launcher + [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", "/pool",
                                                       "--attempt-dir", "/a/1", "--", *TRAINER]
    # a program of yours: rankenv gives it torchrun's variables, cold or (the stub asks the pool) warm
    own = _spec(program=("python3", "train.py"), rankenv=True)
    assert own.command() == [PY, "-m", "restartlab.runtime.rankenv", "--", "python3", "train.py"]
    assert own.cold_argv("/a/1")[len(launcher):] == [PY, "-m", "restartlab.runtime.rankexit", "--dir", "/a/1", "--",
                                                     PY, "-m", "restartlab.runtime.rankenv", "--", "python3", "train.py"]
    assert own.stub_argv("/pool")[-4:] == ["--rankenv", "--", "python3", "train.py"]


def test_a_relaunch_a_group_and_an_attempt_are_each_one_field():
    s = _spec()
    shrunk = s.with_nodes(1)
    assert shrunk.launcher_argv()[:3] == ["mpiexec", "-n", "4"] and shrunk.program == s.program and shrunk.ranks == 4
    assert dataclasses.replace(shrunk, nodes=2) == s
    att = s.filled({"{attempt_dir}": "/e/p/attempts/3"})
    assert att.program[-1] == "/e/p/attempts/3" and att.launcher_argv() == s.launcher_argv()
    # A group's own tag reaches its ranks' environment only. A word that merely contains the job's tag
    # is the program's and stays as it is. The old word-by-word replace rewrote it.
    prog = (PY, "-m", "restartlab.trainer.ft", "--replica-group", "{group}", "--run-name", "rl-x-nightly")
    g = _spec(program=prog).for_group(1, "rl-x.g1")
    assert g.env == {TAG_VAR: "rl-x.g1", "A": "1"} and g.program[-3:] == ("1", "--run-name", "rl-x-nightly")
    assert ["-genv", TAG_VAR, "rl-x.g1"] == g.launcher_argv()[5:8]


HOSTILE = ["two words", "a'b", 'a"b', "$(touch PWNED)", "line\nbreak", "ü", ""]


def test_the_json_the_job_script_carries_gives_the_same_spec_back():
    s = _spec(launcher="pals", env={f"V{i}": h for i, h in enumerate(HOSTILE)}, forward=("HF_TOKEN",),
              cpu_bind="depth", depth=8, hostfile="/e/hosts", mpiexec="/opt/mpiexec", launcher_args=("--verbose",),
              rankenv=True, program=tuple(HOSTILE))
    text = s.to_json()
    assert "\n" not in text and LaunchSpec.from_json(text, s.program) == s
    assert json.loads(text)["env"]["V4"] == "line\nbreak"
    # what a reader of the script sees: the key facts, the defaults left out
    plain = json.loads(LaunchSpec(python=PY).to_json())
    assert plain == {"python": PY, "launcher": "hydra", "nodes": 1, "ranks_per_node": 1}


@pytest.mark.parametrize("text, why", [
    ("[]", "not a JSON object"), ('{"python": ""}', "'python'"), ('{"python": "p", "rankenv": 1}', "'rankenv'"),
    ('{"python": "p", "nodes": true}', "'nodes' must be a JSON int"),
    ('{"python": "p", "launcher": "nope"}', "'launcher': 'nope' is not one of"),
    ('{"python": "p", "env": {"A": 1}}', "'env' holds 1: every value must be a JSON string"),
    ('{"python": "p", "launcher_args": ["-v", null]}', "'launcher_args' holds null"),
])
def test_a_bad_spec_says_which_key(text, why):
    with pytest.raises(SpecError, match=None) as e:
        LaunchSpec.from_json(text, ["x"])
    assert why in str(e.value)


# ---------------------------------------------------------------- nothing parses a launch again
def reparses(tree) -> list:
    """[(line, what)] of the idioms that take a launch's words apart.

    - a marker word in a launch (@RL_...)
    - looking for `--` in a list of words
    - rewriting words by the tag
    - comparing words to the rankenv wrapper"""
    out = []
    for line, v in source_scan.constants(tree):
        if v.startswith("@RL_"):
            out.append((line, f"the marker {v}"))
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            args = n.args
            if n.func.attr == "index" and args and isinstance(args[0], ast.Constant) and args[0].value == "--":
                out.append((n.lineno, '.index("--")'))
            tag = args and (isinstance(args[0], ast.Attribute) and args[0].attr == "tag" or  # cfg.tag, ctx["tag"]
                            isinstance(args[0], ast.Subscript) and isinstance(args[0].slice, ast.Constant)
                            and args[0].slice.value == "tag")
            if n.func.attr == "replace" and tag:
                out.append((n.lineno, ".replace(tag, ...) on words"))
        if isinstance(n, ast.Compare):
            for side in [n.left, *n.comparators]:
                if isinstance(side, ast.Call) and ast.unparse(side.func).endswith("module_argv") and \
                        side.args and isinstance(side.args[0], ast.Constant) and side.args[0].value == "rankenv":
                    out.append((n.lineno, "words compared to the rankenv wrapper"))
    return out


# the one place an idiom reads no launch: a golden job script's text with its tag normalised
TEXT_NOT_LAUNCH = {("tests/test_render.py", ".replace(tag, ...) on words")}


def test_no_module_takes_a_launch_apart_again():
    """Over restartlab/, trainer/, tests/ and bench/ (this file plants the idioms), and the job
    templates' text (no @RL_ marker word)."""
    found = [(rel, line, what) for rel in source_scan.modules(("tests/test_launch_spec.py",),
                                                              tops=("restartlab", "trainer", "tests", "bench"))
             for line, what in reparses(source_scan.parse(os.path.join(source_scan.ROOT, rel)))
             if (rel, what) not in TEXT_NOT_LAUNCH]
    assert found == [], found
    templates = os.path.join(source_scan.ROOT, "templates")
    marked = [f for f in os.listdir(templates) if "@RL_" in open(os.path.join(templates, f)).read()]
    assert os.listdir(templates) and marked == [], marked


PY_FLAGS = ("-m", "-c")


def python_words(tree) -> list:
    """[(line, what)] of a Python command line read by hand.

    That is a word compared to -m or -c (==, !=, in a tuple or list). It is the job of
    contracts/pycmd.py alone. Before #64.4, the warm pool, preflight, the ezpz check and the torchft
    hook each had their own."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            for side in [n.left, *n.comparators]:
                consts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(c, ast.Constant) and c.value in PY_FLAGS for c in consts):
                    out.append((n.lineno, "a word compared to -m/-c"))
                    break
    return out


def test_one_reader_of_a_python_command_line():
    """Over restartlab/, trainer/ and bench/: only contracts/pycmd.py compares a word to -m or -c (the
    tests compare argv to the words they expect, which is no reading). Planted: found."""
    own = ("restartlab/contracts/pycmd.py",)
    found = [(rel, line, what) for rel in source_scan.modules(own, tops=("restartlab", "trainer", "bench"))
             for line, what in python_words(source_scan.parse(os.path.join(source_scan.ROOT, rel)))]
    assert found == [], found
    assert len(python_words(ast.parse('if argv[1] == "-m":\n    pass\nok = w in ("-u", "-c")'))) == 2


@pytest.mark.parametrize("planted", [
    'NODES = "@RL_NNODES@"',
    'at = argv.index("--") + 1',
    'argv = [w.replace(cfg.tag, tag) for w in argv]',
    'argv = [w.replace(ctx["tag"], "{tag}") for w in argv]',  # the subscript form (job/reuse.py had it)
    'if [run, target] != verbs.module_argv("rankenv"):\n    pass',
])
def test_the_scan_finds_each_idiom_when_it_is_planted(planted):
    assert len(reparses(ast.parse(planted))) == 1, planted
