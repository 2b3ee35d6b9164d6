"""One line of an attempt's metrics (layout.Attempt.metrics(rank)): {"timestamp": seconds, "rank": r,
"metrics": {KEY: value}}, its keys metric_keys'. The bundled trainer, the torchft trainer and the tap
write it; the collector reads it, a million rows for a big experiment.

`read_line` gives (metrics, timestamp). It decodes a line with msgspec into a typed row where msgspec
takes it: 2.5 times the standard library's speed here (1M trainer rows: 1.6-1.8 s against 4.0-5.1 s,
/work of session 18; bench/collect_stream.py measures the whole report). Where msgspec refuses a
line, the standard library reads it as before: NaN and Infinity (Python's json writes them, msgspec
does not read them), a number beyond a float, and every malformed line, whose error it names. So a
line reads the same either way; without msgspec installed, every line takes the standard library."""
import json
import re
from typing import Any, Dict, Tuple, Type

from .jsonvalue import number

try:
    import msgspec
except ImportError:  # a site's environment without it: the standard library alone
    msgspec = None  # type: ignore[assignment]


if msgspec is not None:
    class Row(msgspec.Struct):
        timestamp: float
        metrics: Dict[str, Any]

    _FAST = msgspec.json.Decoder(Row).decode
    _REFUSED: Tuple[Type[BaseException], ...] = (msgspec.DecodeError,)
else:
    _FAST = None
    _REFUSED = ()

_DECODE = json.JSONDecoder().raw_decode
_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json.loads skips it


def read_line(line: str) -> Tuple[Dict[str, Any], float]:
    """(metrics, timestamp) of one line; ValueError, KeyError or TypeError naming what is wrong."""
    if _FAST is not None:
        try:
            row = _FAST(line)
            return row.metrics, row.timestamp
        except _REFUSED:
            pass  # the standard library reads it, or says why not
    return _read_slow(line)


def _read_slow(line: str) -> Tuple[Dict[str, Any], float]:
    # json.loads without its wrapper: a row is a JSON object alone on its line
    row, end = _DECODE(line, 0 if line[:1] == "{" else _WS.match(line).end())  # type: ignore[union-attr]
    if not (end == len(line) - 1 and line[end] == "\n") and _WS.match(line, end).end() != len(line):  # type: ignore[union-attr]
        raise json.JSONDecodeError("Extra data", line, end)
    m = row["metrics"]
    ts = row["timestamp"]
    if ts.__class__ is not float:
        ts = number(ts)
    if m.__class__ is not dict or ts is None:
        raise TypeError("metrics is not a mapping" if ts is not None else "timestamp is not a number")
    return m, ts
