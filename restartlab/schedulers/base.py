"""The Scheduler plug-in: everything restartlab knows about one batch system lives in one class
(PSI/J-style pure hooks), registered by name in SCHEDULERS. Adding one (Flux, LSF) is one module
in this package (found automatically) and, only if the shared `header.j2` does not fit, one
template; see README, "Extending restartlab".

Command hooks return argv lists and parsers take recorded output, so each is testable alone."""
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..contracts.jobruns import RunFacts
from ..contracts.job_status import JobStatus  # noqa: F401  (re-exported: what status() gives)
from ..contracts.registry import Registry
from ..contracts.scenario_record import Scenario

# states, common to all schedulers
PENDING, RUNNING, FINISHED, FAILED, UNKNOWN = "pending", "running", "finished", "failed", "unknown"

# run(argv) -> (returncode, stdout, stderr): how the CLI executes a query (tests pass recorded output)
Runner = Callable[[List[str]], Tuple[int, str, str]]


class SchedulerError(Exception):
    pass


class ToolMissing(SchedulerError):
    """The scheduler's command is not on PATH (not this scheduler's login node?)."""


@dataclass
class QueueLimits:
    """What a queue (PBS) or partition (Slurm) admits, as its server says (None: no limit set)."""
    name: str
    enabled: bool = True        # PBS enabled / Slurm State=UP: it takes new jobs
    started: bool = True        # PBS started / Slurm not DRAIN|INACTIVE: its jobs can start
    min_nodes: Optional[int] = None
    max_nodes: Optional[int] = None
    min_walltime: Optional[float] = None
    max_walltime: Optional[float] = None
    total_nodes: Optional[int] = None  # the nodes it has (Slurm TotalNodes): more is never met
    source: str = ""                   # the query that said so, for the finding's line
    route_to: Tuple[str, ...] = ()     # a routing queue's destinations, in order (PBS route_destinations)
    from_route_only: bool = False      # takes jobs from a routing queue only, not from qsub (PBS)
    # The jobs one user may have in it. `user_run` counts running ones (PBS max_run [u:...], Slurm
    # QOS MaxJobsPU). `user_queued` counts all, running or waiting (PBS max_queued [u:...], Slurm QOS
    # MaxSubmitJobsPU). None means no limit. `*_said` is the server's own words for it, quoted by a finding.
    user_run: Optional[int] = None
    user_run_said: str = ""
    user_queued: Optional[int] = None
    user_queued_said: str = ""
    users_only: Optional[Tuple[str, ...]] = None   # an access list: only these users may submit (None: all)
    groups_only: Optional[Tuple[str, ...]] = None  # only members of these groups may (None: all)


@dataclass
class ServerQueues:
    """Every queue (partition) a server has, its default, and the user's jobs in each, as the server says.

    The user's jobs are those running or waiting now, by id. Preflight judges a job's shape against
    all of this."""
    queues: Dict[str, QueueLimits]
    default: Optional[str] = None
    mine: Dict[str, List[str]] = field(default_factory=dict)
    source: str = ""


