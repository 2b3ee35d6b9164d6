"""tests/cpu_account.py's join of the kernel's process records with the Python lines.
A pid used twice in one run is two processes, each with its own parent and line. The suite's
~51,000 processes reuse ~20,000 pids."""
from tests import cpu_account as ca


def test_a_reused_pid_is_two_processes_each_with_its_own_parent_and_line():
    recs = [  # (comm, cpu s, pid, ppid, start, end)
        ("python", 1.0, 50, 1, 0.0, 100.0),     # 0: test A's process
        ("python", 2.0, 60, 50, 10.0, 20.0),    # 1: its child
        ("python", 3.0, 50, 1, 200.0, 300.0),   # 2: pid 50 again: test B's process
        ("python", 4.0, 60, 1, 210.0, 220.0),   # 3: pid 60 again, B's child, reparented to init by its exit
    ]
    py = {50: [(0.5, 1, "-m a", "A"), (200.5, 1, "-m b", "B")], 60: [(210.4, 50, "-m c", "")]}
    line, parent = ca.link(recs, py)
    assert [x and x[3] for x in line] == ["A", None, "B", ""]
    assert parent == [None, 0, None, 2]  # the child of the second life of pid 50, by its line's ppid


def test_lines_without_their_time_still_join_by_pid():
    recs = [("python", 1.0, 7, 1, 0.0, 5.0)]
    line, parent = ca.link(recs, {7: [(None, 1, "-m x", "T")]})
    assert line[0][3] == "T" and parent == [None]


def test_what_each_process_was():
    assert ca.kind("-u -c import sys;exec(eval(sys.stdin.readline()))") == "pytest and its workers"  # xdist's worker
    assert ca.kind("-X importtime -m pytest -q") == "pytest and its workers"
    assert ca.kind("-m restartlab.runtime.rankenv -- python train.py").startswith("training rank (a program")
    assert ca.kind("-m restartlab.trainer --model tiny").startswith("training rank (the bundled trainer")
    assert ca.kind("", "pt_gloo_runloop").startswith("training rank (killed")  # a SIGKILLed rank's last thread
    assert ca.kind("", "python").startswith("python without a line")  # a pool's fork writes none
    assert ca.kind("", "qstat") == "qstat"
    assert ca.kind("-m restartlab.cli supervise --phase x") == "python -m restartlab.cli supervise"
