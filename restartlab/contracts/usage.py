"""One example command line per verb, shown at the end of its --help (tests/test_cli_help.py
checks that every verb has one and that it parses)."""

EXAMPLES = {
    "validate": "restartlab validate scenarios/*.yaml",
    "render": "restartlab render scenarios/aurora/agpt2b.yaml --set job.account=MYPROJ -o agpt2b.pbs.sh",
    "preflight": "restartlab preflight scenarios/aurora/agpt2b.yaml --set job.account=MYPROJ --set job.queue=auto",
    "submit": "restartlab submit scenarios/aurora/agpt2b.yaml --set job.account=MYPROJ --after expt/agpt2b-smoke-20261201-120000",
    "status": "restartlab status expt/agpt2b-20261201-120000 --json",
    "cancel": "restartlab cancel 8123456.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov",
    "run": "restartlab run scenarios/local.yaml --set trainer.train_iters=60",
    "fuzz": "restartlab fuzz scenarios/examples/plain.yaml --kills 4 --seed 3",
    "inject": "restartlab inject --every 90s --tag rl-agpt2b-1a2b3c4d5e --fanout pbs",
    "kill-ranks": "restartlab kill-ranks --tag rl-agpt2b-1a2b3c4d5e --signal TERM --dry-run",
    "node-check": "restartlab node-check --fanout pbs --policy spares --need 2",
    "teardown": "restartlab teardown --tag rl-agpt2b-1a2b3c4d5e --fanout pbs",
    "supervise": "restartlab supervise --phase sync --phase-dir expt/x/sync --tag T "
                 "--launch '{\"python\": \"python\", \"ranks_per_node\": 2}' -- python train.py",
    "chain": "restartlab chain expt/agpt2b-20261201-120000 --scheduler pbs --max 3 --job 8123456",
    "report": "restartlab report expt/local-20261201-120000 --mtbf 6h",
    "diff": "restartlab diff expt/x/sync/ckpts/step-40 expt/x/baseline-ckpts/step-40",
    "simulate": "restartlab simulate --from expt/local-20261201-120000 --node-mtbf 720h --nodes 512,2048",
}


def epilog(verb: str) -> str:
    return f"example: {EXAMPLES[verb]}"
