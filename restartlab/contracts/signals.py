"""Signal names as restartlab's tools and scenarios write them ('KILL', 'SIGTERM', '9').

The injector, the killer, the scenario's validation and the tools' option tables share this one
parser."""
import signal as _signal

# The signals a warm rank's stub (runtime/warm/stub.py) passes on to the rank the standby pool forked.
# They are the catchable ones a launcher or a scheduler sends to end or warn a rank.
FORWARDED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGQUIT)


def parse_signal(name: object) -> int:
    """'KILL', 'SIGTERM', '9' -> the signal's number; ValueError for anything else."""
    s = str(name).strip().upper()
    try:
        return int(_signal.Signals(int(s))) if s.isdigit() else int(_signal.Signals["SIG" + s.removeprefix("SIG")])
    except (KeyError, ValueError):
        raise ValueError(f"{name!r} is not a signal name (KILL, TERM, INT, STOP, USR1, ...) or number") from None
