"""Afterwards (or while a job runs): an experiment's metrics streamed into attempts and failure
events (collect), whether every restart resumed as it should (survival), the report, its plots
and W&B copy, a program's own restart metrics beside restartlab's, and the goodput model
(simulate). Imports the scenario, the runtime's attempt record, the plug-ins and the contracts;
never the job's rendering (setup.cfg's import contracts)."""
