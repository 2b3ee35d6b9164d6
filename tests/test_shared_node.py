"""Safe on a shared node, with real processes of a second user.

The tests create that user. They run as root, as CI does. Stage dirs are private to the job's user
and never followed through a symlink. The killer, `inject` and teardown signal only this user's
processes, root included."""
import json
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from restartlab.contracts import ckptdir, layout, private
from restartlab.runtime import killer
from restartlab.trainer.ckpt_stage_dir import STAGE_MARKER, STAGE_PARENT
from tests.helpers import run_trainer, wait_for

OTHER = "rl-other"
SLEEPER = ["/bin/sleep", "300"]  # a system binary: the second user may not run this venv's python
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def other():
    """(uid, gid, name) of a second user, created for these tests (and removed after) where it
    did not exist."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second user and runs its processes (CI runs as root)")
    made = False
    try:
        pw = pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
                       check=True, capture_output=True)
        made, pw = True, pwd.getpwnam(OTHER)
    yield pw.pw_uid, pw.pw_gid, OTHER
    if made:
        subprocess.run(["userdel", OTHER], capture_output=True)


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:  # by PID: the processes this test started
        if p.poll() is None:
            p.kill()
        p.wait()


def spawn(tag, user=None):
    env = dict(os.environ, **{killer.TAG_VAR: tag})
    kw = dict(user=user[0], group=user[1], extra_groups=[]) if user else {}
    return subprocess.Popen(SLEEPER, env=env, cwd="/", **kw)


def tagged_all_users(tag):
    """Every process with the tag, whoever runs it (the test's own view, not the killer's)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(killer.TAG_VAR) == tag:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


# ---------------------------------------------------------------- only your own processes
def test_kill_ranks_as_root_spares_another_users_tagged_process(other, procs):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    mine, theirs = spawn(tag), spawn(tag, other)
    procs += [mine, theirs]
    wait_for(lambda: len(tagged_all_users(tag)) == 2, 10, "both tagged processes")
    assert psutil.Process(theirs.pid).uids().real == other[0]
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "kill-ranks", "--tag", tag],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == killer.EXIT_KILLED, r.stdout + r.stderr
    receipt = json.loads(r.stdout)
    assert receipt["pids"] == [mine.pid]
    assert receipt["skipped_other_user"] == {str(theirs.pid): other[2]}
    assert mine.wait(timeout=10) == -9
    time.sleep(0.5)
    assert theirs.poll() is None  # alive: another user's, tag or not


def test_inject_as_root_spares_another_users_tagged_process(other, procs, tmp_path):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    mine, theirs = spawn(tag), spawn(tag, other)
    procs += [mine, theirs]
    wait_for(lambda: len(tagged_all_users(tag)) == 2, 10, "both tagged processes")
    phase = str(tmp_path / "phase")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "inject", "--every", "0.5s", "--max-kills", "1",
                        "--tag", tag, "--fanout", "local", "--phase-dir", phase],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = [json.loads(x) for x in open(layout.Phase(phase).injections)][-1]
    assert rec["receipts"][0]["pids"] == [mine.pid], rec
    assert rec["receipts"][0]["skipped_other_user"] == {str(theirs.pid): other[2]}, rec
    assert mine.wait(timeout=10) == -9 and theirs.poll() is None


def test_teardown_as_root_spares_another_users_tagged_process(other, procs):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    mine, theirs = spawn(tag), spawn(tag, other)
    procs += [mine, theirs]
    wait_for(lambda: len(tagged_all_users(tag)) == 2, 10, "both tagged processes")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "teardown", "--tag", tag],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "1 process(es) in 1 tree(s)" in r.stdout, r.stdout + r.stderr
    assert mine.wait(timeout=10) == -9
    time.sleep(0.5)
    assert theirs.poll() is None


