"""The option tables of restartlab's own tools: `supervise` (the relaunch loop), `node-check`,
`teardown` and `inject`. Each table feeds the tool's argparse, the argv the job script passes, and
(for options that come from a scenario key) the scenario schema's field: one default per option.
Torch-free and light: the scenario loader and the renderer import it on a login node, the runtime's
tools inside the job."""
import argparse
import dataclasses
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from .. import failures, launchers, schedulers
from ..contracts.signals import parse_signal
from ..contracts import layout
from ..contracts.envvars import NODEFILE_VAR, SLOW_WRITES_HOLDS
from ..contracts.options import Opt, add_to_parser, to_argv

FANOUTS = lambda: schedulers.names() + ["mpiexec"]  # noqa: E731  (the registries fill in at import)
POLICIES = ("same", "spares", "shrink")
LAUNCHER_DEFAULT = "hydra"  # the scenario's launch.launcher default, and every tool's --launcher


SUPERVISE = [
    Opt("--phase", "str", None, "the phase's name", required=True),
    Opt("--phase-dir", "str", None, "the phase's directory (attempts/<k> are made in it)", required=True),
    Opt("--tag", "str", None, "the job tag the ranks carry (teardown finds them by it)", required=True),
    Opt("--train-iters", "int", 100, "the phase is completed when rank 0 logs this step's final row",
        scenario="trainer.train_iters"),
    Opt("--launch", "str", None, "how each attempt's ranks start (tools/launch.py's LaunchSpec as JSON: python, "
        "launcher, nodes, ranks_per_node, env, forward, cpu_bind, depth, hostfile, mpiexec, launcher_args, rankenv); "
        "the program's own argv follows --", required=True),
    Opt("--max-attempts", "int", 10, "launches per phase in this job before the phase fails",
        scenario="relaunch.max_attempts", min=1),
    Opt("--backoff", "duration", 0.0, "pause between attempts", scenario="relaunch.backoff"),
    Opt("--master-suffix", "str", "", "appended to the first host's name for MASTER_ADDR, where ranks must meet "
        "over another network than the host name's (Aurora: .hsn.cm.aurora.alcf.anl.gov, its Slingshot "
        "network's names); an exported MASTER_ADDR is taken as it is", scenario="launch.master_addr_suffix"),
    Opt("--hang-timeout", "duration", 600.0, "stop an attempt whose output has not changed for this "
        "long (once it has taken a step)", scenario="relaunch.hang_timeout", positive=True),
    Opt("--teardown-timeout", "duration", 15.0, "seconds each node has to answer the stop of an attempt (its "
        "stacks, then KILL): a node that has not (cut off, down) is named unreachable in the attempt's teardown "
        "log and the stop goes ahead on the others", scenario="relaunch.teardown_timeout", positive=True),
    Opt("--node-wait", "duration", 600.0, "with on_node_loss same: how long a node the stop of an attempt could "
        "not reach has to answer again before the next launch on the same nodes (a launch onto it fails at "
        "once); meanwhile the scheduler may mark it down and requeue the job; 0: relaunch at once",
        scenario="relaunch.node_wait", min=0.0),
    Opt("--startup-timeout", "duration", 1200.0, "the same, before the attempt's first step (imports, "
        "rendezvous and the checkpoint load may take minutes at scale)", scenario="relaunch.startup_timeout",
        positive=True),
    Opt("--rank-exit-grace", "duration", 60.0, "stop an attempt this long after one of its ranks ended "
        "badly (an exit status or a signal, from the ranks' exit records) while others still run: a launcher "
        "may leave them waiting for it in a collective until its timeout (Hydra ends the others only when "
        "one dies by a signal); 0: never (the watchdogs still apply)", scenario="relaunch.rank_exit_grace",
        min=0.0),
    Opt("--walltime-margin", "duration", 120.0, "this long before job.walltime, the ranks get the "
        "trainer's preempt_signal: an emergency checkpoint lands before the scheduler kills the job, and "
        "no attempt is launched after it (0: off)", scenario="relaunch.walltime_margin"),
    Opt("--stop-at", "float", 0.0, "epoch seconds at which the walltime margin starts (the job script "
        "computes it from its start; 0: never)"),
    Opt("--preempt-signal", "str", "TERM", "the trainer's preemption signal (the walltime warning)",
        scenario="trainer.preempt_signal"),
    Opt("--fanout", "str", "local", "how teardown and the node check reach the job's nodes",
        choices=FANOUTS, scenario="scheduler"),
    Opt("--nodefile", "str", None, "the job's node file (default: $RL_NODEFILE)"),
    Opt("--job", "str", "local", "the batch job id (recorded with each attempt)"),
    Opt("--node-policy", "str", "same", "same: relaunch on every node; spares: swap a spare in for each "
        "node the health check finds bad (job.spare_nodes); shrink: relaunch on the healthy nodes only, "
        "fewer ranks, the same global batch", choices=POLICIES, scenario="relaunch.on_node_loss"),
    Opt("--node-check", "flag", False, "run `restartlab node-check` before every attempt, with the "
        "--node-check-* flags (node-check's own under this prefix, not listed here: `restartlab node-check --help`; "
        "the supervisor adds the per-attempt ones); absent: no check"),
    Opt("--hosts-file", "str", None, "where the node check writes the next attempt's hosts (the "
        "launcher's host file)"),
    Opt("--inject", "flag", False, "run `restartlab inject` for the phase's lifetime, with the --inject-* "
        "flags (the injector's own under this prefix, not listed here: `restartlab inject --help`; the supervisor "
        "adds where the phase and its ranks are); absent: no injector"),
    Opt("--ckpt-dir", "str", None, "the phase's checkpoint directory: each attempt records what it holds "
        "at launch (which checkpoint a correct resume loads, which one the program picks)"),
    Opt("--program", "str", None, "the training program's adapter spec (JSON, from trainer.program); "
        "absent: the bundled trainer"),
    Opt("--warm", "flag", False, "warm standby restart: a pool on the node imports the program once and "
        "forks each attempt's ranks from it (restartlab.runtime.warm); falls back to cold launches, and says so, "
        "when the pool cannot start", scenario="relaunch.warm"),
    Opt("--warm-preload", "str", None, "the modules the standby pool imports (comma-separated; default: "
        "the program adapter's: restartlab.trainer.warmup for the bundled trainer, torch,lightning.pytorch "
        "for lightning, torch,accelerate for accelerate, torch for the others)", scenario="relaunch.warm_preload"),
    Opt("--state-every", "int", 10, "training-state fingerprints (what a resume restored, piece by piece: "
        "contracts/state_record.py): each rank of a PyTorch program records its learning rate, optimizer step "
        "count, RNG streams and batch at every optimizer step, and its parameters' and optimizer state's crcs on "
        "each attempt's first 2 steps and at steps 1, N+1, 2N+1, ... (they read all the rank's state; a resume from a "
        "checkpoint at a multiple of N is compared in full: let N divide the save interval; on CPU the small model "
        "pays 4 ms of a 0.28 s step at 10, 19 ms at 1: bench/state_probe.py); 0: none",
        scenario="collection.state_every", min=0),
    Opt("--slow-writes-rank", "int", 0, "the rank (its RANK) whose torch.save writes are slowed (slow_writes.seconds)",
        scenario="failures.slow_writes.rank", min=0),
    Opt("--slow-writes-seconds", "duration", 0.0, "a failure ingredient: each torch.save to a file on that rank "
        "writes half the bytes, holds this long, then the rest, so that a kill can find its file torn while the "
        "other ranks' are whole (a Python program of yours that imports torch: trainer/slow_writes.py); 0: off",
        scenario="failures.slow_writes.seconds", min=0),
    Opt("--slow-writes-hold", "str", "inside", "where a slowed write is held: inside (the file there, half of it "
        "written: a rank's file cut short) or before (the file not yet begun: a rank late to its save)",
        choices=SLOW_WRITES_HOLDS, scenario="failures.slow_writes.hold"),
    Opt("--tick", "float", 1.0, "seconds between the watchdog's looks", hidden=True),
    # recovery without a restart (the phase's recovery: mapping; restartlab.runtime.ft_phase)
    Opt("--ft-groups", "int", 0, "torchft: run the phase as this many replica groups joined by torchft's "
        "lighthouse, each under a relaunch loop of its own (the program's {group} is its number); a "
        "failure relaunches only the group it hit and the others train on; 0: one relaunch loop", min=0),
    Opt("--ft-min-replicas", "int", 1, "torchft: the lighthouse's --min_replicas and each group's "
        "min_replica_size (a step commits only with this many groups in it)", min=1),
    Opt("--ft-heartbeat-timeout", "duration", 5.0, "torchft: the lighthouse takes a group that has not "
        "heartbeated for this long as dead (its --heartbeat_timeout_ms)", positive=True),
    Opt("--ft-join-timeout", "duration", 60.0, "torchft: how long the lighthouse waits for heartbeating "
        "groups to join before it issues a quorum without them (its --join_timeout_ms)", positive=True),
    Opt("--ft-group", "int", -1, "torchft: this loop runs replica group K of a torchft phase (its phase's "
        "supervisor sets it): the watchdog's progress is a committed step (a metrics row), not output: a group "
        "that cannot commit (e.g. its heal fails at every step) is stopped after --startup-timeout/--hang-timeout",
        hidden=True),
]

