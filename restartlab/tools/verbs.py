"""The processes restartlab starts of itself, by name.

They are the verbs of its CLI that a runtime process or the job script runs (supervise, inject,
node-check, kill-ranks, report, chain, teardown). They are also the modules it runs as programs: the
exit recorder, the warm pool, the smoke job's node check, the torchft accounting.

A process builds such a command only through `argv`, or `module_argv` where the Python comes later,
in a launch line. So every name is here. `tests/test_verbs.py` checks each entry against what it
names:
- the CLI's own parser takes the subcommand and every flag of its option table;
- the module exists and runs as a program;
- the job script's templates call only verbs listed here.

So a rename fails a test, not a job on a cluster.

This module holds only names and uses only the standard library. Nothing here imports what it
names: the warm pool re-executes itself through it and starts in a bare Python."""
from typing import TYPE_CHECKING, List, NamedTuple, Optional

if TYPE_CHECKING:
    from types import ModuleType

CLI = "restartlab.cli"


class Verb(NamedTuple):
    module: str                        # what `python -m` runs
    sub: Optional[str] = None          # the CLI's subcommand (None: the module is the program)
    table: Optional[str] = None        # the option table its flags come from (a name in tools/options.py)


VERBS = {
    # the CLI's verbs one of restartlab's own processes starts
    "supervise": Verb(CLI, "supervise", "SUPERVISE"),         # the job script; a torchft phase per group
    "inject": Verb(CLI, "inject", "INJECT"),                  # the relaunch loop
    "node-check": Verb(CLI, "node-check", "NODE_CHECK"),      # the node check, on each node
    "kill-ranks": Verb(CLI, "kill-ranks"),                    # the injector and teardown, on each node
    "teardown": Verb(CLI, "teardown", "TEARDOWN"),            # the job script's walltime warning
    "report": Verb(CLI, "report", "REPORT"),                  # the job script's end
    "chain": Verb(CLI, "chain", "CHAIN"),                     # the job script's continuation
    # modules run as programs
    "rankenv": Verb("restartlab.runtime.rankenv"),            # torchrun-style variables for any program
    "rankexit": Verb("restartlab.runtime.rankexit"),          # a cold rank's exit recorder
    "warm-pool": Verb("restartlab.runtime.warm"),             # a warm standby pool, on each node
    "smoke": Verb("restartlab.runtime.smoke"),                # the smoke job's checks and node probe
    "net-fault": Verb("restartlab.runtime.netfault"),         # a network fault kind, on the struck node
    "job-run": Verb("restartlab.runtime.jobrun"),             # the job script: what the scheduler says of this run
    "ft-accounting": Verb("restartlab.analysis.ft_accounting"),# a torchft phase's verdict (no import)
    # the bundled programs a launch line runs (restartlab.trainer is trainer/, installed under this name)
    "trainer": Verb("restartlab.trainer"),                        # the bundled DCP trainer
    "ft-trainer": Verb("restartlab.trainer.ft"),                  # the bundled torchft trainer
    "ft-hook": Verb("restartlab.trainer.ft_hook"),                # a torchft program of yours, hooked
    "trainer-smoke": Verb("restartlab.trainer.smoke"),            # the smoke job's rank
    "ckpt-diff": Verb("restartlab.trainer.ckpt_diff"),            # restartlab diff: two checkpoints' tensors
}


def module_argv(verb: str) -> List[str]:
    """["-m", module(, subcommand)]: what follows the Python."""
    v = VERBS[verb]
    return ["-m", v.module] + ([v.sub] if v.sub else [])


def argv(python: str, verb: str, *args: str) -> List[str]:
    """The command that runs `verb` with `args` under `python`."""
    return [python, *module_argv(verb), *args]


def options_module() -> "ModuleType":
    """tools/options.py, where the tables named above are (imported when asked: this module stays light)."""
    from . import options
    return options
