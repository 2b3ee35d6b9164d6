"""The contracts every side shares, and nothing else: the experiment directory's layout, the
checkpoint directory's markers, reading a live experiment, option tables (the mechanism and the
trainer's table), exit codes, environment variable names, placeholders, units, the plug-in
registry, private paths, where the templates are. Read on the login node, inside the job, in the
ranks (the trainer imports these) and afterwards. Imports only the standard library, each other
and small libraries; never another restartlab package (setup.cfg's import contracts)."""
