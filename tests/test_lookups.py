"""#64's done-when on reads by key, held.

- Outside contracts/, each file reads by a literal key no more than tests/lookups.WHERE says.
  Each file there reads what is not a record of ours, or is the launch spec's own reader.
- In all, there are fewer than 100 such reads.
- json.load(s) is only in the readers JSON_READERS names."""
from tests import lookups


def test_reads_by_key_stay_where_they_are_said_and_under_100():
    got, _, loads = lookups.counts()
    over = {p: (k, lookups.WHERE.get(p, (0, ""))[0]) for p, k in got.items() if k > lookups.WHERE.get(p, (0, ""))[0]}
    assert not over, f"reads by a literal key beyond tests/lookups.WHERE (file: (now, allowed)): {over}"
    assert sum(got.values()) < 100
    assert {p for p, k in loads.items() if k} <= set(lookups.JSON_READERS), loads


def test_the_count_finds_a_read_and_leaves_out_stores_lists_and_quoted_types():
    src = ('d["a"]\nd.get("b", 1)\nd["c"] = 1\ndel d["e"]\nx = ["f"]\nT = Optional["G"]\nd[k]\nd.get(k)\n'
           'def f() -> List["H"]: ...\n')
    assert lookups.lookups_in(src) == 2
