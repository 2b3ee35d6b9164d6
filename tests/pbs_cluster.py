"""A real OpenPBS 23.06 cluster for the tests (conftest `pbs`).

The recipe in ../shared/recipes/openpbs (RESTARTLAB_OPENPBS_RECIPE elsewhere) starts a server,
scheduler, comm and three MoMs. Each host is a network namespace of its own on this machine:
rlpbs-head, rlpbs-n1, rlpbs-n2. Their traffic stays on the namespaces' own bridge. Jobs run as the
recipe's ordinary user (pbsuser), as on a real cluster. PBS's MoM ignores root-owned processes: no
SIGKILL after kill_delay, no accounting. So a root job would not show PBS's real kill semantics.

The user submits from the head, like from a login node: `as_user` runs a command there as that
user, with the PBS commands on PATH."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RECIPE = os.environ.get("RESTARTLAB_OPENPBS_RECIPE") or os.path.join(REPO, "..", "shared", "recipes", "openpbs")
HOW = ("an OpenPBS cluster: the recipe's start-cluster.sh (set RESTARTLAB_OPENPBS_RECIPE to its folder), "
       "or run the PBS tier on a PBS login node")
# The commands the recipe wraps. Its bin/ holds them as links to rlpbs-exec, which a copy may flatten.
# KEEP_VAR names a directory to move the session's work directory (the jobs' experiments) into at the
# end, instead of removing it. tests/soak.py sets it, so a failed PBS test's experiment is still there.
KEEP_VAR = "RESTARTLAB_PBS_KEEP_WORK"
TOOLS = ("qsub", "qstat", "qdel", "qmgr", "qalter", "qhold", "qrls", "qsig", "qselect", "qrerun", "qrun",
         "pbsnodes", "pbsdsh", "pbs_tmrsh", "printjob", "tracejob")
KILL_DELAY = 3  # s between PBS's SIGTERM and SIGKILL (qdel, walltime); PBS's default is 10
RLPBS_ROOT = os.environ.get("RLPBS_ROOT", "/var/spool/rlpbs")
# the comment PBS's server puts on a job it holds once its run_count passes 20 (OpenPBS 23.06,
# src/server/req_runjob.c: check_failed_attempts)
HELD_BY_PBS = "too many failed attempts to run"
# the daemons' logs under each host's PBS_HOME, and the recipe's own (start, stop)
LOG_DIRS = ("server_logs", "sched_logs", "comm_logs", "mom_logs")


class Cluster:
    def __init__(self, recipe, bindir, workdir, user, env):
        self.recipe, self.bindir, self.workdir, self.user, self.info = recipe, bindir, workdir, user, env
        self.exec = os.path.join(recipe, "bin", "rlpbs-exec")
        self.tmrsh = os.path.join(recipe, "bin", "rlpbs-tmrsh")
        self.nodes = env.get("RLPBS_NODES", "").split()

    def env(self, **kw):
        """Our environment with the PBS commands first on PATH (they run on the head as root)."""
        env = dict(os.environ, PATH=self.bindir + os.pathsep + os.environ["PATH"])
        env.update(kw)
        return env

    def run(self, argv, timeout=60, env=None, **kw):
        """A PBS command as root (the cluster's manager) -> CompletedProcess."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env or self.env(), **kw)

    def user_argv(self, argv, env=None):
        """`argv` wrapped to run as the cluster's user on the head (a login node), PBS commands on PATH."""
        path = os.pathsep.join([self.bindir, os.path.dirname(sys.executable), "/usr/bin", "/bin"])
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        return [self.exec, "-u", self.user, "env", f"PATH={path}", *extra, *argv]

    def as_user(self, argv, timeout=120, cwd=None, env=None):
        """`argv` as the cluster's user on the head (a login node), PBS commands on PATH."""
        return subprocess.run(self.user_argv(argv, env), capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or self.workdir, env=self.env())

    @contextlib.contextmanager
    def scheduling_off(self):
        """For the block, the server takes jobs and starts none (qmgr: scheduling = False).

        A job submitted then stays queued until the block ends, on purpose, not by a race."""
        self.qmgr("set server scheduling = False")
        try:
            yield
        finally:
            self.qmgr("set server scheduling = True")

    def qmgr(self, cmd):
        r = self.run(["qmgr", "-c", cmd])
        assert r.returncode == 0, f"qmgr -c {cmd!r}: {r.stderr}"
        return r.stdout

    def qmgr_all(self, cmds):
        """Several qmgr commands in one qmgr, on its stdin.

        The command starts once through the host's namespaces, not once each (about 0.14 s apiece).
        With -a, the first command that fails ends it with a non-zero exit (OpenPBS 23.06,
        src/cmds/qmgr.c). This asserts the exit is zero."""
        if not cmds:
            return ""
        r = self.run(["qmgr", "-a"], input="".join(c + "\n" for c in cmds))
        assert r.returncode == 0, f"qmgr -a {cmds!r}: {r.stdout[-1000:]} {r.stderr}"
        return r.stdout

    def job(self, jid):
        """qstat -f -F json -x of one job (history included), or None when unknown."""
        r = self.run(["qstat", "-f", "-F", "json", "-x", jid])
        if r.returncode or not r.stdout.strip():
            return None
        return next(iter(json.loads(r.stdout).get("Jobs", {}).values()), None)

    def wait_job(self, jid, states, timeout):
        end, rec = time.time() + timeout, None
        while time.time() < end:
            rec = self.job(jid)
            if rec and rec.get("job_state") in states:
                return rec
            if rec and rec.get("job_state") == "H" and "H" not in states and HELD_BY_PBS in rec.get("comment", ""):
                # PBS gave up starting it: it stays held; say so now, with what the daemons logged
                raise AssertionError(f"job {jid}: PBS held it after {rec.get('run_count')} failed starts "
                                     f"(Exit_status {rec.get('Exit_status')}):\n{self.why_not_started(jid)}")
            time.sleep(0.5)
        raise AssertionError(f"job {jid} did not reach {states} in {timeout}s: {rec}")

    def why_not_started(self, jid, lines=12):
        """Where a start of the job failed and why.

        It gives tracejob's account of the job and each host's MoM log lines that name it. For a
        host whose log never names it, it gives that log's errors."""
        trace = self.run(["tracejob", "-n", "2", jid]).stdout.splitlines()
        out = ["\n".join(ln for ln in trace if "  A  " not in ln)[-2500:]]  # not the accounting records
        seq = jid.split(".")[0]
        for host in self.nodes:
            path = os.path.join(RLPBS_ROOT, host, "home", "mom_logs", time.strftime("%Y%m%d"))
            try:
                with open(path, errors="replace") as f:
                    log = f.read().splitlines()
            except OSError as e:
                out.append(f"{host}: no MoM log ({e})")
                continue
            mine = [ln for ln in log if f";{seq}." in ln or f" {seq}." in ln]
            picked = mine or [ln for ln in log if ";0001;" in ln]
            out.append(f"{host} MoM log, {'lines naming the job' if mine else 'its errors'}:\n  " +
                       "\n  ".join(picked[-lines:]))
        return "\n".join(out)

    def user_dir(self, name):
        """A new directory the cluster's user owns, under the session's work dir."""
        d = tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir)
        os.chmod(d, 0o755)
        shutil.chown(d, self.user, self.user)
        return d

    def write(self, path, text, mode=0o644):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        shutil.chown(path, self.user, self.user)
        return path

    def mom_pid(self, host):
        """The pid of `host`'s pbs_mom (its lock file), or None."""
        try:
            with open(os.path.join(RLPBS_ROOT, host, "home", "mom_priv", "mom.lock")) as f:
                pid = int(f.read().split()[0])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return pid if b"pbs_mom" in f.read() else None
        except (OSError, ValueError, IndexError):
            return None

    def start_mom(self, host):
        r = subprocess.run([self.exec, "-n", host, "/opt/pbs/libexec/pbs_init.d", "start"], capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout + r.stderr

    def node_state(self, host):
        r = self.run(["pbsnodes", "-v", host])
        return next((ln.split("=", 1)[1].strip() for ln in r.stdout.splitlines() if ln.strip().startswith("state =")), None)

    def hydra_launch(self):
        """Scenario lines that launch with MPICH's Hydra.

        Hydra is named by its path, because a PBS job's login shell resets PATH. It reaches the
        other hosts through PBS's TM interface, with the recipe's rsh-like wrapper of pbs_tmrsh.
        There is no sshd, and this Hydra has no -bootstrap pbs."""
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        return (f"  mpiexec: {mpiexec}\n"
                f"  launcher_args: [-launcher, rsh, -launcher-exec, {self.tmrsh}]\n")


def start(missing):
    """Start the recipe's cluster and return a Cluster; `missing(reason)` skips (or fails)."""
    if os.geteuid() != 0:
        missing("the OpenPBS test cluster needs root (network namespaces): " + HOW)
    start_sh = os.path.join(RECIPE, "start-cluster.sh")
    if not os.path.exists(start_sh):
        missing(f"no OpenPBS recipe at {os.path.abspath(RECIPE)}: " + HOW)
    was_up = os.path.exists("/run/netns/rlpbs-head")  # someone's cluster: left running at the end
    if was_up:
        purge_jobs()
    r = _start(start_sh)
    if r.returncode and not was_up:
        # a server's datastore keeps jobs across restarts (and reruns them): start from nothing
        _stop(purge=True)
        r = _start(start_sh)
    if r.returncode:
        if not was_up:
            _stop(purge=True)
        missing(f"start-cluster.sh failed (rc {r.returncode}): {r.stdout[-1500:]}")
    env = {}
    with open(os.path.join(RLPBS_ROOT, "cluster.env")) as f:
        for line in f:
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.strip().split("=", 1)
                env[k] = v.strip('"')
    bindir = tempfile.mkdtemp(prefix="rl-pbs-bin-", dir="/tmp")
    os.chmod(bindir, 0o755)
    for t in TOOLS:
        os.symlink(os.path.join(os.path.abspath(RECIPE), "bin", "rlpbs-exec"), os.path.join(bindir, t))
    user = env.get("RLPBS_TEST_USER", "pbsuser")
    # not under pytest's tmp dirs: those are 0700 root's, and the jobs run as the user
    workdir = tempfile.mkdtemp(prefix="rl-pbs-", dir="/tmp")
    os.chmod(workdir, 0o755)
    c = Cluster(os.path.abspath(RECIPE), bindir, workdir, user, env)
    c.was_up = was_up
    probe = c.as_user([sys.executable, "-c", "import restartlab.cli, mpi4py, torch"])
    if probe.returncode:
        stop(c)
        missing(f"the PBS jobs run as {user} (as on a real cluster), who cannot run {sys.executable} "
                f"({(probe.stderr or probe.stdout).strip()[-300:]}): make the venv from a Python every user "
                f"can read, e.g. `make install PY=/usr/bin/python3` (.ci/run does)")
    c.qmgr(f"set queue workq kill_delay = {KILL_DELAY}")
    # Define what ALCF's servers define and the shipped PBS profiles ask for: the `filesystems`
    # resource and the `prod` and `debug` queues. Their directives must reach a server that knows them.
    if "filesystems" not in c.run(["qmgr", "-c", "list resource filesystems"]).stdout:
        c.qmgr("create resource filesystems type=string")
    # Polaris's chunks name their system ("select=1:system=polaris", ALCF's example job scripts).
    # It is a host-level string resource. The test hosts do not offer it, so such a job is only
    # ever held here.
    if "system" not in c.run(["qmgr", "-c", "list resource system"]).stdout:
        c.qmgr("create resource system type=string,flag=h")
    plain_queues(c)
    return c


PLAIN = ("prod", "debug")  # ALCF's production queue and the debug queue the ALCF profiles ask for


def queues(c) -> set:
    """The server's queues, by name (one qstat)."""
    r = c.run(["qstat", "-Q", "-f", "-F", "json"])
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout).get("Queue", {}))


