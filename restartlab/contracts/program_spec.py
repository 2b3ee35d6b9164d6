"""The adapter spec: what restartlab must know of a training program it did not write (the scenario's
`trainer.program` keys below, restartlab/programs/base.py says what each means). It crosses a process
as JSON on a command line: the job script gives it to the supervisor and the injector (`--program`).
One writer (`to_json`, the job script's render) and one reader (`from_json`, the tools)."""
import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional

from .jsonvalue import integer, text
from .scenario_record import Program

@dataclass(frozen=True)
class Spec:
    adapter: str = "generic"
    progress: Optional[str] = None
    progress_file: Optional[str] = None
    progress_fields: Optional[Dict[str, str]] = None  # what a progress record's keys stand for
    checkpoints: Optional[str] = None
    complete: Optional[str] = None
    selects: Optional[str] = None
    resumed: Optional[str] = None
    saved: Optional[str] = None
    saving: Optional[str] = None
    counts: Optional[str] = None
    save_every: Optional[int] = None
    loss_line: Optional[str] = None
    env: Optional[Dict[str, str]] = None  # what the ranks get besides the job's environment

    @classmethod
    def from_mapping(cls, d: Mapping[str, object]) -> "Spec":
        """The spec's keys of a mapping.

        The mapping is the JSON read back. A scenario's trainer.program comes through from_program
        instead. A value of the wrong type reads as unset. Other keys are not the spec's."""
        return cls(adapter=text(d.get("adapter")) or "generic",
                   progress_fields=_strmap(d.get("progress_fields")), save_every=integer(d.get("save_every")),
                   env=_strmap(d.get("env")),
                   **{k: text(d.get(k)) for k in KEYS if k not in ("progress_fields", "save_every")})

    @classmethod
    def from_program(cls, p: Program) -> "Spec":
        """The spec of a scenario's trainer.program (its other keys, as command, are not the spec's)."""
        return cls.from_mapping(asdict(p))

    @classmethod
    def from_json(cls, s: str) -> "Spec":
        """The spec as the job script wrote it. ValueError: not JSON, or not a JSON object."""
        d = json.loads(s)
        if not isinstance(d, dict):
            raise ValueError(f"not a JSON object: {s[:80]!r}")
        return cls.from_mapping(d)

    def to_json(self) -> str:
        """adapter, then every key (null where unset), then env where it has any."""
        d: Dict[str, object] = {"adapter": self.adapter, **{k: getattr(self, k) for k in KEYS}}
        if self.env:
            d["env"] = self.env
        return json.dumps(d, separators=(",", ":"))

    def with_defaults(self, defaults: Mapping[str, Optional[str]]) -> "Spec":
        """The keys left unset, filled from `defaults` (an adapter's)."""
        filled: Dict[str, Any] = {f.name: defaults[f.name] for f in fields(self)
                  if getattr(self, f.name) is None and defaults.get(f.name) is not None}
        return replace(self, **filled) if filled else self


# the spec's keys besides `adapter` and `env`, in the order the job script writes them
KEYS = tuple(f.name for f in fields(Spec) if f.name not in ("adapter", "env"))


def _strmap(v: object) -> Optional[Dict[str, str]]:
    if not isinstance(v, dict):
        return None
    return {k: x for k, x in v.items() if isinstance(k, str) and isinstance(x, str)}