NODE_CHECK = [
    Opt("--local", "flag", False, "check this node only; print one JSON line"),
    Opt("--stage-dir", "str", None, "must be writable with --min-free bytes free"),
    Opt("--min-free", "int", 0, "bytes a checkpoint shard needs in the stage dir"),
    Opt("--device", "str", "cpu", "cpu, cuda or xpu: which accelerators to count", choices=("auto", "cpu", "cuda", "xpu")),
    Opt("--gpus", "int", 0, "accelerators each node must show (cuda/xpu device nodes; 0: none checked)",
        scenario="relaunch.node_check_gpus", min=0),
    Opt("--site-cmd", "str", None, "a site's own health check (shell, run on each node), must exit 0",
        scenario="relaunch.node_check_cmd"),
    Opt("--timeout", "duration", 60.0, "seconds each node has to answer the health check",
        scenario="relaunch.node_check_timeout", positive=True),
    Opt("--fanout", "str", "local", "how to reach the nodes", choices=FANOUTS),
    Opt("--launcher", "str", LAUNCHER_DEFAULT, "--fanout mpiexec: the job's launcher", choices=launchers.names),
    Opt("--nodefile", "str", None, "the job's node file (default: $RL_NODEFILE)"),
    Opt("--bad-file", "str", None, "the job's bad nodes, one per line (read, and appended to)"),
    Opt("--log", "str", None, "append one JSON line per node checked (the phase's node-check log)"),
    Opt("--attempt", "int", 0, "the attempt about to launch (for the log)"),
    Opt("--policy", "str", "same", "the recovery policy (relaunch.on_node_loss)", choices=POLICIES),
    Opt("--need", "int", 0, "nodes the next attempt wants (default all)"),
    Opt("--min-nodes", "int", 1, "shrink: never relaunch on fewer nodes than this", scenario="relaunch.min_nodes",
        min=1),
    Opt("--hosts-out", "str", None, "write the next attempt's hosts here, one per line"),
]

