"""restartlab run: the whole experiment on this machine. Renders the scenario for the local
scheduler, runs the same job script under bash with the local scheduler's own job id and node
file (never a batch system's variables), shows progress, and leaves a readable experiment
directory even on Ctrl-C."""
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence, Tuple

from . import experiment, preflight, reuse
from ..runtime import killer
from ..contracts import exits, layout, live
from .. import scenario, schedulers
from ..contracts.resources import resource_dir
from ..schedulers.local import Local
from ..contracts.scenario_record import Scenario
from ..contracts.summary import Summary, SummaryError


def progress(phases: Sequence[Tuple[str, str]], iters: int, t0: float) -> Tuple[str, Optional[int]]:
    """(text, phase index) describing where the experiment is: its phases (name, directory), each
    of `iters` steps."""
    done_steps, cur, line = 0, None, None
    for i, (name, path) in enumerate(phases):
        phase = layout.Phase(path)
        if os.path.exists(phase.done):
            done_steps += iters
            continue
        groups = phase.groups()  # a torchft phase: its replica groups' loops
        if phase.started() or groups:
            cur = i
            step = live.newest_step_seen(path)
            attempts = sum(len(g.attempts()) for g in groups) - len(groups) + 1 if groups else len(phase.attempts())
            kills = sum(1 for r in live.read_injections(path) if r.struck)
            done_steps += step
            where = f"step {step}/{iters}" if step or attempts <= 1 else f"relaunching (attempt {attempts})"
            line = (f"phase {i + 1}/{len(phases)} {name}: {where}, "
                    f"kills {kills}, restarts {max(0, attempts - 1)}")
        break
    elapsed = time.time() - t0
    total = iters * len(phases)
    eta = (elapsed / done_steps * (total - done_steps)) if done_steps > 0 else None
    line = line or ("collecting the report" if done_steps >= total else "starting")
    return f"{line} | elapsed {elapsed:5.0f}s | ETA {'?' if eta is None else f'{eta:4.0f}s'}", cur


def main(a) -> int:
    path = a.scenario or os.path.join(resource_dir("scenarios"), "local.yaml")
    sc, where = scenario.load_located(path, a.set)
    refused = preflight.framework_missing(sc, where)
    if refused:
        preflight.report(refused)
        return 2
    return run_scenario(sc, path, a.expt_dir, a.plain, baseline_from=a.baseline_from, smoke=a.smoke)


def run_scenario(sc: Scenario, path: str, expt_dir=None, plain=False, verb="run", baseline_from=None,
                 smoke=False) -> int:
    """Run a loaded scenario's job script here, and return its exit status.

    The status is 130 on Ctrl-C and 2 on bad input. `baseline_from` is an experiment whose baseline
    phase is copied in instead of run (reuse.py). With `smoke`, it runs the smoke job's script (its
    checks on this machine) instead of the experiment."""
    try:
        secrets = scenario.secret_values(sc)  # the job script gets them by name from its environment
    except scenario.ScenarioError as e:
        print(f"restartlab {verb}: error: {e}", file=sys.stderr)
        return 2
    if baseline_from:  # checked before the experiment exists: a refusal leaves nothing behind
        _, probe, _ = experiment.render_script(sc, "local", expt_dir=os.path.abspath(expt_dir) if expt_dir else None)
        try:
            found = reuse.check(probe, baseline_from)
        except reuse.ReuseError as e:
            print(f"restartlab {verb}: error: --baseline-from {e}", file=sys.stderr)
            return 2
        expt_dir = probe.expt_dir
    _, ctx = experiment.create(sc, "local", expt_dir=os.path.abspath(expt_dir) if expt_dir else None, smoke=smoke)
    d = ctx.expt_dir
    if baseline_from:
        names = reuse.copy(ctx, found, baseline_from)
        print(f"restartlab {verb}: baseline {', '.join(names)} taken from {os.path.abspath(baseline_from)} "
              "(the same command, finished there): not run again", flush=True)
    expt = layout.Expt(d)
    with open(expt.nodefile, "w") as f:
        f.write(socket.gethostname() + "\n")
    local = schedulers.get(Local.name)
    assert local.jobid_var and local.nodefile_var  # the local scheduler names both
    env = {k: v for k, v in os.environ.items() if not any(k == s.jobid_var or k == s.nodefile_var
                                                          for s in schedulers.SCHEDULERS.all())}
    env.update({local.jobid_var: f"{os.getpid()}.local", local.nodefile_var: expt.nodefile}, **secrets)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    print(f"restartlab {verb}: {path}\nexperiment: {d}\nlog: {expt.job_out}", flush=True)
    t0 = time.time()
    tty = sys.stdout.isatty() and not plain
    plan = [(p.name, p.dir) for p in ctx.phases]
    with open(expt.job_out, "w") as out:
        proc = subprocess.Popen(["bash", expt.job_script], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=d, start_new_session=True)
        last_plain, last_text = 0.0, None
        try:
            while proc.poll() is None:
                text, _ = progress(plan, ctx.train_iters, t0) if not smoke else (f"smoke checks | elapsed {time.time() - t0:5.0f}s", 0)
                if tty:
                    sys.stdout.write("\r\033[K" + text)
                    sys.stdout.flush()
                elif text.split("|")[0] != (last_text or "").split("|")[0] and time.time() - last_plain > 5 \
                        or time.time() - last_plain > 30:
                    print(text, flush=True)
                    last_plain, last_text = time.time(), text
                time.sleep(0.5)
        except KeyboardInterrupt:
            print(f"\nrestartlab {verb}: interrupted; stopping the job script, the ranks and the injector", flush=True)
            stop(proc, ctx.tag)
            print(f"restartlab {verb}: stopped; partial results stay in {d}")
            return 130
    if tty:
        sys.stdout.write("\n")
    rc = proc.returncode
    killer.kill_ranks(ctx.tag, standby=True)  # nothing of this job may outlive it (a warm pool neither)
    why = {exits.EXIT_PREEMPTED: " (stopped by the walltime warning: state saved, training "
           "not finished)"}.get(rc, "")
    print(f"restartlab {verb}: job script exited {rc} after {time.time() - t0:.0f}s{why}")
    if smoke and os.path.exists(expt.smoke_md):
        with open(expt.smoke_md) as f:
            print(f.read().rstrip())
    if os.path.exists(expt.report):
        print(f"report: {expt.report}")
        try:
            for s in Summary.read(expt.summary).phases:
                w = s.walltime_stop
                print(f"  {s.phase:>10}: wall {s.wall_s or 0:6.1f}s  kills {s.kills}  "
                      f"lost steps {s.lost_steps}  ETTR {s.ettr or 0:.3f}"
                      + (f"  walltime stop at step {w.last_step} (emergency checkpoint "
                         f"{w.emergency_checkpoint})" if w else ""))
        except SummaryError as e:
            print(f"restartlab {verb}: the summary cannot be shown: {e}", file=sys.stderr)
    return rc


def stop(proc, tag):
    """TERM to the job script (its trap stops the supervisor, which stops its children by PID),
    then KILL its session."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    killer.kill_ranks(tag, standby=True)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the script's own session only
    except (ProcessLookupError, PermissionError):
        pass
