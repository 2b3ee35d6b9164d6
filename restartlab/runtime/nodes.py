"""Node health: `restartlab node-check`. On each node (`--local`): Python and restartlab start
(this process is the proof). The expected accelerators are visible. The stage dir is writable
with room for a checkpoint shard. An optional site command succeeds. Across the job:
- The check is fanned out once to every node not yet known bad, each with a timeout. A node that
  does not answer in time is bad.
- Results are appended to the phase's node-check records (layout).
- A bad node is added to the job's bad-node file and stays excluded for the rest of the job.
- The hosts of the next attempt are written to a private host file: the first `--need` healthy
  nodes in node-file order.
- The number of nodes chosen is printed.

Recovery policies (relaunch.on_node_loss):
- `same` never excludes. The check only reports.
- `spares` needs exactly `--need` healthy nodes. The job asked for spares.
- `shrink` takes the largest number of healthy nodes that divides `--need`, no fewer than
  `--min-nodes`. Each remaining rank then takes a whole number of the missing ranks' micro-batches.

Exit 3 when too few nodes are healthy."""
import argparse
import dataclasses
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from ..contracts import options, usage
from ..tools import options as tool_options, verbs
from ..contracts.envvars import node_name
from ..contracts.receipts import NodeCheck, Receipt

EXIT_OK, EXIT_USAGE, EXIT_TOO_FEW = 0, 2, 3
POLICIES = tool_options.POLICIES
# device nodes by accelerator kind: counted without importing torch (orchestration never does)
DEVICE_GLOBS = {"cuda": "/dev/nvidia[0-9]*", "xpu": "/dev/dri/renderD*"}


# ---------------------------------------------------------------- on one node
def check_here(stage_dir: Optional[str], min_free: int, device: str, gpus: int,
               site_cmd: Optional[str], timeout: float) -> Receipt:
    t0 = time.time()
    problems = []
    if device in DEVICE_GLOBS and gpus:
        seen = len(glob.glob(DEVICE_GLOBS[device]))
        if seen < gpus:
            problems.append(f"{seen} {device} device(s) visible, {gpus} expected")
    if stage_dir:
        problems += _check_dir(stage_dir, min_free)
    if site_cmd:
        try:
            r = subprocess.run(site_cmd, shell=True, capture_output=True, text=True, timeout=timeout)
            if r.returncode:
                problems.append(f"site check exited {r.returncode}: {(r.stderr or r.stdout).strip()[-200:]}")
        except subprocess.TimeoutExpired:
            problems.append(f"site check did not finish in {timeout:g}s")
    return Receipt(node=node_name(), host=socket.gethostname(), ok=not problems, reason="; ".join(problems),
                   seconds=round(time.time() - t0, 3))


def _check_dir(path: str, min_free: int) -> List[str]:
    """The stage dir, or the nearest existing directory above it, takes a small fsync'ed write
    and has room. Nothing is created: the trainer's owner creates (and marks, and later removes)
    the stage dir it makes."""
    where = path
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    if not os.path.isdir(where):
        return [f"stage dir {path}: not writable ({where} is not a directory)"]
    try:  # an unguessable name, created exclusively, 0600: nothing planted there is followed
        fd, probe = tempfile.mkstemp(prefix=".restartlab-node-check-", dir=where)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(b"x" * 4096)
                f.flush()
                os.fsync(f.fileno())
        finally:
            os.unlink(probe)
        free = shutil.disk_usage(where).free
    except OSError as e:
        return [f"stage dir {path}: not writable ({e.strerror or e})"]
    if free < min_free:
        return [f"stage dir {path}: {free / 2**20:.0f} MiB free, a shard needs {min_free / 2**20:.0f} MiB"]
    return []


# ---------------------------------------------------------------- across the job
def read_bad(path: Optional[str]) -> List[str]:
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [x.strip() for x in f if x.strip()]


def choose(hosts: List[str], bad: List[str], policy: str, need: int,
           min_nodes: int) -> Tuple[Optional[List[str]], Optional[str]]:
    """(hosts for the next attempt, error or None)."""
    if policy == "same":
        return hosts[:need], None
    good = [h for h in hosts if h not in bad]
    if policy == "spares":
        if len(good) < need:
            return None, f"{len(good)} healthy node(s) left, {need} needed (no spare left)"
        return good[:need], None
    # shrink: take the largest node count that divides the original. Each remaining rank then takes
    # a whole number of the missing ranks' micro-batches, and the global batch stays the same.
    k = next((k for k in range(min(len(good), need), 0, -1) if need % k == 0), 0)
    if k < min_nodes:
        return None, f"{len(good)} healthy node(s) left, relaunch.min_nodes is {min_nodes}"
    return good[:k], None


