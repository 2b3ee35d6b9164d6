import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from tests import helpers  # (also makes `tests` importable as a package)

HERE = os.path.dirname(os.path.abspath(__file__))
# CI sets this: a test that needs a part of the machine (mpiexec, the private Slurm) fails rather
# than skips when that part is missing.
REQUIRE_ALL = os.environ.get("RESTARTLAB_REQUIRE_ALL") == "1"
SLURM_NODES, SLURM_CPUS = 3, 4  # three Slurm nodes on this one machine (a spare), 4 slots each
# torch's JIT-built extensions (DeepSpeed's CPU communication op) go in this venv's own folder,
# where `make test` built them. Every other venv (a clone's) rebuilds the shared
# ~/.cache/torch_extensions. A build inside a test's first DeepSpeed launch cost it 75 s under CI's load.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch-extensions"))


def _missing(reason):
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (RESTARTLAB_REQUIRE_ALL=1: not skipping)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def stop_trainer_pool():
    """The warm pool the trainer tests fork their ranks from (helpers.trainer_pool) ends with the
    session that started it."""
    yield
    helpers.stop_trainer_pool()


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    """wandb importable (pip install restartlab[wandb]; `make install` installs it with the test
    extras) and set to offline with its settings under the test's own directory."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        _missing("wandb is not installed (pip install 'restartlab[wandb]')")
    for k, v in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "wb-config"),
                 "WANDB_CACHE_DIR": str(tmp_path / "wb-cache"), "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(k, v)


# ---------------------------------------------------------------- parallel runs (pytest-xdist)
# make test runs the suite on 2 workers with --dist loadgroup. A test goes to any worker.
# The exception: tests that share something that must exist once go to one worker together
# (the group below). Each worker is its own pytest session. A session or module fixture is built
# once per worker that needs it. So these keep their tests on one worker:
# the Slurm and PBS clusters (one per machine: their ports, namespaces, users),
# and every module fixture (an experiment several tests assert on).
# A test that must have the machine to itself would say so with the `alone` marker.
# make test runs those after the rest, on one worker. Three tests have it: they failed beside a
# second worker.
def _group(item) -> "str | None":
    names = item.fixturenames
    # tests/test_schedulers.py: the cluster the test's parameter names (first: such a test may take
    # a fixture that names the other cluster's fixture too)
    callspec = getattr(item, "callspec", None)
    if "cluster" in names and callspec is not None and callspec.params.get("cluster"):
        return callspec.params["cluster"]
    for shared in ("slurm", "pbs"):
        if shared in names:
            return shared
    for name in names:
        for d in item._fixtureinfo.name2fixturedefs.get(name, ()):
            if d.scope != "function" and getattr(d.func, "__module__", "").startswith("tests"):
                return item.nodeid.split("::")[0]  # a module (or wider) fixture of ours: its file
    return None


def _long(item) -> bool:
    """Ranks or a job script run for real: seconds to a minute (the rest: milliseconds)."""
    return "multirank" in item.keywords or "slow" in item.keywords


# tryfirst: xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    groups, long_groups = {}, set()
    for item in items:
        group = groups[item] = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            if _long(item):
                long_groups.add(group)
    # The long tests go first. xdist hands out the groups (largest first), then the tests on their
    # own, in this order. So the multi-rank ones (seconds to a minute each) start early, and the unit
    # tests (milliseconds) fill the workers at the end, not the other way round. A group moves as one.
    # Its module fixture is then built once in a run without xdist too. The sort is stable, so the
    # order within each kind, and every worker's collection, stays the same.
    items.sort(key=lambda item: (groups[item] not in long_groups) if groups[item] else not _long(item))
    if shutil.which("mpiexec"):
        return
    why = "no mpiexec on PATH (pip install mpich)"
    if REQUIRE_ALL and any("multirank" in item.keywords for item in items):
        raise pytest.UsageError(f"{why}; RESTARTLAB_REQUIRE_ALL=1 does not allow skipping")
    for item in items:
        if "multirank" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))


def _free_ports(n):
    """A base port with n consecutive free ports after it (slurmd i listens on base + i)."""
    for base in range(23817, 29817, 97):
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports for Slurm")


@pytest.fixture(scope="session")
def slurm():
    """A private Slurm cluster for this test session: SLURM_NODES slurmd daemons on this machine
    (tests/slurm/start_slurm.sh), SLURM_CONF exported to the tests, everything stopped at the end
    (stop_slurm.sh stops only what start_slurm.sh started). Skips with the reason where it cannot
    start (not root, no apt), fails instead under RESTARTLAB_REQUIRE_ALL=1 (CI)."""
    if os.geteuid() != 0:
        _missing("the private Slurm needs root (munged and slurmd run as root)")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        _missing("no Slurm installed and no apt-get to install it")
    # not under pytest's tmp dirs: those are 0700 and munged runs as the munge user
    prefix = tempfile.mkdtemp(prefix="rl-slurm-", dir="/tmp")
    base = _free_ports(SLURM_NODES + 1)
    env = dict(os.environ, SLURM_PREFIX=prefix, SLURM_NODES=str(SLURM_NODES),
               SLURM_CPUS=str(SLURM_CPUS), SLURMCTLD_PORT=str(base), SLURMD_PORT=str(base + 1))
    r = subprocess.run(["bash", os.path.join(HERE, "slurm", "start_slurm.sh")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode:
        subprocess.run(["bash", os.path.join(HERE, "slurm", "stop_slurm.sh")], env=env,
                       capture_output=True, timeout=120)
        _missing(f"start_slurm.sh failed (rc {r.returncode}): {r.stdout[-1500:]}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = os.path.join(prefix, "etc", "slurm.conf")
    try:
        yield {"prefix": prefix, "nodes": [f"rl{i}" for i in range(1, SLURM_NODES + 1)],
               "cpus": SLURM_CPUS}
    finally:
        r = subprocess.run(["bash", os.path.join(HERE, "slurm", "stop_slurm.sh")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        assert r.returncode == 0, f"stop_slurm.sh: {r.stdout[-1500:]}"
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="session", params=[pytest.param("slurm", marks=pytest.mark.slurm),
                                         pytest.param("pbs", marks=pytest.mark.pbs)])
def cluster(request, tmp_path_factory):
    """The harness of one real scheduler (tests/clusters.py): a test that takes it runs on each.
    Its tests go to the group of the cluster they use (_group above). Session-wide, so that a
    module fixture (one job that several tests assert on) can take it."""
    from tests import clusters
    return clusters.of(request.param, request.getfixturevalue(request.param), tmp_path_factory)


@pytest.fixture(scope="session")
def pbs():
    """A real OpenPBS cluster for this test session (tests/pbs_cluster.py: three hosts, each a
    network namespace; jobs as an ordinary user); stopped at the end, leaving nothing running.
    Skips with the reason where it cannot start, fails instead under RESTARTLAB_REQUIRE_ALL=1."""
    from tests import pbs_cluster
    c = pbs_cluster.start(_missing)
    try:
        yield c
    finally:
        pbs_cluster.stop(c)


def pytest_runtest_setup(item):
    """Fail a grouped test whose id does not carry its group, saying why.

    In an xdist worker under --dist loadgroup, a grouped test's id must carry its group
    (`id@group`). That is what the scheduler reads. pytest 9.2.0 keeps a node's id where
    pytest-xdist 3.8.0 cannot rename it. Then every group was silently ignored. The tests of one
    group ran on both workers at once. One worker deleted test_shared_node's second user under the
    other's tests. setup.cfg now pins pytest below 9.2. Such a test fails here, saying why."""
    if os.environ.get("PYTEST_XDIST_WORKER") and item.config.getvalue("loadgroup") \
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        import xdist
        pytest.fail(f"pytest-xdist {xdist.__version__} did not put this test in its group under pytest "
                    f"{pytest.__version__}: tests that share a cluster or a second user would run on two workers "
                    f"at once; install the versions setup.cfg [test] names (make install)", pytrace=False)