def jobs(c) -> dict:
    """Every job the server knows, finished ones too (-x): id -> its qstat -f record (one qstat)."""
    r = c.run(["qstat", "-x", "-f", "-F", "json"])
    return json.loads(r.stdout).get("Jobs", {}) if r.returncode == 0 and r.stdout.strip() else {}


def plain_queues(c):
    """`prod` and `debug` as plain execution queues without limits, where they are not there."""
    c.qmgr_all([cmd for q in sorted(set(PLAIN) - queues(c)) for cmd in (
        f"create queue {q} queue_type=execution", f"set queue {q} enabled = True", f"set queue {q} started = True")])


@contextlib.contextmanager
def site_queues(c, site):
    """A site's queue table on the server for the block, in place of the plain `prod` and `debug`.

    The table is tests/data/alcf_queues/SITE.qmgr: ALCF's published limits as qmgr commands, each
    source in its header. Afterwards the table's queues are deleted (their jobs first), and the
    plain ones come back. The PBS tests share one server on one worker, one at a time. So no other
    test's job is in them."""
    with open(os.path.join(HERE, "data", "alcf_queues", f"{site}.qmgr")) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    made = [ln.split()[2] for ln in lines if ln.startswith("create queue ")]
    def drop():
        present = queues(c) & set(made)
        # -x: finished jobs too (their history holds the queue); one qstat, one qdel, one qmgr
        ids = [j for j, rec in jobs(c).items() if rec.get("queue") in present] if present else []
        if ids:
            c.run(["qdel", "-x", "-W", "force", *ids])
        c.qmgr_all([f"delete queue {q}" for q in made if q in present])
    drop()
    try:
        c.qmgr_all(lines + [f"set queue {q} {a} = True" for q in made for a in ("enabled", "started")])
        yield made
    finally:
        drop()
        plain_queues(c)


