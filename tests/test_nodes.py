"""restartlab node-check.

- What a node's check finds.
- Which hosts each recovery policy picks.
- The job-wide check through the local fan-out, with the node-check records and the bad-node file.
  One site check fails on one node, and one never answers.

The real node failure (a Slurm node set DOWN mid-run) is in tests/test_slurm.py."""
import json
import os
import subprocess
import sys


from restartlab.runtime import nodes


def rl(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_choose_per_policy():
    hosts = ["n1", "n2", "n3", "n4"]
    assert nodes.choose(hosts, ["n2"], "same", 4, 1) == (hosts, None)            # never excludes
    assert nodes.choose(hosts, ["n2"], "spares", 3, 1) == (["n1", "n3", "n4"], None)
    assert nodes.choose(hosts, ["n2", "n3"], "spares", 3, 1)[1] == "2 healthy node(s) left, 3 needed (no spare left)"
    # shrink: the largest count that divides the original, so the global batch splits evenly
    assert nodes.choose(hosts, ["n2"], "shrink", 4, 1) == (["n1", "n3"], None)
    assert nodes.choose(hosts, [], "shrink", 4, 1) == (hosts, None)
    assert nodes.choose(hosts, ["n1", "n2", "n3"], "shrink", 4, 2)[1] == \
        "1 healthy node(s) left, relaunch.min_nodes is 2"


def test_local_check_finds_each_problem(tmp_path):
    ok = nodes.check_here(str(tmp_path / "stage"), 1, "cpu", 0, "true", 5)
    assert ok.ok and ok.reason == "" and not os.path.exists(tmp_path / "stage")  # nothing left behind
    full = nodes.check_here(str(tmp_path), 2 ** 62, "cpu", 0, None, 5)
    assert not full.ok and "free, a shard needs" in full.reason
    (tmp_path / "file").write_text("")
    unwritable = nodes.check_here(str(tmp_path / "file" / "stage"), 0, "cpu", 0, None, 5)
    assert not unwritable.ok and "not writable" in unwritable.reason
    site = nodes.check_here(None, 0, "cpu", 0, "echo broken >&2; exit 4", 5)
    assert not site.ok and site.reason == "site check exited 4: broken"
    slow = nodes.check_here(None, 0, "cpu", 0, "sleep 5", 0.5)
    assert not slow.ok and "did not finish" in slow.reason
    gpus = nodes.check_here(None, 0, "cuda", 64, None, 5)  # no machine here shows 64 GPUs
    assert not gpus.ok and "64 expected" in gpus.reason


def test_job_wide_check_excludes_bad_nodes_for_good(tmp_path):
    """Local fan-out, where every node is this host.

    A site check that fails where NODE_BAD names the node makes that node bad. The node stays in the
    bad file and is not checked again. The hosts file lists the healthy ones (spares: exactly --need)."""
    nf = tmp_path / "nodefile"
    nf.write_text("n1\nn1\nn2\nn2\nn3\nn3\n")  # PBS style: one line per slot
    bad, log, hosts = tmp_path / "bad", tmp_path / "checks.jsonl", tmp_path / "hosts"
    flag = tmp_path / "fail-now"
    base = ["node-check", "--fanout", "local", "--nodefile", str(nf), "--bad-file", str(bad), "--log", str(log),
            "--hosts-out", str(hosts), "--policy", "spares", "--need", "2", "--timeout", "5",
            "--site-cmd", f"test ! -e {flag}"]
    r = rl(*base, "--attempt", "1")
    assert r.returncode == 0 and r.stdout.strip() == "2" and hosts.read_text().split() == ["n1", "n2"], r.stderr
    flag.write_text("")  # the local fan-out runs every node's check here: all three fail now
    r = rl(*base, "--attempt", "2")
    assert r.returncode == nodes.EXIT_TOO_FEW and "no spare left" in r.stderr, r.stderr
    assert sorted(bad.read_text().split()) == ["n1", "n2", "n3"]
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["node"], x["ok"], x["attempt"]) for x in recs] == \
        [("n1", True, 1), ("n2", True, 1), ("n3", True, 1), ("n1", False, 2), ("n2", False, 2), ("n3", False, 2)]
    flag.unlink()
    r = rl(*base, "--attempt", "3")  # bad stays bad: nothing is checked again
    assert r.returncode == nodes.EXIT_TOO_FEW and len(log.read_text().splitlines()) == 6


def test_a_node_that_never_answers_is_bad(tmp_path):
    nf = tmp_path / "nodefile"
    nf.write_text("n1\nn2\n")
    r = rl("node-check", "--fanout", "local", "--nodefile", str(nf), "--policy", "shrink", "--need", "2",
           "--timeout", "1", "--site-cmd", "sleep 30", "--log", str(tmp_path / "log"))
    assert r.returncode == nodes.EXIT_TOO_FEW and "no healthy answer: no answer from n1 in 1s (unreachable, or its command still runs)" in r.stderr, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "log").read_text().splitlines()]
    assert all(not x["ok"] for x in recs) and len(recs) == 2
