"""Does a change keep the report the same? Each experiment directory is copied twice and reported by
two trees of restartlab (`restartlab report --no-plots`, each tree's package first on the path), and
the summaries and reports are compared byte for byte, the copies' paths masked. #64 used it to show
that typing the summary changed none of its bytes.

    python -m tests.compare_reports OLD_TREE NEW_TREE EXPT_DIR...
    git worktree add /tmp/old 59f235c && python -m tests.compare_reports /tmp/old . EXPT_DIR...

Exit 1 when an experiment's exit status, summary or report differs (each named), 0 when none does."""
import os
import shutil
import subprocess
import sys
import tempfile

from restartlab.contracts import layout


def _report(tree: str, expt: str) -> int:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    return subprocess.run([sys.executable, "-m", "restartlab.cli", "report", expt, "--no-plots"], cwd=tree, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600).returncode


def _masked(path: str, root: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read().replace(root.encode(), b"EXPT")
    except FileNotFoundError:
        return b""


def compare(old: str, new: str, expt: str, work: str) -> list:
    """What differs for one experiment: [] when nothing does."""
    copies = {}
    for side, tree in (("old", old), ("new", new)):
        d = os.path.join(work, side)
        shutil.copytree(expt, d)
        copies[side] = (d, _report(tree, d))
    (a, ra), (b, rb) = copies["old"], copies["new"]
    if ra != rb:
        return [f"exit {ra} (old) against {rb} (new)"]
    files = (lambda d: layout.Expt(d).summary, lambda d: layout.Expt(d).report)
    return [os.path.basename(f(a)) for f in files if _masked(f(a), a) != _masked(f(b), b)]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    old, new, expts = argv[0], argv[1], argv[2:]
    differ = 0
    for i, expt in enumerate(expts, 1):
        with tempfile.TemporaryDirectory(prefix="rl-cmp-") as work:
            got = compare(old, new, expt, work)
        if got:
            differ += 1
            print(f"DIFFERS {expt}: {', '.join(got)}")
        print(f"[{i}/{len(expts)}] {'differs' if got else 'same'}: {expt}", file=sys.stderr)
    print(f"compared {len(expts)}: {len(expts) - differ} the same, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
