"""Time, as the relaunch loop and the injector see it.

The tests give them a fake clock. Their schedules, watchdogs, gates and fuzz windows then run in
fake seconds, in no real time."""
import time


class Clock:
    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