# ---------------------------------------------------------------- private paths
def test_private_dir_rules(tmp_path, other):
    d = str(tmp_path / "stage")
    assert private.ensure_dir(d) and stat.S_IMODE(os.lstat(d).st_mode) == 0o700
    assert not private.ensure_dir(d)  # ours already: fine
    target = tmp_path / "target"
    target.mkdir()
    link = str(tmp_path / "link")
    os.symlink(target, link)
    with pytest.raises(private.UnsafePath, match=r"link: refused: a symlink \(to .*target\)"):
        private.ensure_dir(link)
    with pytest.raises(private.UnsafePath, match="a symlink"):
        private.remove_tree(link)
    assert os.path.islink(link) and target.is_dir()
    theirs = str(tmp_path / "theirs")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, other[0], other[1])
    with pytest.raises(private.UnsafePath, match=f"theirs: refused: owned by {other[2]}, not root"):
        private.ensure_dir(theirs)
    wide = str(tmp_path / "wide")
    os.mkdir(wide)
    os.chmod(wide, 0o755)
    with pytest.raises(private.UnsafePath, match="mode 755 lets others in"):
        private.ensure_dir(wide)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(private.UnsafePath, match="not a directory"):
        private.ensure_dir(str(f))
    # a directory above that someone else could rename: refused
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(private.UnsafePath, match="writable by others"):
        private.ensure_dir(str(open_dir / "stage"))
    os.chmod(open_dir, 0o1777)  # sticky, as /tmp: fine
    assert private.ensure_dir(str(open_dir / "stage"))
    made = private.make_dir(str(tmp_path), "restartlab-x-")
    assert os.path.basename(made).startswith("restartlab-x-") and stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    with private.open_new(os.path.join(made, "probe")) as fh:
        fh.write(b"x")
    assert stat.S_IMODE(os.lstat(os.path.join(made, "probe")).st_mode) == 0o600
    os.symlink(target / "planted", os.path.join(made, "probe2"))
    with pytest.raises(FileExistsError):
        private.open_new(os.path.join(made, "probe2"))
    assert not (target / "planted").exists()


def _watch(paths_fn, stop, seen):
    """Polls every 5 ms until `stop` and records every path paths_fn() yields, with its lstat mode and owner.

    This is a look during the save, not only after it."""
    while not stop.is_set():
        for p in paths_fn():
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            seen[p] = (stat.S_IMODE(st.st_mode), st.st_uid, stat.S_ISDIR(st.st_mode))
        time.sleep(0.005)


def _walk(root):
    for d, dirs, files in os.walk(root):
        yield d
        for n in dirs + files:
            yield os.path.join(d, n)


def _async_run(tmp_path, stage, extra=(), env=None):
    d = str(tmp_path)
    a = ["--model", "tiny", "--train-iters", "6", "--save-interval", "2", "--async-ckpt",
         "--ckpt-dir", os.path.join(d, "c"), "--outdir", d, *extra]
    if stage is not None:
        a += ["--ckpt-stage-dir", stage]
    return run_trainer(2, a, env=env)


