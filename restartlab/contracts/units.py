"""Durations as users write them ('90s', '5m', '1.5h', 'HH:MM:SS') and as schedulers print them."""
import math
import re


def parse_duration(v: object, where: str = "") -> float:
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


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def parse_bytes(v: object) -> int:
    """'23.8GB', '1.5 TiB', '300M' or a number of bytes (>= 0) -> bytes."""
    if isinstance(v, bool):
        raise ValueError(f"expected a size like 24GB or 300MiB, got {v!r}")
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"a size must be a finite number >= 0, got {v}")
        return int(v)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", str(v).strip())
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size like 24GB, 300MiB or a number of bytes, got {v!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def human_bytes(n: float) -> str:
    """1234567890 -> '1.2 GB' (decimal units, as df -H and the sites' quota pages)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            break
        n /= 1000
    return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