TEARDOWN = [
    Opt("--tag", "str", None, "the job tag of the ranks", required=True),
    Opt("--signal", "str", "KILL", "signal name or number"),
    Opt("--fanout", "str", "local", "how to reach the nodes", choices=FANOUTS),
    Opt("--launcher", "str", LAUNCHER_DEFAULT, "--fanout mpiexec: the job's launcher", choices=launchers.names),
    Opt("--nodefile", "str", None, "the job's node file (default: $RL_NODEFILE)"),
    Opt("--timeout", "duration", 15.0, "seconds each node has to answer: one that has not is named unreachable "
        "and the others are not held up", positive=True),
]


# restartlab report, as the job script runs it at its end (its other flags are for a user's own use)
REPORT = [
    Opt("--mtbf", "duration", 3600, "MTBF for the Young-Daly interval in the report", scenario="collection.mtbf",
        positive=True),
    Opt("--no-plots", "flag", False, "no PNG plots (collection.plots: false)"),
]

# restartlab chain, as the job script runs it (relaunch.chain). It runs when the walltime margin or
# the relaunch budget ended the job before the last step. The script adds --job, this job's id, itself.
CHAIN = [
    Opt("--scheduler", "str", None, "the scheduler the continuation job goes to",
        choices=lambda: [s for s in schedulers.names() if schedulers.get(s).can_chain], required=True),
    Opt("--max", "int", None, "continuation jobs the chain may submit in all", required=True),
    Opt("--job", "str", None, "this job's id (the continuation starts after it)", required=True),
    Opt("--pass-env", "str", "", "names of variables (the scenario's secrets) the continuation job gets "
        "from this job's environment, comma-separated"),
]