@pytest.mark.multirank
def test_symlink_at_the_stage_path_is_never_followed(tmp_path, other):
    """A symlink planted at the given stage path, by anyone.

    - It is refused with one line.
    - The saves go straight to the checkpoint dir.
    - Nothing is ever written through the link (watched during the run).
    - The link and its target are untouched."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "stage"
    os.symlink(target, link)
    stop, seen = threading.Event(), {}
    w = threading.Thread(target=_watch, args=(lambda: _walk(str(target)), stop, seen))
    w.start()
    try:
        r = _async_run(tmp_path, str(link))
    finally:
        stop.set()
        w.join()
    assert r.returncode == 0, r.stdout[-3000:]
    assert f"stage dir refused: {link}: refused: a symlink (to {target})" in r.stdout, r.stdout[-3000:]
    assert f"writing straight to {tmp_path / 'c'}" in r.stdout
    assert list(seen) == [str(target)] and os.listdir(target) == []
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert ckptdir.newest_complete_step(str(tmp_path / "c"), checksums=True) == 6


@pytest.mark.multirank
def test_a_stage_path_of_another_user_is_refused_and_training_goes_on(tmp_path, other):
    theirs = tmp_path / "stage"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other[0], other[1])
    r = _async_run(tmp_path, str(theirs))
    assert r.returncode == 0, r.stdout[-3000:]
    lines = [x for x in r.stdout.splitlines() if "stage dir refused" in x]
    assert len(lines) == 1 and f"{theirs}: refused: owned by {other[2]}, not root" in lines[0], r.stdout[-3000:]
    assert os.listdir(theirs) == [] and os.lstat(theirs).st_uid == other[0]
    assert ckptdir.newest_complete_step(str(tmp_path / "c"), checksums=True) == 6


@pytest.mark.multirank
def test_a_refused_stage_fails_every_save_with_on_save_error_abort(tmp_path, other):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "stage")
    r = _async_run(tmp_path, str(tmp_path / "stage"), ["--on-save-error", "abort"])
    assert r.returncode != 0
    assert f"save at step 2 failed: {tmp_path / 'stage'}: refused: a symlink" in r.stdout, r.stdout[-3000:]
    assert "Traceback" not in r.stdout and os.listdir(target) == []
    assert ckptdir.newest_complete_step(str(tmp_path / "c")) is None


@pytest.mark.multirank
def test_default_stage_is_fresh_private_and_leaves_others_alone(tmp_path, other):
    """The default stage dir, with the checkpoint dir on another file system than /tmp (here /dev/shm).

    - It is a fresh directory with an unguessable name, 0700. Its files are 0600 while a save is
      staged. A delay holds the save there while a watcher looks.
    - What was planted under the default names beforehand is neither followed nor removed. Here
      that is a symlink to a directory holding our marker, and a directory of another user.
    - Nothing of ours is left after the run."""
    shm = f"/dev/shm/rl-test-{uuid.uuid4().hex[:8]}"
    os.mkdir(shm, 0o700)
    job = f"t{uuid.uuid4().hex[:6]}"
    node = os.uname().nodename
    prefix = os.path.join(STAGE_PARENT, f"restartlab-{job}-{node}-")
    bait = tmp_path / "bait"
    (bait / "step-00000002").mkdir(parents=True)
    (bait / STAGE_MARKER).touch()
    planted = [prefix + "link", prefix + "theirs"]
    os.symlink(bait, planted[0])
    os.mkdir(planted[1], 0o700)
    open(os.path.join(planted[1], STAGE_MARKER), "w").close()
    os.chown(planted[1], other[0], other[1])
    stop, seen, attacks = threading.Event(), {}, {}

    def ours():
        import glob
        for p in glob.glob(prefix + "*"):
            if p not in planted:
                yield from _walk(p)

    def attack():
        """While the save is held in the stage dir, the other user attacks it.

        The user tries to rename it away, to plant a symlink inside it, and to read a staged shard.
        All must fail: 0700, sticky /tmp."""
        while not stop.is_set() and not attacks:
            shard = next((p for p in list(seen) if p.endswith(".distcp")), None)
            if shard:
                root = prefix + shard[len(prefix):].split("/")[0]
                for what, argv in (("rename", ["/bin/mv", root, root + ".stolen"]),
                                   ("plant", ["/bin/ln", "-s", str(bait), os.path.join(os.path.dirname(shard), "x")]),
                                   ("read", ["/bin/cat", shard])):
                    attacks[what] = subprocess.run(argv, user=other[0], group=other[1], extra_groups=[],
                                                   capture_output=True, cwd="/").returncode
            time.sleep(0.01)
    w = threading.Thread(target=_watch, args=(ours, stop, seen))
    w.start()
    a = threading.Thread(target=attack)
    a.start()
    try:
        assert not ckptdir.same_file_system(STAGE_PARENT, shm)
        d = str(tmp_path)
        r = run_trainer(2, ["--model", "tiny", "--train-iters", "4", "--save-interval", "2", "--async-ckpt",
                            "--ckpt-dir", os.path.join(shm, "c"), "--outdir", d],
                        env={"PBS_JOBID": job,  # the owner slow to make the dir; the save held in it
                             "RESTARTLAB_DELAY": "stage-open:0:0:2,staged:2:0:1.5,staged:2:1:1.5"})
        stop.set()
        w.join()
        a.join()
        assert r.returncode == 0, r.stdout[-3000:]
        assert ckptdir.newest_complete_step(os.path.join(shm, "c"), checksums=True) == 4
        assert set(attacks) == {"rename", "plant", "read"} and all(attacks.values()), attacks  # each refused
        dirs = {p: m for p, (m, uid, isdir) in seen.items() if isdir}
        files = {p: m for p, (m, uid, isdir) in seen.items() if not isdir}
        assert any(p.endswith(".distcp") for p in files), seen  # the watcher saw the staged save
        assert all(m == 0o700 for m in dirs.values()), dirs
        assert all(m == 0o600 for m in files.values()), files
        assert all(uid == 0 for _, uid, _ in seen.values())
        roots = {p[len(prefix):].split("/")[0] for p in seen}
        assert len(roots) == 1 and len(roots.pop()) >= 6  # one fresh dir, an unguessable name
        assert (bait / "step-00000002").is_dir() and (bait / STAGE_MARKER).exists()  # not followed
        assert os.path.islink(planted[0]) and os.path.isdir(planted[1])
        assert "left alone" in r.stdout and f"owned by {other[2]}" in r.stdout
        import glob
        assert sorted(glob.glob(prefix + "*")) == sorted(planted)  # nothing of ours left
    finally:
        stop.set()
        import shutil
        shutil.rmtree(shm, ignore_errors=True)
        os.unlink(planted[0])
        shutil.rmtree(planted[1], ignore_errors=True)


# ---------------------------------------------------------------- secrets stay out of files
SECRET_SCENARIO = """name: sec
extends: local.yaml
trainer: {{train_iters: 30, save_interval: 5}}
launch:
  env: {{RL_TEST_TOKEN: "{token}", PLAIN_VAR: visible}}
