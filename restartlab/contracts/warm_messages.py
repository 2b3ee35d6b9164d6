"""The messages between a warm rank's stub and its node's standby pool (runtime/warm/wire.py sends
and receives them on the pool's socket): the stub's `Request`, the pool's `Started` or `Refused`,
then `Ended`. One writer each (`to_dict`), one reader each (`request_of`, `reply_of`, `end_of`):
None where the JSON is not that message.

NamedTuples, not dataclasses: the stub imports this before every warm rank, and dataclasses
imports inspect (tens of milliseconds) and copy. Standard library only."""
from typing import Any, Dict, List, NamedTuple, Optional, Union


class Request(NamedTuple):
    """The stub's request: run this rank's program in a fork of the pool."""
    argv: List[str]             # the rank's command line, as the launcher gave it to the stub
    env: Dict[str, str]         # the stub's environment (the launcher's rank variables in it)
    cwd: str
    rankenv: bool = False       # add the ranks' torch.distributed variables (runtime/rankenv)
    stub_pid: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()


class Started(NamedTuple):
    """The pool forked the rank: its pid (the stub forwards its signals to it)."""
    pid: int

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()


class Refused(NamedTuple):
    """The pool cannot run the request; the stub starts its rank cold."""
    error: str

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()


class Ended(NamedTuple):
    """The rank ended: by a signal (its number), else with an exit status."""
    signal: int = 0
    exit: int = 0

    @property
    def status(self) -> int:
        """As os.waitpid gives it."""
        return (self.signal & 0x7f) if self.signal else (self.exit & 0xff) << 8

    def to_dict(self) -> Dict[str, Any]:
        return {"signal": self.signal} if self.signal else {"exit": self.exit}


Message = Union[Request, Started, Refused, Ended]


def _int(v: object) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def request_of(d: object) -> Optional[Request]:
    """A request: its argv (words), environment and working directory; None without them."""
    if not isinstance(d, dict):
        return None
    argv, env, cwd = d.get("argv"), d.get("env"), d.get("cwd")
    if not (isinstance(argv, list) and all(isinstance(x, str) for x in argv) and isinstance(env, dict)
            and isinstance(cwd, str)):
        return None
    return Request(list(argv), {str(k): str(v) for k, v in env.items()}, cwd, d.get("rankenv") is True,
                   _int(d.get("stub_pid")))


def reply_of(d: object) -> Union[Started, Refused, None]:
    """The pool's answer to a request; None: neither answer."""
    if not isinstance(d, dict):
        return None
    pid, error = _int(d.get("pid")), d.get("error")
    return Started(pid) if pid is not None else Refused(error) if isinstance(error, str) else None


def end_of(d: object) -> Ended:
    """How the rank ended. A message of another shape reads as exit 1."""
    sig = _int(d.get("signal")) if isinstance(d, dict) else None
    code = _int(d.get("exit")) if isinstance(d, dict) else None
    return Ended(signal=sig) if sig else Ended(exit=1 if code is None else code)
