"""restartlab: what does a failure cost a distributed training job, and does the job survive it?

This package is orchestration only (scenarios, rendering, schedulers, injector, killer,
collector, report) and never imports torch; the bundled trainer is `restartlab.trainer`.
"""
__version__ = "0.1.0"
