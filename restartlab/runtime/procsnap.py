"""What a hung attempt's processes on this node were doing when the watchdog stopped it.

It covers the launcher's process tree and every process carrying the job's tag. Each gets one line:
pid, parent, state, the kernel function it sleeps in, CPU seconds, age, its rank variable, command
line.

The bundled trainer's ranks also dump their Python stacks (attempt_stop.dump_stacks). This covers what
stacks cannot: a launcher or proxy that never started the ranks, a rank stuck before Python ran, a
program of the user's. See #49: an attempt that spent 520 s in start-up left no trace of where."""
import time
from typing import List

import psutil

from ..contracts.envvars import TAG_VAR, tag_matches
from .killer import rank_entries


def _wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read().strip() or "-"
    except OSError:
        return "?"


def _line(p: psutil.Process, now: float) -> str:
    try:
        with p.oneshot():
            env = {}
            try:
                env = p.environ()
            except psutil.Error:
                pass
            rank = (rank_entries(env) or ["-"])[0]
            cpu = p.cpu_times()
            cmd = " ".join(p.cmdline())[:300]
            return (f"{p.pid:>7} {p.ppid():>7} {p.status():<9} {_wchan(p.pid):<24} cpu {cpu.user + cpu.system:7.2f}s "
                    f"age {now - p.create_time():7.1f}s {rank:<14} {cmd}")
    except psutil.Error as e:
        return f"{p.pid:>7} gone ({type(e).__name__})"


def snapshot(launcher_pid: int, tag: str) -> List[str]:
    """The lines: the launcher's tree first, then the tagged processes outside it."""
    now = time.time()
    seen, out = set(), []
    try:
        root = psutil.Process(launcher_pid)
        tree = [root] + root.children(recursive=True)
    except psutil.Error:
        tree = []
    for p in tree:
        seen.add(p.pid)
        out.append(_line(p, now))
    for p in psutil.process_iter():
        if p.pid in seen:
            continue
        try:
            v = p.environ().get(TAG_VAR)
        except psutil.Error:
            continue
        if v is not None and tag_matches(v, tag):
            out.append(_line(p, now))
    return out


def write(path: str, launcher_pid: int, tag: str) -> None:
    lines = snapshot(launcher_pid, tag)
    with open(path, "a") as f:
        f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}: the attempt's processes on this node when the watchdog "
                f"stopped it ({len(lines)}; the launcher's tree first)\n")
        f.write(f"{'pid':>7} {'ppid':>7} {'state':<9} {'wchan':<24} cpu/age/rank/command\n")
        f.writelines(line + "\n" for line in lines)