def signal_name(v: str) -> str:
    try:
        parse_signal(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return v


def parse_at_steps(text: str) -> List[Tuple[int, Optional[str]]]:
    """'500,1000:hang,1500:preempt' -> [(500, None), (1000, 'hang'), (1500, 'preempt')]."""
    out: List[Tuple[int, Optional[str]]] = []
    for item in filter(None, (x.strip() for x in str(text).split(","))):
        step, _, kind = item.partition(":")
        if not step.isdigit() or int(step) < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected STEP or STEP:KIND with STEP >= 1")
        if kind and kind not in failures.KINDS:
            raise argparse.ArgumentTypeError(f"{item!r}: unknown failure kind {kind!r} "
                                             f"(known: {', '.join(failures.KINDS.names())})")
        out.append((int(step), kind or None))
    if not out:
        raise argparse.ArgumentTypeError("no steps given")
    return out


def gate_of(gate: Optional[str], step_schedule: bool) -> str:
    """The injector's gate, decided once: as given, else `complete` for step-aimed schedules
    (a kill waits for step-S/.complete) and `none` for timed ones."""
    return gate or ("complete" if step_schedule else "none")


SCHEDULE_FLAGS = ("--every", "--at-steps", "--every-steps", "--mtbf", "--fuzz")  # exactly one (a required group)
INJECT = [
    Opt("--kind", "str", "kill", "what fails: " + "; ".join(f"{k.name}: {k.doc}" for k in failures.KINDS.all()),
        choices=failures.KINDS.names, scenario="failures.kind"),
    Opt("--signal", "str", None, "signal sent to every struck rank's process tree, a name or number (default: "
        "the failure kind's: KILL, STOP for hang, TERM for preempt)", scenario="failures.signal"),
    Opt("--grace", "duration", 60.0, "preempt: SIGKILL what is left this long after the SIGTERM", positive=True,
        scenario="failures.grace"),
    Opt("--node", "int", None, "node index for kinds node and rank (default: node from the seed; rank: node 0)",
        scenario="failures.node"),
    Opt("--duration", "duration", 30.0, "partition, flap (each time down), slow_link, stall_writes, slow_storage, "
        "write_errors: how long the fault lasts; partition and write_errors 0: it never heals (undone when the phase is done, else when the walltime margin begins)", min=0,
        scenario="failures.duration"),
    Opt("--flaps", "int", 3, "flap: how many times the link goes down", positive=True, scenario="failures.flaps"),
    Opt("--flap-up", "duration", 5.0, "flap: how long the link is up between two downs", positive=True,
        scenario="failures.flap_up"),
    Opt("--rate", "str", "1mbit", "slow_link: the link's rate (tc's units: 500kbit, 1mbit, 1gbit); slow_storage: "
        "the writes' rate (the same units: bit for bits, bps for bytes a second)",
        scenario="failures.rate"),
    Opt("--rank", "int", 0, "stall_writes, slow_storage, write_errors, torn: the rank (its RANK) whose checkpoint "
        "writes are struck", min=0, scenario="failures.rank"),
    Opt("--all-ranks", "flag", False, "stall_writes, slow_storage, write_errors, torn: every rank's checkpoint "
        "writes are struck, not failures.rank's", scenario="failures.all_ranks"),
    Opt("--errno", "str", "EIO", "write_errors: what the failing calls return", choices=("EIO", "ENOSPC"),
        scenario="failures.errno"),
    Opt("--after-bytes", "int", 0, "write_errors: the calls fail once this many bytes of the rank's checkpoint "
        "writes are written after the strike; torn: the write that reaches this many bytes is cut there, across "
        "the files (and saves) the rank writes after the strike (0: half of its first write)", min=0,
        scenario="failures.after_bytes"),
    Opt("--root-cmd", "str", None, "partition, flap, slow_link: what runs ip and tc as root on the struck node "
        "(e.g. 'sudo -n'); none: the job itself runs as root", scenario="failures.root_cmd"),
    Opt("--every", "duration", None, "timed kills: one every DURATION (90s, 5m)", positive=True,
        scenario="failures.schedule.every"),
    Opt("--at-steps", "str", None, "kills aimed at these steps, each with its own kind if given: "
        "500,1000:hang,1500:preempt"),  # the scenario's failures.schedule.at_steps is a list (scenario/schema.py)
    Opt("--every-steps", "int", None, "a kill aimed at every N-th step", positive=True,
        scenario="failures.schedule.every_steps"),
    Opt("--mtbf", "duration", None, "Poisson failures with this mean time between failures (reproducible from "
        "the seed)", positive=True, scenario="failures.schedule.mtbf"),
    Opt("--fuzz", "int", None, "kill anywhere (`restartlab fuzz`): N kills, one per attempt, each at a random "
        "point from the attempt's launch on, about half of them inside a save (a checkpoint being written, "
        "seen in the checkpoint dir); reproducible from the seed", positive=True,
        scenario="failures.schedule.fuzz"),
    Opt("--seed", "int", 0, "seed for mtbf inter-arrival times, fuzz choices and the one-node target choice",
        scenario="failures.schedule.seed"),
    Opt("--gate", "str", None, "complete: step-aimed kills wait for step-S/.complete (the default for step "
        "schedules); none: fire on time", choices=("complete", "none"), scenario="failures.gate"),
    Opt("--wait-first-complete", "flag", False, "timed schedules: start the clock at the first complete "
        "checkpoint", scenario="failures.wait_first_complete"),
    Opt("--max-kills", "int", None, "stop after N kills", positive=True, scenario="failures.max_kills"),
    Opt("--fuzz-window", "duration", 10.0, "fuzz: a kill not aimed at a save strikes at most this long after "
        "its attempt's launch (uniformly); one aimed at a save that sees none within twice this long strikes "
        "then", positive=True, scenario="failures.fuzz_window"),
    Opt("--fuzz-save-share", "float", 0.5, "fuzz: the share of kills aimed inside a save", min=0,
        scenario="failures.fuzz_save_share"),
    Opt("--fuzz-save-jitter", "duration", 0.02, "fuzz: a kill aimed inside a save strikes this long at most "
        "(uniformly) after the save shows in the checkpoint dir; widen it to reach a save's later part (what a "
        "framework writes last, e.g. DeepSpeed's `latest` before the other ranks' shards)", min=0,
        scenario="failures.fuzz_save_jitter"),
    Opt("--fuzz-after-complete", "flag", False, "fuzz: a kill aimed at a save waits for a save made while a "
        "complete checkpoint exists (what a kill there may lose)", scenario="failures.fuzz_after_complete"),
    Opt("--fuzz-kinds", "str", None, "fuzz: each strike's kind drawn (from the seed) among these, comma-separated: "
        "kill, node, rank, torn (a file of the next save cut at a byte drawn below 1 MiB, the rank killed there); "
        "default: failures.kind", scenario="failures.fuzz_kinds"),
    Opt("--until", "str", None, "stop when this file exists (the phase's done flag)"),
    Opt("--job-end", "float", 0.0, "epoch seconds at which the batch job's walltime margin begins (the "
        "supervisor's --stop-at): a network fault is undone then at the latest, whatever becomes of the job (0: "
        "unknown; an hour after it began)"),
    Opt("--ckpt-dir", "str", None, "the phase's checkpoint directory (gating, finish detection)"),
    Opt("--program", "str", None, "the training program's adapter spec (JSON, from trainer.program): "
        "which checkpoints are complete; absent: the bundled trainer's step-N/.complete"),
    Opt("--phase-dir", "str", None, "write the phase's injection records; read progress from its attempts"),
    Opt("--train-iters", "int", None, "stop once a complete checkpoint reaches this step"),
    Opt("--tag", "str", None, "only one restartlab run's ranks (their RESTARTLAB_JOB_TAG); default: "
        "every rank of this batch job, whatever program it runs"),
    Opt("--fanout", "str", None, "how to reach the nodes (default: the scheduler this job runs under, "
        "else local)", choices=FANOUTS),
    Opt("--nodefile", "str", None, "the job's node file (default: $RL_NODEFILE)"),
    Opt("--launcher", "str", LAUNCHER_DEFAULT, "the job's launcher: how --fanout mpiexec names hosts",
        choices=launchers.names),
]
# the injector's flags that need a parser of their own (the table's type is how they are written)
INJECT_PARSERS = {"--at-steps": parse_at_steps, "--signal": signal_name}


def add_inject_args(p: argparse.ArgumentParser) -> None:
    """The injector's argparse: the table, with the schedule flags as one required group."""
    g = p.add_mutually_exclusive_group(required=True)
    add_to_parser(g, [o for o in INJECT if o.flag in SCHEDULE_FLAGS], INJECT_PARSERS)
    add_to_parser(p, [o for o in INJECT if o.flag not in SCHEDULE_FLAGS], INJECT_PARSERS)
    p.add_argument("--python", default=None, help=argparse.SUPPRESS)


# A tool that runs another one takes that tool's flags as its own, each under the other's name
# (`supervise --inject-every 90s`, `--node-check-timeout 60s`). The same table parses and checks them
# when the job script starts the tool that takes them. That tool passes them on as a list: no flag
# travels as one joined string.
# Below: what the supervisor gives each tool from its own settings (the phase, the job, the attempt).
NODE_CHECK_FROM_SUPERVISOR = ("--local", "--fanout", "--launcher", "--nodefile", "--policy", "--log", "--attempt",
                              "--hosts-out")
INJECT_FROM_SUPERVISOR = ("--until", "--ckpt-dir", "--program", "--phase-dir", "--train-iters", "--tag", "--fanout",
                          "--nodefile", "--launcher", "--job-end")


@dataclasses.dataclass(frozen=True)
class Embedded:
    """`table`'s options inside another tool's argparse, as --<prefix>-<flag>.

    They are hidden, since restartlab passes them itself. Each keeps the table's type, default and
    check. `drop` names the ones the embedding tool decides itself."""
    prefix: str
    table: List[Opt]
    drop: Tuple[str, ...] = ()
    parsers: Dict[str, Callable[[str], Any]] = dataclasses.field(default_factory=dict)

    def _pairs(self) -> Iterator[Tuple[Opt, Opt]]:
        for o in self.table:
            if o.flag not in self.drop:
                yield o, dataclasses.replace(o, flag=f"--{self.prefix}-{o.flag[2:]}", scenario=None,
                                             required=False, hidden=True)

    @property
    def options(self) -> List[Opt]:
        return [e for _, e in self._pairs()]

    def add_to_parser(self, parser: argparse.ArgumentParser) -> None:
        add_to_parser(parser, self.options, {e.flag: self.parsers[o.flag] for o, e in self._pairs()
                                             if o.flag in self.parsers})

    def argv(self, values: Dict[str, Any]) -> List[str]:
        """The embedding tool's flags for the table's `values` (by the table's keys)."""
        ours = {o.key: e.key for o, e in self._pairs()}
        unknown = set(values) - set(ours)
        if unknown:
            raise KeyError(f"not passed through --{self.prefix}-*: {', '.join(sorted(unknown))}")
        return to_argv(self.options, {ours[k]: v for k, v in values.items()})

    def values(self, a: argparse.Namespace) -> Dict[str, Any]:
        """The table's values (by its keys) from the embedding tool's parsed arguments."""
        return {o.key: getattr(a, e.key) for o, e in self._pairs()}


def _as_written(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """`parse`'s check, keeping the text (a value passed on to the tool that parses it)."""
    def check(v: str) -> str:
        parse(v)
        return v
    return check


def injector_argv(settings: Dict[str, Any], phase_dir: str, ckpt_dir: Optional[str], program: Optional[str],
                  train_iters: int, tag: str, fanout: str, launcher: str, nodefile: Optional[str] = None,
                  job_end: float = 0.0) -> List[str]:
    """`restartlab inject`'s whole line as a phase's supervisor runs it: the phase's failure
    settings (the --inject-* values) and where the phase, its ranks and its nodes are (the
    INJECT_FROM_SUPERVISOR options). The job script's injection plan is the same call."""
    return to_argv(INJECT, dict(settings, until=layout.Phase(phase_dir).done, ckpt_dir=ckpt_dir, program=program,
                                phase_dir=phase_dir, train_iters=train_iters, tag=tag, fanout=fanout,
                                nodefile=nodefile, launcher=launcher, job_end=job_end))


SUPERVISE_NODE_CHECK = Embedded("node-check", NODE_CHECK, drop=NODE_CHECK_FROM_SUPERVISOR)
SUPERVISE_INJECT = Embedded("inject", INJECT, drop=INJECT_FROM_SUPERVISOR,
                            parsers={f: _as_written(p) for f, p in INJECT_PARSERS.items()})


def nodefile_default(value: Optional[str], env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The node file a tool uses.

    That is the tool's --nodefile, else the job script's $RL_NODEFILE. Else it is the node file of
    the batch job we run in (PBS_NODEFILE, or the local scheduler's own). Else None: this host."""
    env = os.environ if env is None else env
    if value or env.get(NODEFILE_VAR):
        return value or env[NODEFILE_VAR]
    return next((env[s.nodefile_var] for s in schedulers.base.SCHEDULERS.all()
                 if s.nodefile_var and env.get(s.nodefile_var)), None)


def schema_fields(table: List[Opt], prefix: str) -> Dict[str, Opt]:
    """{key: option} of the options that come from the scenario key `prefix`.<key>."""
    return {o.scenario.split(".", 1)[1]: o for o in table if o.scenario and o.scenario.startswith(prefix + ".")}

