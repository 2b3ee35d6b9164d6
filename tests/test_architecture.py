"""The package's import structure: setup.cfg's import contracts, checked by import-linter.

The contracts are:
- the layers by where code runs;
- no import cycle;
- the trainer imports only what a rank needs;
- orchestration never imports torch;
- the scenario and the analysis never import the job's runtime.

It also checks that the warm stub's start is a bare Python start. Each contract is shown to fail
on a copy of the tree with one import planted that breaks it."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(cwd):
    return subprocess.run([LINT, "--no-cache", "--config", "setup.cfg"], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_tree_keeps_its_import_contracts():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "5 kept, 0 broken" in r.stdout, r.stdout[-2000:]


# (file, line planted at its top, the contract that must break)
PLANTED = [
    ("restartlab/runtime/inject.py", "from ..job import render", "layers"),            # runtime -> job: upward
    ("restartlab/contracts/layout.py", "from ..runtime import killer", "layers"),      # contracts -> runtime
    ("restartlab/analysis/report.py", "from ..job import run", "layers"),              # analysis | job: independent
    ("restartlab/runtime/killer.py", "from .supervise import Supervisor", "cycle"),    # supervise -> ... -> killer
    ("trainer/checkpoint.py", "from restartlab.runtime import killer", "trainer"),     # a rank needs no runtime
    ("restartlab/job/render.py", "import torch", "torch"),
    ("restartlab/scenario/validate.py", "from ..runtime import killer", "login-node"),  # a scenario needs no runtime
    ("restartlab/analysis/collect.py", "from ..runtime import attempt_record", "login-node"),  # the records' reader neither
    ("restartlab/tools/options.py", "from ..runtime import killer", "layers"),           # the tables sit below the runtime
]
NAMES = {"layers": "layers: ", "cycle": "no import cycle", "trainer": "the bundled trainer imports only",
         "torch": "orchestration never imports torch", "login-node": "what reads a scenario and what reads the records"}


@pytest.mark.parametrize("path,line,contract", PLANTED, ids=[f"{c}:{p}" for p, _, c in PLANTED])
def test_a_planted_import_breaks_its_contract(tmp_path, path, line, contract):
    for d in ("restartlab", "trainer"):
        shutil.copytree(os.path.join(ROOT, d), tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "setup.cfg"), tmp_path)
    f = tmp_path / path
    text = f.read_text()
    # after the module's docstring and its __future__ imports, before its code
    at = text.index('"""', text.index('"""') + 3) + 3 if text.lstrip().startswith('"""') else 0
    f.write_text(text[:at] + "\n" + line + "  # planted\n" + text[at:])
    r = lint(str(tmp_path))
    assert r.returncode != 0, r.stdout[-3000:]
    # (an upward import usually closes a cycle too: that contract may break beside it)
    assert NAMES[contract] in " ".join(r.stdout.split()).split("Broken contracts", 1)[-1], r.stdout[-3000:]


def _imports(argv, **kw):
    r = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=60, **kw)
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, mods - {"imported package"}  # importtime's header line


def test_the_warm_stub_starts_on_the_standard_library_alone(tmp_path):
    """The stub a launcher starts per rank imports only the standard library and its own.

    The stub is python -m restartlab.runtime.warm stub. There is no pool here, so it starts the
    program cold through the exit recorder. Beyond what a bare `python -c pass` imports on this
    machine (site and its .pth files), it has imported only the standard library and its own
    modules (`-X importtime`):
    - restartlab's package inits;
    - the wire and its messages;
    - the signals it passes on;
    - the exit recorder;
    - the launcher registry (the rank's number);
    - the contracts they read.

    The recorder alone, which starts before every cold rank, imports the same but the warm package."""
    _, bare = _imports(["-c", "pass"])
    r, imported = _imports(["-m", "restartlab.runtime.warm", "stub", "--dir", str(tmp_path / "none"),
                            "--attempt-dir", str(tmp_path / "att"), "--", sys.executable, "-c", "print('cold')"])
    assert r.returncode == 0 and r.stdout.strip() == "cold", r.stdout + r.stderr[-2000:]
    assert os.listdir(tmp_path / "att" / "exits")  # the cold rank's end, recorded
    recorder = {"restartlab", "restartlab.runtime", "restartlab.runtime.rankexit", "restartlab.launchers",
                "restartlab.contracts", "restartlab.contracts.envvars", "restartlab.contracts.layout",
                "restartlab.contracts.rank_exit", "restartlab.contracts.registry"}
    ours = {m for m in imported if m.split(".")[0] == "restartlab"}
    assert ours == recorder | {"restartlab.runtime.warm", "restartlab.runtime.warm.stub", "restartlab.runtime.warm.wire",
                               "restartlab.contracts.placeholders", "restartlab.contracts.signals",
                               "restartlab.contracts.warm_messages"}, sorted(ours)
    others = sorted(m for m in imported - bare - ours if m.split(".")[0] not in sys.stdlib_module_names)
    assert others == [], others
    r, imported = _imports(["-m", "restartlab.runtime.rankexit", "--dir", str(tmp_path / "att2"), "--",
                            sys.executable, "-c", "print('cold')"])
    assert r.returncode == 0 and r.stdout.strip() == "cold", r.stdout + r.stderr[-2000:]
    assert {m for m in imported if m.split(".")[0] == "restartlab"} == recorder - {"restartlab.runtime.rankexit"}  # (__main__)
    assert sorted(m for m in imported - bare if m.split(".")[0] not in sys.stdlib_module_names | {"restartlab"}) == []


def test_every_package_is_installed():
    """setup.cfg lists packages by hand: a folder with an __init__.py missing from the list would
    be left out of an installed (non-editable) restartlab. restartlab.runtime.warm was, until this test."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = {"restartlab.trainer"}
    for d, _, files in os.walk(os.path.join(ROOT, "restartlab")):
        if "__init__.py" in files and "__pycache__" not in d:
            found.add(os.path.relpath(d, ROOT).replace(os.sep, "."))
    assert listed == found, (sorted(found - listed), sorted(listed - found))
