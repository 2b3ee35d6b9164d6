"""Analysis afterwards, or while a job runs.

- collect: an experiment's metrics, streamed into attempts and failure events.
- survival: whether every restart resumed as it should.
- The report, its plots and its W&B copy.
- A program's own restart metrics beside restartlab's.
- simulate: the goodput model.

It imports the scenario, the runtime's attempt record, the plug-ins and the contracts. It never imports
the job's rendering (setup.cfg's import contracts)."""
