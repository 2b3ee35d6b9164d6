"""restartlab: what does a failure cost a distributed training job, and does the job survive it?

The package is laid out by where its code runs (docs/design.md), each layer importing only the
ones below it (setup.cfg's import contracts, checked by `make test-fast`):

    cli, reference, fuzz    the verbs (fuzz: an experiment run here, then judged)
    job | analysis          the login node: scenario -> job script, experiment directory, chains
                            | afterwards: collect, survival, report, plots, simulate
    scenario                load, schema, validate
    runtime                 inside the job: supervise, inject, fanout, killer, warm, tap, ...
    programs | schedulers | launchers | failures    the plug-ins, each a registry
    contracts               what every side shares: layout, ckptdir, live, exits, envvars, ...

Orchestration only: it never imports torch. The bundled trainer is `restartlab.trainer` (trainer/
in the checkout), which imports only the contracts and the plug-ins.
"""
__version__ = "0.1.0"
