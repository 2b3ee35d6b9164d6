"""The scenario schema: every key a scenario may hold, its type, default and help. The keys a tool
or the trainer owns are generated from its option table (contracts.options: `relaunch:`,
`failures:`, `collection:`, `trainer:`); the rest are the schema's own fields. The reference pages
are generated from it."""
import re

from .. import launchers, programs, schedulers
from ..contracts import trainer_options
from ..tools import options as tool_options

MAX_INT = 2 ** 62    # every count and step fits torch's int64

# A field: (type check, default, doc). Mappings are dicts of fields; lists use ListOf.
class F:
    def __init__(self, kind, default=None, doc="", choices=None, required=False, min=None, positive=False):
        self.kind, self.default, self.doc, self.choices, self.required = kind, default, doc, choices, required
        self.min, self.positive = min, positive


class ListOf:
    def __init__(self, item, default=None, doc=""):
        self.item, self.default, self.doc = item, default if default is not None else [], doc


SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

PROGRAM = {
    "command": ListOf(F("str"), doc="the program's argv on every rank (the launcher line runs it); "
                      "{ckpt_dir}, {phase_dir}, {attempt_dir} and {scenario_dir} are replaced"),
    "adapter": F("str", "generic", "the program's conventions (restartlab.programs registry): "
                 + "; ".join(f"{a.name}: {a.doc}" for a in programs.ADAPTERS.all()), choices=programs.names),
    "progress": F("str", None, "regex over a line of rank 0's output with a (?P<step>...) group, "
                  "optionally (?P<loss>...) and (?P<dt>...) (ANSI codes and [rankN]: prefixes stripped); "
                  "not used when progress_file is given. Without either: the steps are rank 0's torch "
                  "optimizer steps, from the training-state probe (collection.state_every must not be 0)"),
    "loss_line": F("str", None, "without progress: regex for the program's own log line that gives a loss "
                   "without a step, with a (?P<loss>...) group (default: the adapter's; transformers: its "
                   "{'loss': '5.399', ...} lines); rank 0's probe reads it as the program writes it, so the loss is "
                   "the step's it was printed after, rounded as the program prints it"),
    "progress_file": F("str", None, "instead of progress: a file rank 0 appends a record to per step, "
                       "ending .jsonl (a JSON object per line) or .csv (a header row, then a row per step); "
                       "{ckpt_dir}, {phase_dir}, {attempt_dir} and {scenario_dir} are replaced. What it holds "
                       "at a launch is skipped (read from the start again if it shrinks); a path with "
                       "{attempt_dir} is exact"),
    "progress_fields": F("strmap", {}, "progress_file: the record's key (or column) of step, loss and dt "
                         "(default: step, loss, dt)"),
    "checkpoints": F("str", None, "regex over checkpoint paths ({ckpt_dir} stands for the checkpoint dir) "
                     "with a (?P<step>...) group: a file or a directory"),
    "complete": F("str", None, "when a checkpoint is complete: " + ", ".join(programs.COMPLETE_RULES)
                  + " (default: the adapter's; generic: exists)"),
    "selects": F("str", None, "which checkpoint the program itself loads on a restart: "
                 + ", ".join(programs.SELECT_RULES) + " (default: the adapter's; generic: newest_complete)"),
    "resumed": F("str", None, "regex for the program's own resume line, with a (?P<step>...) group "
                 "(without it: the highest checkpoint below the first step logged)"),
    "saved": F("str", None, "regex for the program's line after a save, with a (?P<seconds>...) group (the time "
               "the training loop was blocked) and optionally (?P<step>...): booked as a save stall"),
    "saving": F("str", None, "regex for the program's line as a save starts, for a program that does not log a "
                "save's length: its stall is estimated from the step times around it (booked as estimated)"),
    "counts": F("str", None, "what the number in a checkpoint's name counts: steps, or saves (with "
                "save_every: step = (K + 1) x save_every; default: the adapter's, generic: steps)"),
    "save_every": F("int", None, "counts: saves: the steps between two saves (preflight also sizes the run's "
                    "checkpoints from it)", positive=True),
    "checkpoint_bytes": F("bytes", None, "what one of the program's checkpoints takes on disk (e.g. 24GB): "
                          "preflight sizes the run from it (x the saves, steps / save_every) against the free "
                          "space and quota where the experiment is written"),
    "steps": F("int", None, "the last step: a phase is completed when the program logged it and exited (a crash at exit once its last checkpoint is complete: a finding, not a relaunch)",
               required=True, positive=True),
    "tolerance": F("float", 0.0, "the survival verdict: the loss after a resume may differ from the "
                   "baseline's at the same step by this relative amount (0: identical)", min=0),
}