@dataclasses.dataclass
class Config:
    """node-check's settings: one field per option of tools/options.NODE_CHECK, in its order. The
    table holds each option's flag, help and default; tests/test_tool_options.py keeps this class
    equal to it (contracts/options.config_problems)."""
    local: bool = False
    stage_dir: Optional[str] = None
    min_free: int = 0
    device: str = "cpu"
    gpus: int = 0
    site_cmd: Optional[str] = None
    timeout: float = 60.0
    fanout: str = "local"
    launcher: str = "hydra"
    nodefile: Optional[str] = None
    bad_file: Optional[str] = None
    log: Optional[str] = None
    attempt: int = 0
    policy: str = "same"
    need: int = 0
    min_nodes: int = 1
    hosts_out: Optional[str] = None

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Config":
        return cls(**{o.key: getattr(a, o.key) for o in tool_options.NODE_CHECK})


def _local_argv(**vals: Any) -> List[str]:
    """`restartlab node-check --local` with these values: what a fan-out runs on each node."""
    return [*verbs.argv(sys.executable, "node-check"), *options.to_argv(tool_options.NODE_CHECK, dict(vals, local=True))]


def check_all(a: Config) -> Optional[int]:
    """Check every node not yet known bad, and return how many nodes the next attempt gets.

    Their names go in --hosts-out. Returns None when too few are healthy, and says so on stderr."""
    from . import fanout
    hosts, slots = fanout.job_nodes(a.nodefile, a.fanout)
    bad = read_bad(a.bad_file)
    todo = [i for i, h in enumerate(hosts) if h not in bad]
    argv = _local_argv(timeout=a.timeout, min_free=a.min_free, device=a.device, gpus=a.gpus,
                       stage_dir=a.stage_dir, site_cmd=a.site_cmd)
    t0 = time.time()
    receipts = fanout.fan_out(a.fanout, hosts, todo, argv, slots, a.launcher, timeout=a.timeout) if todo else []
    results = []
    for i, r in zip(todo, _by_node(receipts, [hosts[i] for i in todo])):
        if r is None or r.ok is None:
            why = (r.error if r is not None else None) or "no answer"
            results.append(NodeCheck(hosts[i], False, f"no healthy answer: {why}", round(time.time() - t0, 3)))
        else:  # named as the node file names it (what the launcher is given)
            results.append(NodeCheck(hosts[i], r.ok, r.reason or "", r.seconds, host=r.host))
    newly_bad = [c.node for c in results if not c.ok]
    if newly_bad and a.policy != "same":
        bad += newly_bad
        if a.bad_file:
            with open(a.bad_file, "a") as f:
                f.writelines(n + "\n" for n in newly_bad)
    if a.log:
        with open(a.log, "a") as f:
            for c in results:
                f.write(dataclasses.replace(c, time=time.time(), attempt=a.attempt, policy=a.policy).to_json() + "\n")
    for c in results:
        if not c.ok:
            print(f"restartlab node-check: {c.node}: BAD: {c.reason}", file=sys.stderr)
    chosen, err = choose(hosts, bad, a.policy, a.need or len(hosts), a.min_nodes)
    if err:
        print(f"restartlab node-check: {err}", file=sys.stderr)
        return None
    if a.hosts_out:
        with open(a.hosts_out, "w") as f:
            f.writelines(h + "\n" for h in cast(List[str], chosen))  # no error: choose gave hosts
    return len(cast(List[str], chosen))


def answering(fanout: str, nodefile: Optional[str], launcher: str, names: List[str], timeout: float) -> List[str]:
    """Which of the job's nodes `names` answer a node check (`restartlab node-check --local`) within
    `timeout`.

    A node that answers is reachable, whatever its check found. The supervisor waits on this before
    relaunching on the same nodes after a stop that could not reach one."""
    from . import fanout as fan
    hosts, slots = fan.read_nodefile(nodefile)  # the teardown's names for them (runtime/teardown.py)
    todo = [i for i, h in enumerate(hosts) if h in names]
    unknown = [n for n in names if n not in hosts]  # not the node file's: nothing to ask, nothing to wait for
    if not todo:
        return unknown
    argv = _local_argv(timeout=timeout)
    receipts = fan.fan_out(fanout, hosts, todo, argv, slots, launcher, timeout=timeout)
    return unknown + [hosts[i] for i, r in zip(todo, _by_node(receipts, [hosts[i] for i in todo]))
                      if r is not None and r.ok is not None]


def _by_node(receipts: List[Receipt], names: List[str]) -> Sequence[Optional[Receipt]]:
    """Receipts in the order of `names`.

    fan_out keeps the order of its commands. A receipt that names its node is matched by name,
    because two scheduler nodes may share one host."""
    if len(receipts) == len(names):
        return receipts
    by = {r.node: r for r in receipts if r.node}
    return [by.get(n) for n in names]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="restartlab node-check", description=__doc__.split("\n\n")[0],
                                epilog=usage.epilog("node-check"), formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_to_parser(p, tool_options.NODE_CHECK)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = Config.from_args(build_parser().parse_args(argv))
    a.nodefile = tool_options.nodefile_default(a.nodefile)
    if a.local:
        print(check_here(a.stage_dir, a.min_free, a.device, a.gpus, a.site_cmd, a.timeout).to_json(), flush=True)
        return EXIT_OK
    n = check_all(a)
    if n is None:
        return EXIT_TOO_FEW
    print(n)
    return EXIT_OK
