"""The experiment directory's layout: every path and file name under <expt_dir>.

The tree goes expt -> phase -> attempt. Only this module spells its names, as ckptdir.py owns
step-N/.complete. Every module, the job script's template (through the render context) and the
tests ask these classes.

    <expt>/scenario.yaml job.sh jobid jobs.jsonl job.out nodefile nodes.bad hosts.attempt preflight.txt
           smoke.json smoke.md smoke/ (a smoke job's: submit --smoke)
           summary.json report.md fuzz.md fuzz.json
    <expt>/<phase>/ckpts/ attempts/<k>/ injections.jsonl nodes.jsonl injector.log
                   node-check.log done completed
    <expt>/<phase>/attempts/<k>/attempt.json output.log metrics-<rank>.jsonl hosts hang
                   walltime teardown.log ckpts-at-launch.json exits/<rank>.json
                   hang-procs.txt
    a torchft phase: <expt>/<phase>/lighthouse.log ft.json groups/g<k>/ (each a phase directory:
                   supervise.log attempts/<n>/ ... ft-rank<R>.jsonl ft-rank<R>-crash.json; its strikes are
                   in <phase>/injections.jsonl)
    a warm phase: <expt>/<phase>/warm-pool.log warm/<node>.ready warm/<node>.served.jsonl

These are pure paths. Nothing here creates or reads a file except the listings."""
import glob
import os
from typing import Callable, Dict, List, Optional, Union, cast


def smoke_record_name(rank: Union[int, str]) -> str:
    """A smoke job's rank record (restartlab.trainer.smoke), in its launch's directory."""
    return f"rank-{rank}.json"


def metrics_name(rank: int) -> str:
    """The trainer's metrics file of one rank (in the attempt directory it runs in)."""
    return f"metrics-{rank}.jsonl"


METRICS_GLOB = "metrics-*.jsonl"


def ft_record_name(rank: Union[int, str]) -> str:
    """A torchft replica group's rank's step records (trainer/ft.py), in its attempt's directory."""
    return f"ft-rank{rank}.jsonl"


def ft_crash_name(rank: Union[int, str]) -> str:
    """The exception that ended a program run through the torchft hook (trainer/ft_hook.py)."""
    return f"ft-rank{rank}-crash.json"


def ready_name(node: str) -> str:
    """A warm standby pool's marker that it serves, in the phase's warm/ directory."""
    return f"{node}.ready"


def served_name(node: str) -> str:
    """A warm standby pool's line per rank it forked, in the phase's warm/ directory."""
    return f"{node}.served.jsonl"


def _by_rank(pattern: str, make: Callable[[str], str]) -> Dict[int, str]:
    """{rank: path} of the files `make(rank)` names that match `pattern` (a glob of make("*"))."""
    head, _, tail = os.path.basename(make("*")).partition("*")
    out = {}
    for f in glob.glob(pattern):
        r = os.path.basename(f)[len(head):len(os.path.basename(f)) - len(tail)]
        if r.isdigit():
            out[int(r)] = f
    return out


def state_name(rank: Union[int, str]) -> str:
    """One rank's training-state fingerprints, a line per optimizer step (contracts.state_record),
    in its attempt's directory."""
    return f"state-{rank}.jsonl"


def rank_exit_name(rank: Union[int, str]) -> str:
    """How one rank ended (contracts.rank_exit), in its attempt's exits/ (`rank`: its number, or
    pid-<pid> where no launcher named it)."""
    return f"{rank}.json"


