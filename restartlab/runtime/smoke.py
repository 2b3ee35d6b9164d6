"""The smoke job's checks, run inside the allocation (restartlab submit --smoke).

They prove everything the experiment will rely on, on the nodes the scheduler gave. Each check
names the host it failed on. The results go into a readiness report (<expt>/smoke.json, smoke.md):

  fanout     the scheduler's fan-out (pbsdsh, srun --overlap) reached every host and came back
  shared     the experiment directory is the same file system on every host
  stage      the node-local stage directory is writable and private on every host
  ranks      every rank started, on the hosts given, with its launcher's rank variables
  torch      torch imported on every rank, with the scenario's device count
  allreduce  the backend formed one group and one all-reduce across all ranks added up
  killers    each host's killer found that host's ranks by the job's tag
  kill       a SIGKILL took one rank
  teardown   the launcher ended the rest, and nothing of the job was left on any host
  relaunch   a second launch came up and all-reduced

python -m restartlab.runtime.smoke run ...   (the job script)
python -m restartlab.runtime.smoke node ...  (on each host, through the fan-out)"""
import argparse
import getpass
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, cast

from .. import launchers
from ..contracts import ckptdir, layout, placeholders
from ..contracts.envvars import node_name
from ..contracts.smoke import Check, SmokeNode, SmokeReport
from ..contracts.typed_json import to_dict
from ..contracts.receipts import Receipt
from . import fanout
from .smoke_ranks import RankRecords
from ..tools import verbs

HOLD_S = 600            # the first launch's ranks wait this long to be killed (they are, in seconds)
TEARDOWN_TIMEOUT_S = 60  # the launcher to end the other ranks after one is killed


