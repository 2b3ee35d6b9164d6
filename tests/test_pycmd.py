"""contracts/pycmd: one reader of a Python command line (#64.4).
It serves the warm pool, preflight and the ezpz check. Each once read the line its own way:
- the pool read -u only;
- preflight took -c's code for a script;
- the ezpz check took the word before -m for the python."""
import pytest

from restartlab.contracts import pycmd
from restartlab.programs import ezpz_check

P = "/venv/bin/python3"


@pytest.mark.parametrize("argv,want", [
    ([P, "-m", "pkg.mod", "--x", "1"], ((), "module", "pkg.mod", ("--x", "1"), ())),
    ([P, "-mjson.tool", "f"], ((), "module", "json.tool", ("f",), ())),
    ([P, "-u", "-W", "ignore", "-X", "dev", "t.py", "a"],
     (("-u", "-W", "ignore", "-X", "dev"), "script", "t.py", ("a",), ("-u", "-W", "-X"))),
    ([P, "-Wignore", "-c", "print(1)", "z"], (("-Wignore",), "code", "print(1)", ("z",), ("-W",))),
    ([P, "-cprint(2)"], ((), "code", "print(2)", (), ())),
    ([P, "-c", ""], ((), "code", "", (), ())),  # empty code is code (review: once read as none)
    ([P, "-uc", "print(3)"], (("-uc",), "code", "print(3)", (), ("-u",))),  # grouped, as CPython reads them
    ([P, "-um", "json.tool"], (("-um",), "module", "json.tool", (), ("-u",))),
    ([P, "-uW", "ignore", "t.py"], (("-uW", "ignore"), "script", "t.py", (), ("-u", "-W"))),
    ([P, "-uB", "t.py"], (("-uB",), "script", "t.py", (), ("-u", "-B"))),
    ([P, "--", "-m", "x"], (("--",), "script", "-m", ("x",), ())),  # after --, a script named -m
    ([P, "--check-hash-based-pycs", "always", "t.py"],
     (("--check-hash-based-pycs", "always"), "script", "t.py", (), ("--check-hash-based-pycs",))),
    ([P, "-", "a"], ((), "stdin", None, ("a",), ())),
    ([P, "-u"], (("-u",), "", None, (), ("-u",))),
    ([P, "-m"], ((), "module", None, (), ())),
    ([P], ((), "", None, (), ())),
    ([P, "t.py", "-m", "x"], ((), "script", "t.py", ("-m", "x"), ())),  # after the script: the program's own
])
def test_a_command_line_reads_as_python_reads_it(argv, want):
    c = pycmd.parse(argv)
    assert (c.python, (c.options, c.run, c.target, c.args, c.flags)) == (P, want)


def test_find_skips_a_wrapper():
    i, c = pycmd.find(["env", "A=1", "numactl", "-N", "0", "python3.11", "-m", "m"])
    assert (i, c.python, c.run, c.target) == (5, "python3.11", "module", "m")
    assert pycmd.find(["./run.sh", "-m", "x"])[0] == -1
    with pytest.raises(ValueError):
        pycmd.parse([])


def test_the_ezpz_check_finds_the_python_after_its_options():
    """`python -u -m ezpz.examples.fsdp`: the python is `python`, not "-u" (the word before -m)."""
    assert ezpz_check._module(["python", "-u", "-m", "ezpz.examples.fsdp", "--lr", "1"]) == \
        ("python", "ezpz.examples.fsdp", ["--lr", "1"])
    assert ezpz_check._module(["python", "-m", "torch.distributed.run", "x.py"]) == (None, None, [])