class Scheduler:
    """Defaults describe a scheduler with no queue (the local shell); subclasses override."""
    name: str = ""
    prefix: Optional[str] = None        # directive prefix ('#PBS', '#SBATCH'); None: no header
    header_template = "header.j2"       # renders `prefix directive` lines (templates/)
    title = ""                          # for the script's comment line
    jobid_var: Optional[str] = None     # the job's id inside a job (PBS_JOBID, SLURM_JOB_ID)
    query_tool: Optional[str] = None    # on a login node, its presence means "this scheduler"
    nodefile_var: Optional[str] = None  # the job's node file, where the scheduler writes one (PBS_NODEFILE)
    # Bash that sets RL_NODEFILE (one line per host or per slot) inside the job. The renderer fills
    # in {nodefile}: the experiment's own node file (layout).
    nodefile_sh = 'RL_NODEFILE={nodefile}\n[ -s "$RL_NODEFILE" ] || hostname > "$RL_NODEFILE"'

    @property
    def can_chain(self) -> bool:
        return type(self).chain_cmd is not Scheduler.chain_cmd

    def chain_cmd(self, after_job: str, script: str, pass_env: Sequence[str] = ()) -> List[str]:
        """argv that submits `script` again, to start once job `after_job` has ended (any way:
        relaunch.chain); its output is parse_submit's input. `pass_env`: as for submit_cmd."""
        return self._no_queue()

    @property
    def has_queue(self) -> bool:
        return type(self).submit_cmd is not Scheduler.submit_cmd

    def directives(self, sc: Scenario) -> List[str]:
        """Directive bodies (after the prefix), deterministic."""
        return []

    def _no_queue(self, *_a, **_k):
        raise SchedulerError(f"the {self.name} scheduler has no queue: use `restartlab run SCENARIO`")

    def submit_cmd(self, script: str, pass_env: Sequence[str] = ()) -> List[str]:
        """argv that submits `script`.

        `pass_env` names the variables of the submitting environment that the job must get. They
        are the scenario's secrets, passed by name: never a value on a command line."""
        return self._no_queue()

    def parse_submit(self, stdout: str) -> str:
        return self._no_queue()

    def status(self, ids: Sequence[str], run: Runner) -> Dict[str, JobStatus]:
        """State of many jobs in as few queries as the scheduler allows."""
        rc, out, err = run(self.status_cmd(ids))
        return self.parse_status(out, ids, rc, err)

    def status_cmd(self, ids: Sequence[str]) -> List[str]:
        return self._no_queue()

    def parse_status(self, stdout: str, ids: Sequence[str], returncode: int = 0,
                     stderr: str = "") -> Dict[str, JobStatus]:
        return self._no_queue()

    def cancel_cmd(self, jobid: str) -> List[str]:
        return self._no_queue()

    def server_queues(self, run: Runner, user: Optional[str]) -> Optional[ServerQueues]:
        """Every queue the server has, with the per-user limits it enforces and, for `user`, the
        jobs that user has in each; None where the scheduler has no queues. SchedulerError when the
        server cannot be asked."""
        return None

    # a job id of this scheduler, as `status` and `cancel` are given one (None: it has no queue)
    jobid_pattern: Optional[str] = None

    def run_facts(self, jobid: str, since: Optional[float], run: Runner) -> Optional[RunFacts]:
        """What the scheduler says of this run of job `jobid`, asked from inside it as it starts.

        That is how many times it has started, when this run started, and the nodes whose state
        changed after `since`, the start of the job's previous run. None where the scheduler keeps
        no such record (the local shell)."""
        return None

    def cancel_error(self, returncode: int, stdout: str, stderr: str) -> Optional[str]:
        """None when the cancel went through, else the reason."""
        return (stderr.strip() or stdout.strip() or f"exit code {returncode}") if returncode else None

    def job_hosts(self, env: Mapping[str, str]) -> Optional[List[str]]:
        """Inside a job with no node file at hand: the job's hosts, in order (None: unknown)."""
        return None

    # the command the fan-out reaches other nodes with (None: this scheduler has none), and where
    # it is looked for (a finding's words)
    fanout_tool: Optional[str] = None
    fanout_where = "on PATH"

    def fanout_path(self, env: Mapping[str, str]) -> Optional[str]:
        """The fan-out command's path as the job will find it; None when it is not there."""
        return shutil.which(self.fanout_tool) if self.fanout_tool else None

    # False where the fan-out's command does not hand back what it ran. PBS's pbsdsh is one: the
    # task's output goes to the job's output file, and pbsdsh exits 0 whatever the task did. The
    # fan-out then has each command write its output and exit status to files on the shared file system.
    fanout_relays_output = True

    def fanout_cmd(self, node_index: int, hosts: List[str], argv: List[str],
                   slots: Optional[List[int]] = None) -> List[str]:
        """argv that runs `argv` once on node `node_index` of `hosts` (slots: each host's first
        line in the node file). Default: this host (no scheduler to reach other nodes)."""
        return list(argv)


SCHEDULERS: Registry[Scheduler] = Registry("scheduler")
register = SCHEDULERS.register


def run_tool(argv: List[str]) -> Tuple[int, str, str]:
    """(rc, stdout, stderr) of a scheduler command (qstat, sacct, qdel, ...).

    A missing tool, or one that does not answer in 120 s, is a SchedulerError."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ToolMissing(f"`{argv[0]}` is not on PATH")
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"`{' '.join(argv)}` did not answer in 120 s")
    return r.returncode, r.stdout, r.stderr