def one_line(error: str, tool: str = "") -> str:
    """A fan-out receipt's error in one line.

    The line is its head (rc=1) and the last line that says what happened. A Python traceback ends
    with that line. It is the program's own line, not the fan-out tool's status line
    ("srun: error: rl3: task 0: Exited with exit code 1"). srun prints that status line before or
    after the task's own stderr, as the timing falls. In make soak, 2026-12-05, it came after, under
    load."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    if len(lines) < 2:
        return lines[0][-300:] if lines else "no message"
    head, _, first = lines[0].partition(": ")
    said = [x for x in [first, *lines[1:]] if x]
    mine = [x for x in said if not (tool and x.startswith(tool + ": "))]
    return (head + ": " + (mine or said)[-1])[-300:]


# ------------------------------------------------------------------ on each host
def node_main(a: argparse.Namespace) -> int:
    """One host's receipt.

    It gives the host's name, and whether it sees the token the job wrote in the experiment directory
    (a shared file system). It also reports a stage directory made, written and removed there."""
    token_seen, token_error = False, None
    try:
        with open(a.token_file) as f:
            token_seen = f.read().strip() == a.token
    except OSError as e:
        token_error = e.strerror
    root = a.stage_root
    try:
        d = tempfile.mkdtemp(prefix="restartlab-smoke-", dir=root)  # 0700, never through what is there
        st = os.lstat(d)
        probe = os.path.join(d, "probe")
        with open(probe, "wb") as f:
            f.write(os.urandom(1 << 16))
        os.remove(probe)
        os.rmdir(d)
        private = (st.st_mode & 0o077) == 0 and st.st_uid == os.getuid()
        stage = "ok" if private else f"{d} is not private to {getpass.getuser()} (mode {st.st_mode & 0o777:o})"
    except OSError as e:
        stage = f"{root}: {e.strerror}"
    answer = {k: v for k, v in to_dict(SmokeNode(token_seen, token_error, stage)).items() if v is not None}
    print(json.dumps({"host": node_name(), "hostname": socket.gethostname(), "python": sys.executable, **answer}),
          flush=True)
    return 0


# ------------------------------------------------------------------ the job's side
class Smoke:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.expt = layout.Expt(a.expt_dir)
        self.hosts, self.slots = fanout.read_nodefile(a.nodefile)
        self.checks: List[Check] = []
        self.py = sys.executable
        self.ranks = RankRecords(a.ranks, self.hosts, self.add)

    def say(self, msg: str) -> None:
        print(f"restartlab smoke: {msg}", flush=True)

    def add(self, name: str, ok: object, detail: str, failed: Iterable[str] = ()) -> bool:
        c = Check(name, bool(ok), detail, sorted(set(failed)))
        self.checks.append(c)
        self.say(c.line())
        return c.ok

    def fan(self, argv: List[str], indices: Optional[List[int]] = None) -> Dict[Optional[str], Receipt]:
        """`argv` once on each host (or those at `indices`): {host: receipt} (an error receipt for a
        host whose command did not run or answer). A smoke node's own fields are in `extra`."""
        indices = list(range(len(self.hosts))) if indices is None else indices
        got = fanout.fan_out(self.a.fanout, self.hosts, indices, argv, self.slots, self.a.launcher)
        by_host: Dict[Optional[str], Receipt] = {}  # None: a receipt that names no node
        for i, r in zip(indices, got):  # a receipt names its node (the scheduler's name: Slurm's, else the host's)
            if r.error:
                r = r.replace(error=one_line(r.error, os.path.basename(r.cmd[0] if r.cmd else "")))
            by_host[r.where if not r.error else self.hosts[i]] = r
        for i in indices:
            by_host.setdefault(self.hosts[i], Receipt(error="no receipt came back"))
        return by_host

    def nodes(self) -> None:
        token = uuid.uuid4().hex
        path = self.expt.smoke_token
        ckptdir.write_atomic(path, token.encode())
        got = self.fan(verbs.argv(self.py, "smoke", "node", "--token-file", path, "--token", token,
                                  "--stage-root", self.a.stage_root))
        bad = [h for h in self.hosts if got[h].error or got[h].host != h]  # host: node_name()
        self.add("fanout", not bad, f"{self.a.fanout} reached {len(self.hosts) - len(bad)} of {len(self.hosts)} host(s)"
                 + "".join(f"; {h}: {got[h].error or 'answered as ' + str(got[h].host)}" for h in bad), bad)
        reached = [h for h in self.hosts if h not in bad]
        unchecked = f" ({', '.join(bad)} not reached: not checked there)" if bad else ""
        said = {h: SmokeNode.of(got[h].extra) for h in reached}
        unshared = [h for h in reached if not said[h].token_seen]
        self.add("shared", not unshared and reached, f"{self.expt.root} is the same directory on "
                 f"{len(reached) - len(unshared)} of {len(self.hosts)} host(s)" + unchecked
                 + "".join(f"; {h} does not see the file the job wrote there ({said[h].token_error or 'other content'})"
                           for h in unshared), unshared)
        badstage = [h for h in reached if said[h].stage != "ok"]
        self.add("stage", not badstage and reached, f"node-local {self.a.stage_root}: a private directory written "
                 f"on {len(reached) - len(badstage)} of {len(self.hosts)} host(s)" + unchecked
                 + "".join(f"; {h}: {said[h].stage}" for h in badstage), badstage)

    def launch(self, k: int, hold: bool) -> Tuple[subprocess.Popen[bytes], str]:
        att = self.expt.smoke_attempt(k)
        outdir = att.path
        os.makedirs(outdir, exist_ok=True)
        argv = [placeholders.fill(w, {placeholders.ATTEMPT_DIR: outdir}) for w in self.a.argv]
        argv += ["--hold", str(HOLD_S)] if hold else []
        env = dict(os.environ, MASTER_ADDR=launchers.master_addr(socket.gethostname(), self.a.master_suffix),
                   MASTER_PORT=str(launchers.free_port()), RESTARTLAB_ATTEMPT=str(k))
        log = open(att.output, "w")
        self.say(f"launch {k}: {' '.join(argv)}")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=outdir,
                                start_new_session=True)
        log.close()
        return proc, outdir

    def killer(self, extra: List[str]) -> List[str]:
        return verbs.argv(self.py, "kill-ranks", "--tag", self.a.tag, *extra)

    def kill_and_teardown(self, proc: subprocess.Popen[bytes], outdir: str) -> None:
        per_host = self.a.ranks // len(self.hosts)
        found = self.fan(self.killer(["--dry-run"]))
        short = [h for h in self.hosts if found[h].error or len(found[h].pids) < per_host]
        self.add("killers", not short, f"each host's killer found its ranks by the tag {self.a.tag}: "
                 + ", ".join(f"{h} {len(found[h].pids)}" for h in self.hosts) + f" (want {per_host} each)"
                 + "".join(f"; {h}: {found[h].error}" for h in short if found[h].error), short)
        last = len(self.hosts) - 1  # rank 0's host keeps its ranks: the launcher must notice a far one
        got = self.fan(self.killer(["--one"]), [last])[self.hosts[last]]
        took = bool(got.pids) and not got.error
        self.add("kill", took, f"SIGKILL on {self.hosts[last]} took pid(s) {list(got.pids)}"
                 + (f": {got.error}" if got.error else ""), [] if took else [self.hosts[last]])
        try:
            rc = proc.wait(timeout=TEARDOWN_TIMEOUT_S)
            ended = f"the launcher ended the other ranks and exited {rc}"
        except subprocess.TimeoutExpired:
            rc, ended = None, f"the launcher did not end the other ranks in {TEARDOWN_TIMEOUT_S} s"
        left = self.fan(self.killer(["--dry-run"]))
        stayed = [h for h in self.hosts if left[h].pids or left[h].error]
        self.add("teardown", rc is not None and not stayed, ended + (
            "; nothing of the job left on any host" if not stayed else
            "; left: " + ", ".join(f"{h} {list(left[h].pids) or left[h].error}" for h in stayed)), stayed)
        if stayed:  # nothing of this job outlives the check
            self.fan(self.killer([]))
        self.stop(proc)

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """A launch still running (its ranks waiting for a group that cannot form): its ranks on
        every host killed by the tag, then the launcher. Nothing of the job outlives its check."""
        if proc.poll() is None:
            self.fan(self.killer([]))
            try:
                proc.wait(timeout=TEARDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()

    def run(self) -> int:
        os.makedirs(self.expt.smoke_dir, exist_ok=True)
        self.say(f"{len(self.hosts)} host(s) {self.hosts}, {self.a.ranks} rank(s), fan-out {self.a.fanout}")
        t0 = time.time()
        self.nodes()
        proc, outdir = self.launch(1, hold=True)
        try:
            recs = self.ranks.records(proc, outdir, wait_exit=False)
            started = self.ranks.judge(recs, proc, outdir, 1)
            # A rank whose record has an error does not hold (trainer/smoke.py): it is exiting, and the
            # killers would race its exit. Decided from the records, not from whether the launcher
            # happens to be running yet (a fresh-clone CI run lost that race once).
            failed = sorted(r for r, rec in recs.items() if rec.error)
            if started and not failed and proc.poll() is None:
                self.kill_and_teardown(proc, outdir)
            else:
                self.add("kill", False, "not tried: " + (
                    f"rank(s) {failed[:8]} failed before the hold" if failed else
                    "the first launch's ranks did not all start" if not started else
                    f"the first launch ended before the kill (exit {proc.poll()})"))
        finally:
            self.stop(proc)
        proc2, outdir2 = self.launch(2, hold=False)
        recs = self.ranks.records(proc2, outdir2, wait_exit=True)
        self.stop(proc2)
        self.ranks.judge(recs, proc2, outdir2, 2)
        return self.report(time.time() - t0)

    def report(self, took: float) -> int:
        ok = all(c.ok for c in self.checks)
        report = SmokeReport(ok, self.hosts, self.a.ranks, self.a.tag, round(took, 1), self.checks)
        ckptdir.write_atomic(self.expt.smoke_report, report.to_json().encode())
        lines = [f"# restartlab smoke job: {'READY' if ok else 'NOT READY'}", "",
                 f"{len(self.hosts)} host(s): {', '.join(self.hosts)}; {self.a.ranks} rank(s); {took:.0f} s", "",
                 "```"] + [c.line() for c in self.checks] + ["```", ""]
        ckptdir.write_atomic(self.expt.smoke_md, "\n".join(lines).encode())
        failed = [c.name for c in self.checks if not c.ok]
        self.say(("READY: every check passed" if ok else f"NOT READY: {', '.join(failed)} failed")
                 + f" ({self.expt.smoke_md})")
        return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m restartlab.runtime.smoke")
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="the smoke job's checks (its job script runs this)")
    r.add_argument("--expt-dir", required=True)
    r.add_argument("--nodefile")
    r.add_argument("--fanout", required=True)
    r.add_argument("--launcher", required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--ranks", type=int, required=True)
    r.add_argument("--stage-root", default=tempfile.gettempdir())
    r.add_argument("--master-suffix", default="", help="launch.master_addr_suffix: the ranks meet at the first "
                   "host's name with it, as the experiment's do")
    r.add_argument("argv", nargs=argparse.REMAINDER)
    n = sub.add_parser("node", help="one host's receipt (through the fan-out)")
    n.add_argument("--token-file", required=True)
    n.add_argument("--token", required=True)
    n.add_argument("--stage-root", default=tempfile.gettempdir())
    a = p.parse_args(argv)
    if a.what == "node":
        return node_main(a)
    a.argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    return Smoke(a).run()


if __name__ == "__main__":
    sys.exit(main())