def _fields(tables, prefix):
    """Schema fields of the scenario keys under `prefix` that an option table owns.

    A key with more dots is a field of a nested mapping, such as failures.schedule.every or
    trainer.wandb.project. Each field has the option's type (a flag is true/false), default, help
    and bounds."""
    out = {}
    for table in tables:
        for key, o in tool_options.schema_fields(table, prefix).items():
            *heads, sub = key.split(".")
            where = out
            for h in heads:
                where = where.setdefault(h, {})
            where[sub] = F("bool" if o.type == "flag" else o.type,
                           o.default if o.scenario_default is None else o.scenario_default, o.help,
                           choices=o.choices, min=o.min, positive=o.positive)
    return out


def _trainer_schema():
    """`trainer:` keys from the trainer's option table (grouped options as sub-mappings)."""
    out = _fields([trainer_options.OPTIONS], "trainer")
    out["extra_args"] = ListOf(F("str"), doc="more trainer flags, passed as arguments")
    out["program"] = F("program", None, "your own training program instead of the bundled trainer: "
                       "its command and how to read its progress and checkpoints (keys: "
                       + ", ".join(PROGRAM) + ")")
    return out


def _from_tool_tables(prefix):
    return _fields([tool_options.SUPERVISE, tool_options.NODE_CHECK, tool_options.REPORT, tool_options.INJECT], prefix)


# failures: the injector's table (tool_options.INJECT), but for at_steps, a list here and a string there
AT_STEPS = F("intlist", None, "kills aimed at these steps; an item may be {step: N, kind: K} to mix failure kinds "
             "in one schedule")
FAILURES = {k: {"at_steps": AT_STEPS, **v} if k == "schedule" else v for k, v in _from_tool_tables("failures").items()}


def _ft(flag):
    return next(o for o in tool_options.SUPERVISE if o.flag == flag)


# A phase's recovery strategy. `restart` is the relaunch loop: cold, or warm with the phase's warm
# key. `torchft` is replica groups that recover without a restart (runtime/ft_phase.py, trainer/ft.py).
RECOVERY = {
    "strategy": F("str", "restart", "restart: a failure relaunches the job and it resumes from its newest "
                  "checkpoint (cold, or warm with warm: true); torchft: the ranks are replica groups joined "
                  "by torchft's lighthouse, a failure relaunches only the group it hit, which heals from a "
                  "survivor while the others train on (the bundled trainer on one node, checkpoint: none; "
                  "pip install 'restartlab[torchft]')", choices=["restart", "torchft"]),
    "groups": F("int", 2, "torchft: replica groups (they divide launch.ranks_per_node)", min=1),
    "min_replicas": F("int", _ft("--ft-min-replicas").default, _ft("--ft-min-replicas").help, min=1),
    "heartbeat_timeout": F("duration", "5s", _ft("--ft-heartbeat-timeout").help, positive=True),
    "join_timeout": F("duration", "60s", _ft("--ft-join-timeout").help, positive=True),
}


