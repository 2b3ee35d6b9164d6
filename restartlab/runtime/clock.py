"""Time, as the relaunch loop and the injector see it: the tests give them a fake one (their
schedules, watchdogs, gates and fuzz windows run in fake seconds, in no real time)."""
import time


class Clock:
    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
