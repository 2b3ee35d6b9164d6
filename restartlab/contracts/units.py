"""Durations as users write them ('90s', '5m', '1.5h', 'HH:MM:SS') and as schedulers print them."""
import math
import re


def parse_duration(v, where="") -> float:
    """'90s', '5m', '1.5h', '01:30:00', or a number of seconds (finite, >= 0)."""
    if isinstance(v, bool):
        raise ValueError(f"{where}expected a duration like 90s, 5m, 1h, got {v!r}")
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}duration must be a finite number >= 0, got {v}")
        return float(v)
    s = str(v).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", s)
    if m:
        return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    m = re.fullmatch(r"(\d+):([0-5]\d):([0-5]\d)", s)
    if m:
        return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
    raise ValueError(f"{where}expected a duration like 90s, 5m, 1h or HH:MM:SS, got {v!r}")


def hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
