"""The one rule every record reader takes a JSON value by (contracts/jsonvalue.py)."""
import json

from restartlab.contracts import attempts, injections, launch_snapshot
from restartlab.contracts.jsonvalue import integer, items, number, text


def test_the_rules():
    assert [number(v) for v in (3, 2.5, True, "3", None)] == [3.0, 2.5, None, None, None]
    assert isinstance(number(3), float)
    assert [integer(v) for v in (3, 3.0, 3.5, False, "3", None)] == [3, 3, None, None, None, None]
    assert isinstance(integer(3.0), int)
    assert [text(v) for v in ("a", 1, None)] == ["a", None, None]
    assert [items(v) for v in ([1, 2], (1, 2), "ab", None)] == [(1, 2), (), (), ()]


def test_the_readers_agree_on_a_count_written_as_a_float():
    """Before one rule, the attempt record refused 3.0 for a count where the launch snapshot took it."""
    assert attempts.AttemptRecord.from_json({"attempt": 3.0, "exit_code": 1.0, "launch_ts": 5}).attempt == 3
    assert injections.Injection.from_json(json.loads('{"time": 7, "killed": 2.0, "target_step": 40.0}')).killed == 2
    assert injections.Injection.from_json({"time": 7}).time == 7.0
    assert launch_snapshot.from_dict({"newest_complete": 40.0}).newest_complete == 40
    assert attempts.AttemptRecord.from_json({"attempt": True, "exit_code": "1"}).exit_code is None
