"""Exit codes more than one side reads: the bundled trainer's (the relaunch loop and the collector
act on them) and the relaunch loop's for a phase (the job script, a chain and the report act on
them). Each tool's own usage codes (the killer's, say) stay with the tool."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# the bundled trainer
EXIT_NO_CHECKPOINT = 3  # complete checkpoints exist and none loads (without --allow-fresh-start)
EXIT_SAVE_FAILED = 4    # a save failed and --on-save-error abort
EXIT_PREEMPTED = 5      # the preempt signal: an emergency checkpoint saved, training not finished

# the relaunch loop (restartlab supervise), for one phase
EXIT_WALLTIME = EXIT_PREEMPTED  # stopped by the walltime margin: state saved, training not finished
EXIT_BUDGET = 6                 # max_attempts used up before the last step (a failure a chain may resume)
EXIT_INTERRUPTED = 130

# which tool returns which (the reference page of exit statuses is made from these)
BY_TOOL = {
    "trainer (python -m restartlab.trainer)": ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_NO_CHECKPOINT", "EXIT_SAVE_FAILED",
                                               "EXIT_PREEMPTED"),
    "supervise": ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_WALLTIME", "EXIT_BUDGET", "EXIT_INTERRUPTED"),
}