def _start(start_sh):
    return subprocess.run(["bash", start_sh], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)


def _stop(purge):
    subprocess.run(["bash", os.path.join(RECIPE, "stop-cluster.sh"), *(["--purge"] if purge else [])],
                   capture_output=True, text=True, timeout=300)


def _pbs(tool, *args):
    exe = os.path.join(RECIPE, "bin", "rlpbs-exec")
    return subprocess.run([exe, "/opt/pbs/bin/" + tool, *args], capture_output=True, text=True, timeout=60)


def purge_jobs():
    """Every job the server still has, deleted (forced): none outlives the session, and none of
    a crashed session's is rerun into this one."""
    ids = _pbs("qselect").stdout.split()
    if ids:
        _pbs("qdel", "-W", "force", *ids)


def stop(c):
    """The session's end: its jobs deleted, and the cluster stopped with its state (the server's
    datastore) removed, unless the cluster was up before the session."""
    purge_jobs()
    keep = os.environ.get(KEEP_VAR)
    if keep:  # the soak: the cluster's logs kept for its failure records, before the purge removes them
        keep_logs(os.path.join(keep, "pbs-logs"))
    if not c.was_up:
        _stop(purge=True)
    if c:
        shutil.rmtree(c.bindir, ignore_errors=True)
        if keep:  # and the jobs' experiment directories
            shutil.move(c.workdir, os.path.join(keep, os.path.basename(c.workdir)))
        else:
            shutil.rmtree(c.workdir, ignore_errors=True)


def keep_logs(dest):
    """Copy the daemons' logs and the recipe's start and stop logs to `dest`.

    The daemons are the server, scheduler, comm and every MoM. The logs are text files, a few MB at
    most for a suite's session."""
    for host in sorted(os.listdir(RLPBS_ROOT)) if os.path.isdir(RLPBS_ROOT) else ():
        for d in LOG_DIRS:
            src = os.path.join(RLPBS_ROOT, host, "home", d)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, host, d), dirs_exist_ok=True)
    if os.path.isdir(os.path.join(RLPBS_ROOT, "log")):
        shutil.copytree(os.path.join(RLPBS_ROOT, "log"), os.path.join(dest, "recipe"), dirs_exist_ok=True)