failures: {{schedule: {{at_steps: [10]}}}}
phases: [{{name: sync, checkpoint: sync}}]
"""


def _files_holding(root, needle: bytes):
    out = []
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            try:
                with open(p, "rb") as f:
                    if needle in f.read():
                        out.append(p)
            except OSError:
                pass
    return out


@pytest.mark.multirank
def test_a_launch_env_secret_reaches_the_ranks_and_no_file(tmp_path):
    """A `*_TOKEN` in launch.env reaches every rank, and no file of the experiment holds its value.

    Every rank has it in its environment. The test reads it from /proc while the run goes on,
    through a kill and a relaunch. No file holds the value:
    - not the job script, which checks the variable by name;
    - not the scenario copy, which holds a ${NAME} reference;
    - not the logs, metrics or report.
    A plain variable is still passed as before."""
    from tests.helpers import job_tag
    token = f"s3cr3t-{uuid.uuid4().hex}"
    scen = tmp_path / "sec.yaml"
    scen.write_text(SECRET_SCENARIO.format(token=token))
    d = tmp_path / "expt"
    p = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "run", str(scen), "--expt-dir", str(d), "--plain",
                          "--set", "collection.plots=false"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        wait_for(lambda: os.path.exists(layout.Expt(str(d)).job_script), 60, "the job script")
        tag = job_tag(str(d))
        envs = {}

        def ranks_seen():
            for pid in killer.find_tagged(tag):
                try:
                    env = psutil.Process(pid).environ()
                except psutil.Error:
                    continue
                if "PMI_RANK" in env:
                    envs[pid] = env
            return len(envs) >= 2
        wait_for(ranks_seen, 120, "two ranks")
        out, _ = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-3000:]
    assert all(e.get("RL_TEST_TOKEN") == token and e.get("PLAIN_VAR") == "visible" for e in envs.values()), \
        [(e.get("RL_TEST_TOKEN"), e.get("PLAIN_VAR")) for e in envs.values()]
    assert _files_holding(str(d), token.encode()) == []
    assert token not in out
    text = open(layout.Expt(str(d)).job_script).read()
    assert '"${RL_TEST_TOKEN:?' in text and "PLAIN_VAR visible" in text
    assert "RL_TEST_TOKEN: ${RL_TEST_TOKEN}" in open(layout.Expt(str(d)).scenario).read()
    assert os.path.exists(layout.Expt(str(d)).report)


def test_secret_by_reference_and_on_the_submit_line(tmp_path):
    """`${NAME}` in launch.env takes the value from the environment restartlab runs in.

    - When it is missing: exit 2, one line, nothing run.
    - PBS's qsub gets `-v NAME`. The value comes from its environment, never on the command line.
    - render never writes the value."""
    from restartlab import scenario, schedulers
    scen = tmp_path / "ref.yaml"
    scen.write_text(SECRET_SCENARIO.format(token="${RL_TEST_TOKEN}"))
    env = {k: v for k, v in os.environ.items() if k != "RL_TEST_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", str(scen), "--expt-dir", str(tmp_path / "e")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "launch.env.RL_TEST_TOKEN: ${RL_TEST_TOKEN} asks for the value from the " \
        "environment, and RL_TEST_TOKEN is not set here" in r.stderr and "Traceback" not in r.stderr, r.stderr
    sc = scenario.load(str(scen))
    assert scenario.secret_values(sc, {"RL_TEST_TOKEN": "v1"}) == {"RL_TEST_TOKEN": "v1"}
    script = layout.Expt(str(tmp_path / "r")).job_script
    assert schedulers.get("pbs").submit_cmd(script, ["RL_TEST_TOKEN"]) == ["qsub", "-v", "RL_TEST_TOKEN", script]
    assert schedulers.get("pbs").chain_cmd("1.pbs", script, ["A_KEY"])[-3:] == ["-v", "A_KEY", script]
    assert [scenario.is_secret(n) for n in ("WANDB_API_KEY", "HF_TOKEN", "MY_SECRET", "DB_PASSWORD", "KEYS",
                                            "MONKEY", "TOKENIZERS_PARALLELISM")] == [True] * 4 + [False] * 3
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "render", str(scen), "--scheduler", "pbs",
                        "-o", script], capture_output=True, text=True,
                       env=dict(env, RL_TEST_TOKEN="v2-value"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert _files_holding(str(tmp_path / "r"), b"v2-value") == []
    from restartlab import launchers
    for name in launchers.names():  # forwarded by name: Open MPI needs -x, the others pass their environment on
        argv = launchers.build(name, nodes=1, ppn=2, rank_env={"PLAIN": "1"}, forward=("RL_TEST_TOKEN",))
        assert ("RL_TEST_TOKEN" in argv) == (name == "openmpi") and not any("v2-value" in t for t in argv), argv
    sh = subprocess.run(["shellcheck", script], capture_output=True, text=True)
    assert sh.returncode == 0, sh.stdout  # the by-name check line is clean shell (.ci/run installs shellcheck)
