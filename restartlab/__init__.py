"""restartlab: what does a failure cost a distributed training job, and does the job survive it?

The package is laid out by where its code runs (docs/design.md). Each layer imports only the
ones below it. setup.cfg's import contracts say so, and `make test-fast` checks them. The layers,
top to bottom:

- cli, reference, fuzz: the verbs. fuzz runs an experiment here, then judges it.
- job | analysis: job runs on the login node (scenario -> job script, experiment directory,
  chains). analysis runs afterwards (collect, survival, report, plots, simulate).
- scenario: load, schema, validate.
- runtime: inside the job (supervise, inject, fanout, killer, warm, tap, ...).
- programs | schedulers | launchers | failures: the plug-ins, each a registry.
- contracts: what every side shares (layout, ckptdir, live, exits, envvars, ...).

The package only orchestrates: it never imports torch. The bundled trainer is `restartlab.trainer`
(trainer/ in the checkout). It imports only the contracts and the plug-ins.
"""
__version__ = "0.1.0"
