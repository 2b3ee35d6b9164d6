"""What runs inside the batch job, on its nodes.

It imports the plug-ins and the contracts. It never imports the scenario, the job's rendering or
the analysis (setup.cfg's import contracts).

It holds:
- the relaunch loop of a phase (supervise)
- the failure injector and its fan-out to the nodes
- the node-local rank killer
- teardown
- node health checks
- the warm standby pools and their stubs
- the progress tap
- the torchrun-style rank environment
- the attempt record the supervisor writes"""
