"""The job, on the login node: a scenario rendered into a job script (render), the experiment
directory's first files (experiment), the whole experiment on this machine (run), a baseline
taken from an earlier experiment (reuse), a chain's continuation job (chain). Imports the
scenario, the runtime (for its option tables and the local run's cleanup), the plug-ins and the
contracts; never the analysis (setup.cfg's import contracts)."""
