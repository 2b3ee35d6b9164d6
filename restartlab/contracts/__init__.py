"""The contracts every side shares, and nothing else.

They cover:
- the experiment directory's layout;
- the checkpoint directory's markers;
- reading a live experiment;
- option tables (the mechanism and the trainer's table);
- exit codes, environment variable names, placeholders and units;
- the plug-in registry, private paths, and where the templates are.

They are read on the login node, inside the job, in the ranks (the trainer imports these) and
afterwards. They import only the standard library, each other and small libraries. They never import
another restartlab package (setup.cfg's import contracts)."""
