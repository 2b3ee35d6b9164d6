"""A metrics row (contracts/metrics_row) decodes to the same answer either way, line for line.

msgspec's typed decode reads a line where it takes it. The standard library's reads it where it does
not. The collector's behaviour does not depend on which decoder read a line, nor on msgspec being
installed."""
import math
import subprocess
import sys

import pytest

from restartlab.contracts import metrics_row

LINES = [
    '{"timestamp": 1.5, "rank": 0, "metrics": {"train/iter": 3, "train/loss": 2.5}}\n',
    '{"timestamp": 5, "metrics": {}}\n',                       # an int timestamp: a float
    '  {"timestamp": 1.5, "metrics": {"a": [1, {"b": null}]}}  \n',
    '{"metrics": {"a": 1, "a": 2}, "x": true, "timestamp": 2.0}\n',  # the last of a duplicate key
    '{"timestamp": 1.5, "metrics": {"train/loss": NaN}}\n',     # Python's json writes NaN
    '{"timestamp": 1.5, "metrics": {"train/loss": -Infinity}}\n',
    '{"timestamp": 1e400, "metrics": {}}\n',                    # beyond a float: inf, as json reads it
    '{"timestamp": 1' + '0' * 400 + ', "metrics": {}}\n',      # an integer beyond a float: not a number
    '{"timestamp": true, "metrics": {}}\n',
    '{"timestamp": "5", "metrics": {}}\n',
    '{"timestamp": 1.0, "metrics": [1]}\n',
    '{"timestamp": 1.0}\n',
    '{"metrics": {}}\n',
    '{"timestamp": 1.0, "metrics": {}} {}\n',                   # extra data
    '[1, 2]\n',
    '{"timestamp": 1.0, "metrics": {"train/iter": 4',           # torn
    '\n',
    '\x00garbage\n',
]


def _answer(fn, line):
    try:
        m, ts = fn(line)
        return ("row", m if not any(isinstance(v, float) and math.isnan(v) for v in m.values()) else repr(m), ts)
    except (ValueError, KeyError, TypeError) as e:
        return (type(e).__name__, str(e))


@pytest.mark.parametrize("line", LINES)
def test_a_line_reads_the_same_whichever_decoder_reads_it(line):
    assert metrics_row._FAST is not None  # msgspec is installed here (setup.cfg): the fast path is tried
    assert _answer(metrics_row.read_line, line) == _answer(metrics_row._read_slow, line)


def test_an_integer_beyond_a_float_is_a_malformed_line_not_a_crash():
    """float() of a 400-digit integer raises OverflowError, which the collector did not catch."""
    with pytest.raises(TypeError, match="timestamp is not a number"):
        metrics_row.read_line('{"timestamp": 1' + '0' * 400 + ', "metrics": {}}\n')


def test_the_fast_path_takes_the_common_line_and_leaves_nan_to_the_standard_library(monkeypatch):
    slow = []
    monkeypatch.setattr(metrics_row, "_read_slow", lambda line: slow.append(line) or ({}, 0.0))
    metrics_row.read_line(LINES[0])
    assert slow == []
    metrics_row.read_line(LINES[4])
    assert slow == [LINES[4]]


def test_without_msgspec_every_line_takes_the_standard_library():
    code = ("import sys; sys.modules['msgspec'] = None\n"
            "from restartlab.contracts import metrics_row as r\n"
            "assert r._FAST is None\n"
            "print(r.read_line('{\"timestamp\": 2, \"metrics\": {\"a\": 1}}'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "({'a': 1}, 2.0)", out.stderr
