"""The launch spec: how each attempt's ranks start.

It is data that the job script hands `restartlab supervise`: its --launch JSON, and the program's own
argv after `--`. Every route of the supervisor changes it by a field, never by editing words:

    a shrunk relaunch          replace(spec, nodes=n)
    a torchft replica group    spec.for_group(g, tag)          (its tag, its {group} filled in)
    the attempt's directory    spec.filled({attempt_dir: ...})
    cold, through the exit recorder     spec.cold_argv(attempt_dir)
    warm, through the pool's stub       spec.stub_argv(pool_dir, attempt_dir)

The launcher's words come from its plug-in (launchers.py) at each launch. So nothing downstream
looks for a marker in a list of words.

`program` is the program's own argv, its executable first. For the bundled trainer, that is the job's
Python running restartlab.trainer. For a program of yours, it is its `command` and the phase's args.
With `rankenv`, a program of yours starts through restartlab.runtime.rankenv, which gives it
torchrun-style variables. `python` is the interpreter that runs restartlab's own rank-side wrappers
(the exit recorder, the warm stub, rankenv)."""
import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, cast

from .. import launchers
from ..contracts import placeholders
from ..contracts.envvars import TAG_VAR
from . import verbs

SPEC_KEYS = ("python", "launcher", "nodes", "ranks_per_node", "env", "forward", "cpu_bind", "depth", "hostfile",
             "mpiexec", "launcher_args", "rankenv")


class SpecError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    python: str
    program: Tuple[str, ...] = ()
    launcher: str = "hydra"
    nodes: int = 1
    ranks_per_node: int = 1
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)   # reaches the ranks only
    forward: Tuple[str, ...] = ()        # variables passed on by name from the launcher's environment
    cpu_bind: Optional[str] = None
    depth: Optional[int] = None
    hostfile: Optional[str] = None
    mpiexec: str = "mpiexec"             # an MPI launcher's command (launch.mpiexec)
    launcher_args: Tuple[str, ...] = ()  # its extra flags (launch.launcher_args)
    rankenv: bool = False

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    # -- the words
    def launcher_argv(self) -> List[str]:
        """The launcher's own words for this spec's nodes and ranks (SpecError: it cannot launch them)."""
        try:
            argv = launchers.get(self.launcher).argv(
                nodes=self.nodes, ppn=self.ranks_per_node, rank_env=dict(self.env), cpu_bind=self.cpu_bind,
                depth=self.depth, hostfile=self.hostfile, forward=tuple(self.forward))
        except (KeyError, ValueError) as e:
            raise SpecError(str(e).strip("'\""))
        if argv and argv[0] == "mpiexec":
            argv = [self.mpiexec, *self.launcher_args, *argv[1:]]
        return argv

    def command(self) -> List[str]:
        """What each rank runs: the program, through rankenv when it wants torchrun's variables."""
        wrap = verbs.argv(self.python, "rankenv", "--") if self.rankenv else []
        return wrap + list(self.program)

    def argv(self) -> List[str]:
        """The launch as it is, with no recorder or stub (the smoke job's; what render shows)."""
        return self.launcher_argv() + self.command()

    def cold_argv(self, attempt_dir: str) -> List[str]:
        """Each rank's program started through the exit recorder (runtime/rankexit.py) into `attempt_dir`."""
        return self.launcher_argv() + verbs.argv(self.python, "rankexit", "--dir", attempt_dir, "--") + self.command()

    def stub_argv(self, pool_dir: str, attempt_dir: Optional[str] = None) -> List[str]:
        """Each rank started through the warm pool's stub.

        The stub records the rank's end into `attempt_dir`, as the exit recorder does for a cold
        rank. It asks the pool for rankenv's variables."""
        where = ["--attempt-dir", attempt_dir] if attempt_dir else []
        return self.launcher_argv() + verbs.argv(self.python, "warm-pool", "stub", "--dir", pool_dir, *where,
                                                 *(["--rankenv"] if self.rankenv else []), "--") + list(self.program)

    # -- the routes
    def filled(self, values: Dict[str, Optional[str]]) -> "LaunchSpec":
        """The program's placeholders ({attempt_dir}, {group}, ...) filled in."""
        return dataclasses.replace(self, program=tuple(placeholders.fill(w, values) for w in self.program))

    def for_group(self, group: int, tag: str) -> "LaunchSpec":
        """A torchft replica group's launch: its ranks carry its own tag, its number fills {group}."""
        return dataclasses.replace(self, env={**self.env, TAG_VAR: tag}).filled({placeholders.GROUP: str(group)})

    def with_nodes(self, nodes: int) -> "LaunchSpec":
        return dataclasses.replace(self, nodes=nodes)

    # -- across the job script
    def to_json(self) -> str:
        """Everything but the program (which follows `--` as words)."""
        d = {k: getattr(self, k) for k in SPEC_KEYS}
        d.update(env=dict(self.env), forward=list(self.forward), launcher_args=list(self.launcher_args))
        default = {f.name: f.default for f in dataclasses.fields(self)}
        keep = ("python", "launcher", "nodes", "ranks_per_node")  # said even when they are the defaults
        return json.dumps({k: v for k, v in d.items() if k in keep or v not in (None, [], {}, False, default[k])},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, program: Sequence[str]) -> "LaunchSpec":
        """The spec from --launch's JSON and the program's words; SpecError names what is wrong."""
        try:
            d = json.loads(text)
        except ValueError as e:
            raise SpecError(f"not JSON: {e}")
        if not isinstance(d, dict):
            raise SpecError("not a JSON object")
        unknown = sorted(set(d) - set(SPEC_KEYS))
        if unknown:
            raise SpecError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(SPEC_KEYS)})")
        if not isinstance(d.get("python"), str) or not d["python"]:
            raise SpecError("'python' (the ranks' interpreter) is required")
        types = {"launcher": str, "nodes": int, "ranks_per_node": int, "env": dict, "forward": list,
                 "cpu_bind": str, "depth": int, "hostfile": str, "mpiexec": str, "launcher_args": list,
                 "rankenv": bool}
        for k, t in types.items():
            if k in d and not isinstance(d[k], t) or (t is int and isinstance(d.get(k), bool)):
                raise SpecError(f"'{k}' must be a JSON {t.__name__}, not {json.dumps(d[k])}")
        for k in ("nodes", "ranks_per_node"):
            if k in d and d[k] < 1:
                raise SpecError(f"'{k}' must be at least 1, not {d[k]}")
        words = [("env", v) for v in (d.get("env") or {}).values()] + \
            [(k, v) for k in ("forward", "launcher_args") for v in d.get(k) or []]
        bad = next(((k, v) for k, v in words if not isinstance(v, str)), None)
        if bad:
            raise SpecError(f"'{bad[0]}' holds {json.dumps(bad[1])}: every value must be a JSON string")
        if d.get("launcher", "hydra") not in launchers.names():
            raise SpecError(f"'launcher': {d['launcher']!r} is not one of {', '.join(launchers.names())}")
        spec = cls(program=tuple(program),  # d's types checked above
                   **cast(Dict[str, Any], {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}))
        spec.launcher_argv()  # SpecError: the launcher cannot carry it
        return spec
