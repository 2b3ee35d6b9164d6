"""How a tolerant reader takes one value of a JSON record. A value of the wrong type reads as
absent (None), so a hand-edited or torn record is reported by its reader, not raised as a traceback.
Every record reader in contracts/ takes its fields through these. Before them, there were three
helpers that disagreed. One kept an int a float, one refused 3.0 for a count, and one took it.

The rules:
- A bool is never a number (JSON's true is not 1).
- A number is read as a float.
- A count is an int, or a float with no fraction (3.0 from a writer that is not ours).
- A list is read as a tuple. Anything else reads as the empty tuple."""
import json
from typing import Any, Optional, Tuple


def load_file(path: str) -> object:
    """The JSON value a whole file holds.

    None where the file cannot be read or is not JSON. Its record's reader then says there is none."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def number(v: object) -> Optional[float]:
    """A JSON number as a float.

    None for anything else, and for an integer beyond a float. JSON has no bound on its digits, and
    float() would raise."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def integer(v: object) -> Optional[int]:
    """A JSON count as an int: an int, or a float with no fraction; None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def text(v: object) -> Optional[str]:
    """A JSON string; None for anything else."""
    return v if isinstance(v, str) else None


def items(v: object) -> Tuple[Any, ...]:
    """A JSON list as a tuple; the empty tuple for anything else."""
    return tuple(v) if isinstance(v, list) else ()
