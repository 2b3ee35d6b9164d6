"""The job, on the login node.

- render: a scenario rendered into a job script.
- experiment: the experiment directory's first files.
- run: the whole experiment on this machine.
- reuse: a baseline taken from an earlier experiment.
- chain: a chain's continuation job.

This package imports the scenario, the runtime (for its option tables and the local run's
cleanup), the plug-ins and the contracts. It never imports the analysis (setup.cfg's import
contracts)."""