SCHEMA = {
    "name": F("name", "restartlab", "experiment name (job name, directory prefix)"),
    "scheduler": F("str", "local", "the batch system (restartlab.schedulers registry)", choices=schedulers.names),
    "expt_root": F("path", "expt", "experiments are created under this directory (relative: to where you "
                   "run restartlab; {account} is replaced by job.account, as a site profile's project space)"),
    "site": {
        "name": F("str", None, "the site's name, for preflight's lines (e.g. ALCF Aurora)"),
        "account_required": F("bool", False, "the site's scheduler rejects a job without a project: preflight "
                              "refuses to submit one without job.account"),
        "project_root": F("str", None, "the project's own space ({account}: job.account), where experiments "
                          "and checkpoints belong; preflight warns when expt_root lies under $HOME instead"),
        "docs": F("str", None, "the site's page on running jobs, quoted by preflight's findings"),
        "root": F("bool", None, "whether a job may change a node's network (root, or sudo for ip and tc): false "
                  "refuses the network failure kinds (partition, flap, slow_link) at validation"),
    },
    "job": {
        "nodes": F("int", 1, "number of nodes the training runs on"),
        "spare_nodes": F("int", 0, "extra nodes requested and kept idle; relaunch.on_node_loss: spares swaps "
                         "one in for each bad node (same world size)", min=0),
        "walltime": F("duration", "01:00:00", "wall-clock limit"),
        "queue": F("directive", None, "queue / partition; auto: the first of the server's queues that takes the "
                   "job's nodes and walltime (a debug queue first, for what fits one), chosen by preflight from "
                   "the server's own limits (qstat -Qf, scontrol show partition) and written into the job script"),
        "queue_avoid": ListOf(F("str"), doc="queues job.queue: auto never picks (a preemptable queue, whose jobs "
                              "may be killed; a queue by request only)"),
        "account": F("directive", None, "project / account"),
        "filesystems": F("directive", None, "PBS -l filesystems=..."),
        "place": F("directive", "scatter", "PBS -l place=..."),
        "ncpus": F("int", None, "CPUs per node (PBS select ncpus)"),
        "select": F("directive", None, "more resources of each node's chunk, appended to PBS's select (ALCF "
                    "Polaris: system=polaris)"),
        "directives": ListOf(F("directive"), doc="extra scheduler directives, verbatim after the prefix"),
    },
    "launch": {
        "ranks_per_node": F("int", 4, "training ranks per node"),
        "launcher": F("str", "hydra", "the MPI launcher (restartlab.launchers registry)", choices=launchers.names),
        "mpiexec": F("str", "mpiexec", "the launcher's command, found on the job's PATH unless it is a path; "
                     "a PBS job's login shell resets PATH (and /opt/pbs/bin/mpiexec is PBS's own MPT "
                     "wrapper): give MPICH's by its path there"),
        "launcher_args": ListOf(F("str"), doc="flags right after the launcher's command, verbatim (e.g. Hydra's "
                                "-launcher rsh -launcher-exec WRAPPER on a PBS cluster without ssh)"),
        "cpu_bind": F("str", None, "CPU binding (launcher syntax)"),
        "depth": F("int", None, "PALS --depth"),
        "env": F("strmap", {}, "environment for the training ranks"),
        "python": F("path", None, "python for the trainer and restartlab (default: the one rendering)"),
        "setup": ListOf(F("str"), doc="shell lines run before the phases (module loads, venv activation)"),
        **_from_tool_tables("launch"),
    },
    "trainer": _trainer_schema(),
    "relaunch": {
        # the supervisor's and the node check's options (their option tables: one default each)
        **_from_tool_tables("relaunch"),
        "node_check": F("bool", None, "run `restartlab node-check` on every node at job start and before "
                        "each relaunch (default: on for spares and shrink)"),
        "node_check_min_free_mb": F("int", 0, "MiB the stage dir must have free on each node", min=0),
        "chain": F("int", 0, "when the walltime or max_attempts runs out before the last step, submit up to "
                   "N continuation jobs (each starts after the previous one ends) that resume this "
                   "experiment", min=0),
    },
    "failures": FAILURES,
    "phases": ListOf({
        "name": F("name", None, "phase name (directory name)", required=True),
        "checkpoint": F("str", "sync", "none, sync or async", choices=["none", "sync", "async"]),
        "stage_dir": F("path", None, "async: node-local stage dir, private to the job's user (0700, never "
                       "through a symlink) or refused (default: a fresh private dir /tmp/restartlab-"
                       "<jobid>-<node>-<random>, or none when /tmp is on the checkpoint dir's file "
                       "system); none: the background "
                       "save writes straight to the checkpoint dir"),
        "failures": F("failures", None, "false/none: no injector; a mapping overrides the top-level failures"),
        "args": ListOf(F("str"), doc="trainer.program: arguments appended to its command in this phase "
                       "(its own checkpoint switches live here)"),
        "warm": F("bool", None, "warm standby restart in this phase (default: relaunch.warm); a cold and a "
                  "warm phase side by side compare the two in one report"),
        "recovery": RECOVERY,
    }),
    "collection": {
        "report": F("bool", True, "run `restartlab report` at the end of the job"),
        "plots": F("bool", True, "write PNG plots"),
        **_from_tool_tables("collection"),
    },
}
TOP_ONLY = {"extends"}