class Attempt:
    """<phase>/attempts/<k>: one launch."""

    def __init__(self, path: str):
        self.path = path

    @property
    def index(self) -> int:
        return int(os.path.basename(self.path))

    def _f(self, name: str) -> str:
        return os.path.join(self.path, name)

    record = property(lambda self: self._f("attempt.json"))   # written by the supervisor at its end
    launched = property(lambda self: self._f("launch.json"))  # written by the supervisor at its launch
    output = property(lambda self: self._f("output.log"))     # the launcher's stdout + stderr
    hosts = property(lambda self: self._f("hosts"))           # the nodes node-check chose for it
    hang = property(lambda self: self._f("hang"))             # marker: the watchdog stopped it
    walltime = property(lambda self: self._f("walltime"))     # marker: the walltime warning stopped it
    teardown_log = property(lambda self: self._f("teardown.log"))
    hang_procs = property(lambda self: self._f("hang-procs.txt"))  # its processes when the watchdog stopped it
    at_launch = property(lambda self: self._f("ckpts-at-launch.json"))  # the checkpoints a launch found

    def metrics(self, rank: int = 0) -> str:
        return self._f(metrics_name(rank))

    def metrics_files(self) -> List[str]:
        return glob.glob(self._f(METRICS_GLOB))

    exits_dir = property(lambda self: self._f("exits"))  # a file per rank that ended on its own

    def rank_exit(self, rank: Union[int, str]) -> str:
        return os.path.join(self.exits_dir, rank_exit_name(rank))

    def rank_exits(self) -> List[str]:
        return sorted(glob.glob(os.path.join(self.exits_dir, rank_exit_name("*"))))

    def smoke_records(self) -> List[str]:
        return glob.glob(self._f(smoke_record_name("*")))

    def state(self, rank: Union[int, str]) -> str:
        return self._f(state_name(rank))

    def state_files(self) -> Dict[int, str]:
        """{rank: path} of the ranks' training-state fingerprints (contracts.state_record)."""
        return _by_rank(self._f(state_name("*")), state_name)

    def ft_records(self) -> Dict[int, str]:
        """{rank: path} of a torchft group's attempt's step records."""
        return _by_rank(self._f(ft_record_name("*")), ft_record_name)

    def ft_crashes(self) -> Dict[int, str]:
        """{rank: path} of the exceptions that ended the ranks of a program run through the torchft hook."""
        return _by_rank(self._f(ft_crash_name("*")), ft_crash_name)


class Phase:
    """<expt>/<phase>: one phase of the experiment (every job of a chain adds attempts here)."""

    def __init__(self, path: str):
        self.path = path

    @property
    def name(self) -> str:
        return os.path.basename(self.path.rstrip("/"))

    def _f(self, name: str) -> str:
        return os.path.join(self.path, name)

    ckpts = property(lambda self: self._f("ckpts"))              # default checkpoint directory
    attempts_dir = property(lambda self: self._f("attempts"))
    @property
    def group_index(self) -> Optional[int]:
        """k of a torchft phase's replica group (<phase>/groups/g<k>); None for any other phase."""
        parent = os.path.dirname(self.path.rstrip("/"))
        if os.path.basename(parent) == "groups" and self.name[:1] == "g" and self.name[1:].isdigit():
            return int(self.name[1:])
        return None

    @property
    def is_group(self) -> bool:
        return self.group_index is not None

    @property
    def injections(self) -> str:
        """One line per strike; a torchft phase's replica group (groups/g<k>) shares its phase's."""
        if self.is_group:
            return os.path.join(os.path.dirname(os.path.dirname(self.path.rstrip("/"))), "injections.jsonl")
        return self._f("injections.jsonl")
    node_checks = property(lambda self: self._f("nodes.jsonl"))      # one line per node per check
    # a network fault's restorer's line (runtime/netfault.py), when the link is back: its windows down
    faults = property(lambda self: self._f("faults.jsonl"))
    # Storage faults (runtime/iofault). `iofault_dir` holds the preload built for the phase.
    # `iofault_ctl` is the strike the injector armed. Beside it, <ctl>.<id>.r<rank> says that rank took
    # it. `iofaults` has a line per event of a strike on a rank.
    iofault_dir = property(lambda self: self._f("iofault"))
    iofault_ctl = property(lambda self: os.path.join(self.iofault_dir, "strike"))
    iofaults = property(lambda self: self._f("iofaults.jsonl"))
    injector_log = property(lambda self: self._f("injector.log"))
    node_check_log = property(lambda self: self._f("node-check.log"))
    warm_log = property(lambda self: self._f("warm-pool.log"))      # the warm standby pools' log
    # the pools' state: <node>.ready (it serves), <node>.served.jsonl (a line per rank it forked)
    warm_dir = property(lambda self: self._f("warm"))
    done = property(lambda self: self._f("done"))            # marker: this job's supervisor is finished
    completed = property(lambda self: self._f("completed"))  # marker: the phase reached its last step
    ended = property(lambda self: self._f("ended.jsonl"))    # a line each time a supervisor of it ended: how
    reused = property(lambda self: self._f("reused-from"))   # copied from this experiment (run --baseline-from)

    # recovery without a restart (runtime/ft_phase.py): one relaunch loop per replica group
    groups_dir = property(lambda self: self._f("groups"))
    lighthouse_log = property(lambda self: self._f("lighthouse.log"))  # torchft's lighthouse
    supervise_log = property(lambda self: self._f("supervise.log"))    # a replica group's relaunch loop's output
    ft_summary = property(lambda self: self._f("ft.json"))           # the accounting and the verdict

    def group(self, g: int) -> "Phase":
        """groups/g<g>: replica group g's relaunch loop (a phase directory of its own)."""
        return Phase(os.path.join(self.groups_dir, f"g{g}"))

    def groups(self) -> List["Phase"]:
        found = [p for p in map(Phase, glob.glob(os.path.join(self.groups_dir, "g*"))) if p.is_group]
        return sorted(found, key=lambda p: p.group_index or 0)  # is_group: an index

    def reused_from(self) -> Optional[str]:
        """The experiment this phase was copied from (restartlab run --baseline-from); None: it ran here."""
        try:
            with open(self.reused) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def attempt(self, k: int) -> Attempt:
        return Attempt(os.path.join(self.attempts_dir, str(k)))

    def attempts(self) -> List[Attempt]:
        """The numbered attempt directories, in launch order."""
        found = [d for d in glob.glob(os.path.join(self.attempts_dir, "*"))
                 if os.path.basename(d).isdigit() and os.path.isdir(d)]
        return [Attempt(d) for d in sorted(found, key=lambda d: int(os.path.basename(d)))]

    def stray_entries(self) -> List[str]:
        """Entries under attempts/ that are not numbered directories."""
        good = {a.path for a in self.attempts()}
        return [x for x in sorted(glob.glob(os.path.join(self.attempts_dir, "*"))) if x not in good]

    def started(self) -> bool:
        return os.path.isdir(self.attempts_dir)


