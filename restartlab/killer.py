"""Node-local rank killer: find the job's training ranks by a tag in their environment (never by
command line), kill each rank's whole process tree, print a JSON receipt.

Never touches this process, its ancestors (the injector, pbsdsh/srun, the launcher that started
us) or any process without the tag that is not a descendant of a tagged rank."""
import json
import os
import signal as _signal
import socket
import sys
import time
from typing import Dict, List

TAG_VAR = "RESTARTLAB_JOB_TAG"
EXIT_KILLED, EXIT_ERROR, EXIT_USAGE, EXIT_NONE = 0, 1, 2, 10


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children(pid: int) -> List[int]:
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return kids


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def ancestors(pid: int) -> set:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        pid = _ppid(pid)
    return out


def node_name() -> str:
    """The scheduler's name for this node (several Slurm nodes can share one host in tests)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def find_by_env(entry: str) -> List[int]:
    """Live PIDs whose environment holds the exact entry NAME=value."""
    needle = entry.encode()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if _environ_has(pid, needle) and not _is_zombie(pid):
                pids.append(pid)
    return sorted(pids)


def find_tagged(tag: str) -> List[int]:
    """PIDs whose environment holds RESTARTLAB_JOB_TAG=<tag> exactly."""
    return find_by_env(f"{TAG_VAR}={tag}")


def targets(tag: str) -> Dict[int, str]:
    """Tagged processes and all their descendants, minus ourselves and our ancestors."""
    protected = ancestors(os.getpid())
    found, stack = {}, [p for p in find_tagged(tag) if p not in protected]
    while stack:
        pid = stack.pop()
        if pid in found or pid in protected:
            continue
        found[pid] = _cmdline(pid)
        stack.extend(_children(pid))
    return found


def kill_ranks(tag: str, sig: int = _signal.SIGKILL, dry_run: bool = False, one: bool = False) -> dict:
    procs = targets(tag)
    if one and procs:  # one rank: the lowest-PID tagged process whose parent is untagged, and its tree
        tagged = set(find_tagged(tag))
        roots = sorted(p for p in procs if p in tagged and _ppid(p) not in tagged)
        keep, stack = {}, roots[:1]
        while stack:
            pid = stack.pop()
            if pid in procs and pid not in keep:
                keep[pid] = procs[pid]
                stack.extend(_children(pid))
        procs = keep
    receipt = {"host": socket.gethostname(), "node": node_name(), "time": time.time(), "tag": tag,
               "signal": _signal.Signals(sig).name, "dry_run": dry_run,
               "pids": sorted(procs), "cmdlines": {str(p): c for p, c in sorted(procs.items())},
               "errors": {}}
    if not dry_run:
        for pid in procs:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except OSError as e:
                receipt["errors"][str(pid)] = str(e)
    return receipt


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="restartlab kill-ranks",
                                description="kill this node's training ranks of one job (found by env tag)")
    p.add_argument("--tag", default=os.environ.get("RESTARTLAB_KILL_TAG"),
                   help=f"the job tag ({TAG_VAR} of the ranks); default $RESTARTLAB_KILL_TAG")
    p.add_argument("--signal", default="KILL", help="signal name or number (default KILL)")
    p.add_argument("--dry-run", action="store_true", help="list what would be killed")
    p.add_argument("--one", action="store_true", help="only one rank (lowest PID) and its process tree")
    a = p.parse_args(argv)
    if not a.tag:
        print("restartlab kill-ranks: error: --tag is required (or set RESTARTLAB_KILL_TAG)", file=sys.stderr)
        return EXIT_USAGE
    try:
        sig = int(a.signal) if a.signal.isdigit() else _signal.Signals["SIG" + a.signal.upper().removeprefix("SIG")]
    except KeyError:
        print(f"restartlab kill-ranks: error: unknown signal {a.signal!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        receipt = kill_ranks(a.tag, sig, a.dry_run, a.one)
    except OSError as e:
        print(json.dumps({"host": socket.gethostname(), "error": str(e)}))
        return EXIT_ERROR
    print(json.dumps(receipt), flush=True)
    if receipt["errors"]:
        return EXIT_ERROR
    return EXIT_KILLED if receipt["pids"] else EXIT_NONE
