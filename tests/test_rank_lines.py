"""A rank's output lines stay whole when the launcher merges the ranks' outputs
(restartlab/runtime/pystdio.py, runtime/linebuf/sitecustomize.py).

Found by the soak at caa237c: the plain example's verdict compared 39 of 40 steps. Its baseline's
output read "step 1 loss 3.290171837500rank 1/2 local 1": restartlab gives a Python rank
PYTHONUNBUFFERED=1, unbuffered print() writes its text and its newline apart, and rank 1's line
landed between them, so step 1 was booked without its loss."""
import os
import subprocess
import sys

import pytest

from restartlab import programs
from restartlab.runtime import pystdio
from tests.helpers import MPIEXEC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
PLAIN_PROGRESS = programs.resolve({"adapter": "generic", "progress": r"step (?P<step>\d+) loss (?P<loss>\S+)",
                                   "checkpoints": "{ckpt_dir}/ckpt-(?P<step>\\d+)"})

# print()'s own two writes, the text and then its end, with rank 1's whole line forced between them.
# Rank 0 writes the text and says so (a file). It writes the newline only once rank 1's line is out.
# Both write to one pipe. That is the worst a launcher's merge can do: each write lands whole, in
# the order made.
INTERLEAVED = r"""import os, sys, time
rank = int(os.environ["RANK"])
def wait(name):
    end = time.time() + 60
    while not os.path.exists(name):
        if time.time() > end:
            sys.exit(f"rank {rank}: {name} never came")
        time.sleep(0.01)
if rank == 0:
    sys.stdout.write("step 1 loss 3.290171837500")
    open("0-wrote", "w").close()
    wait("1-wrote")
    sys.stdout.write("\n")
    sys.stdout.flush()
else:
    wait("0-wrote")
    print(f"rank {rank}/{os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']}", flush=True)
    open("1-wrote", "w").close()
"""


def _two_ranks_on_one_pipe(cwd, python_args=()):
    """Ranks 0 and 1 of the program, each started as restartlab starts a rank of yours (rankenv),
    their stdout one pipe; what the pipe carried."""
    r, w = os.pipe()
    procs = []
    try:
        for rank in (0, 1):
            env = dict(os.environ, PMI_RANK=str(rank), PMI_SIZE="2", MPI_LOCALRANKID=str(rank))
            env.pop("PYTHONUNBUFFERED", None)
            procs.append(subprocess.Popen([PY, "-m", "restartlab.runtime.rankenv", "--", PY, *python_args, "-c",
                                           INTERLEAVED], cwd=cwd, env=env, stdout=w, stderr=subprocess.PIPE))
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read().decode()
        p.stderr.close()
    return out


def test_another_ranks_line_never_lands_inside_a_progress_line(tmp_path):
    """Through rankenv, rank 0's line reaches the pipe whole (one write) although rank 1 writes its
    line between print()'s two writes, and the progress line parses with its loss. The control,
    the same ranks with `python -S` (no site, so no line-buffering sitecustomize; PYTHONUNBUFFERED
    as before): the line is cut and the loss lost, as the soak saw. Mutation: rankenv without
    pystdio.line_buffered (PYTHONUNBUFFERED only) -> the first half fails as the control does."""
    (tmp_path / "fixed").mkdir()
    out = _two_ranks_on_one_pipe(str(tmp_path / "fixed"))
    assert out.splitlines() == ["rank 1/2 local 1", "step 1 loss 3.290171837500"], out
    assert programs.parse_progress(PLAIN_PROGRESS, out.splitlines()[1]) == programs.Progress(1, loss=3.2901718375)

    (tmp_path / "control").mkdir()
    out = _two_ranks_on_one_pipe(str(tmp_path / "control"), ("-S",))
    assert out.splitlines()[0] == "step 1 loss 3.290171837500rank 1/2 local 1", out
    assert programs.parse_progress(PLAIN_PROGRESS, out.splitlines()[0]) == programs.Progress(1)


def test_the_sitecustomize_it_hides_still_runs(tmp_path):
    """linebuf/ goes first on PYTHONPATH, and the site's own sitecustomize still runs, once.

    Here the site's sitecustomize is one later on the path. Otherwise it is Debian's, in
    /usr/lib/python3.X. One that fails is said on stderr, as Python says it, and the program runs on."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nopen(os.environ['MARK'], 'a').write('ran\\n')\n")
    env = dict(os.environ, MARK=str(tmp_path / "mark"), PYTHONPATH=str(site))
    pystdio.line_buffered(env)
    pystdio.line_buffered(env)  # once only
    assert env["PYTHONPATH"].split(os.pathsep) == [pystdio.LINEBUF_DIR, str(site)]
    code = "import sys, sitecustomize; print(sys.stdout.line_buffering, sys.stdout.write_through, sitecustomize.__file__)"
    r = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["True", "False", str(site / "sitecustomize.py")], r
    assert (tmp_path / "mark").read_text() == "ran\n" and r.stderr == ""

    (site / "sitecustomize.py").write_text("raise RuntimeError('the site is broken')\n")
    r = subprocess.run([PY, "-c", "import sys; print(sys.stdout.line_buffering)"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "True", r
    assert "Error in sitecustomize" in r.stderr and "RuntimeError: the site is broken" in r.stderr


@pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (pip install mpich)")
def test_the_ranks_of_a_real_launch_print_line_buffered(tmp_path):
    """Each rank's stdout is line-buffered and not written through.

    This holds through the launch every cold rank of yours gets: mpiexec -> the exit recorder ->
    rankenv -> the program."""
    from restartlab.tools.launch import LaunchSpec
    code = "import os, sys; print(os.environ['RANK'], sys.stdout.line_buffering, sys.stdout.write_through)"
    spec = LaunchSpec(python=PY, program=(PY, "-c", code), launcher="hydra", ranks_per_node=2, mpiexec=MPIEXEC,
                      rankenv=True)
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    r = subprocess.run(spec.cold_argv(str(tmp_path)), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    assert sorted(r.stdout.splitlines()) == ["0 True False", "1 True False"], r
