"""The command-line protocol of restartlab's own tools (supervise, node-check, teardown, inject,
report, chain): their option tables (`options`).

A job script is written from them on a login node, and the tools parse them inside the job. So they
sit below both `scenario` and `runtime`. They sit above the plug-in registries whose names they
offer as choices (launchers, schedulers, failure kinds)."""