class Expt:
    """<expt_dir>: the experiment."""

    def __init__(self, root: str):
        self.root = root

    def _f(self, name: str) -> str:
        return os.path.join(self.root, name)

    scenario = property(lambda self: self._f("scenario.yaml"))  # the resolved scenario
    job_script = property(lambda self: self._f("job.sh"))
    jobid = property(lambda self: self._f("jobid"))             # written by `restartlab submit`
    not_submitted = property(lambda self: self._f("NOT-SUBMITTED"))  # the scheduler refused it: why
    preflight = property(lambda self: self._f("preflight.txt"))  # submit's preflight findings, or that it was skipped
    # a smoke job's (submit --smoke): its working files, its readiness report as data and as text
    smoke_dir = property(lambda self: self._f("smoke"))
    smoke_token = property(lambda self: os.path.join(self.smoke_dir, "token"))  # what every host reads back
    smoke_report = property(lambda self: self._f("smoke.json"))
    smoke_md = property(lambda self: self._f("smoke.md"))
    jobs = property(lambda self: self._f("jobs.jsonl"))         # every job that worked on it (chains)
    job_runs = property(lambda self: self._f("job-runs.jsonl"))  # a requeued job's runs: what the scheduler said
    job_out = property(lambda self: self._f("job.out"))         # `restartlab run`: the script's output
    nodefile = property(lambda self: self._f("nodefile"))       # the local scheduler's node file
    bad_nodes = property(lambda self: self._f("nodes.bad"))     # nodes excluded for the rest of this run of the job
    hosts_attempt = property(lambda self: self._f("hosts.attempt"))  # the next attempt's hosts
    summary = property(lambda self: self._f("summary.json"))
    report = property(lambda self: self._f("report.md"))
    fuzz_report = property(lambda self: self._f("fuzz.md"))      # `restartlab fuzz`: one row per kill
    fuzz_summary = property(lambda self: self._f("fuzz.json"))

    def phase(self, name: str) -> Phase:
        return Phase(self._f(name))

    def smoke_attempt(self, k: int) -> Attempt:
        """smoke/attempt-<k>: a smoke job's k-th launch (its ranks' records, the launcher's output.log)."""
        return Attempt(os.path.join(self.smoke_dir, f"attempt-{k}"))

    def phases(self) -> List[Phase]:
        """Phase directories that have attempts, in name order."""
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return []
        return [p for p in (self.phase(n) for n in names) if p.started()]



def sidecar_scenario(script_path: str) -> str:
    """`restartlab render -o FILE`: the resolved scenario is written next to FILE."""
    # cast: the paths are property(lambda ...), which mypy reads as Any
    return os.path.splitext(script_path)[0] + "." + os.path.basename(cast(str, Expt("").scenario))
