"""docs/alcf.md, followed as written.

Every `restartlab render|preflight|submit` line of its code blocks names a scenario that exists. So
does every `make aurora-expt`/`polaris-expt`. Each renders, with its own flags, into the script the
golden files hold for that machine. Submit runs as `--dry-run`, which renders and submits nothing.
`--after` and the account are kept as the page has them. A page that drifts from the files fails
here."""
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "alcf.md")


def commands():
    out, block = [], False
    with open(PAGE) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                block = not block
                continue
            words = shlex.split(line.split(" #")[0]) if block and line.startswith(("restartlab ", "make ")) else []
            if words[:1] == ["restartlab"] and words[1:2] and words[1] in ("render", "preflight", "submit"):
                out.append((n, words))
            elif words[:1] == ["make"] and words[1:2] and words[1].endswith("-expt"):
                out.append((n, words))
    return out


def as_render(words):
    """The page's line as a `submit --dry-run` (render, preflight: the same scenario and --set)."""
    if words[0] == "make":
        site = words[1][:-len("-expt")]
        account = next(w.split("=", 1)[1] for w in words if w.startswith("ACCOUNT="))
        return ["submit", "--dry-run", f"scenarios/{site}/agpt2b.yaml", "--set", f"job.account={account}"]
    args, keep, i = words[2:], [], 0
    while i < len(args):
        if args[i] in ("-o", "--after", "--poll"):
            i += 2
            continue
        keep.append(args[i])
        i += 1
    return ["submit", "--dry-run", *keep]


def test_the_page_names_each_machines_commands():
    cmds = commands()
    scen = {w for _, ws in cmds for w in ws if w.startswith("scenarios/")}
    assert {"scenarios/aurora/agpt2b.yaml", "scenarios/polaris/agpt2b.yaml"} <= scen, cmds
    made = {ws[1] for _, ws in cmds if ws[0] == "make"}
    assert {"aurora-expt", "polaris-expt"} <= made, cmds
    for _, ws in cmds:
        for w in ws:
            if w.startswith("scenarios/"):
                assert os.path.exists(os.path.join(REPO, w)), w


@pytest.mark.parametrize("line,words", commands(), ids=lambda x: str(x) if isinstance(x, int) else None)
def test_each_command_renders_as_the_page_says(line, words):
    argv = as_render(words)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"docs/alcf.md:{line}: {' '.join(words)}\n{r.stderr[-2000:]}"
    assert r.stdout.startswith("#!/bin/bash\n#PBS -N "), r.stdout[:300]
    assert "Traceback" not in r.stderr
    scen = next(w for w in argv if w.startswith("scenarios/"))
    site = scen.split("/")[1]
    if site in ("aurora", "polaris") and "--smoke" not in argv:
        # the experiment as the golden file has it (same header), with the page's queue
        golden = open(os.path.join(REPO, "tests", "data", "golden", f"{site}-agpt2b.pbs.sh")).read()
        want = [ln for ln in golden.splitlines() if ln.startswith("#PBS") and not ln.startswith("#PBS -o")]
        got = [ln for ln in r.stdout.splitlines() if ln.startswith("#PBS") and not ln.startswith("#PBS -o")]
        q = re.search(r"job\.queue=(\S+)", " ".join(argv))
        if q:
            want = [f"#PBS -q {q.group(1)}" if ln.startswith("#PBS -q") else ln for ln in want]
        assert got == [ln.replace("MYPROJ", re.search(r"job\.account=(\S+)", " ".join(argv)).group(1)) for ln in want]
