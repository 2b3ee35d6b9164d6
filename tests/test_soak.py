"""tests/soak.py's own hygiene: a soak stopped by SIGTERM (kill PID) leaves nothing running. Before,
its busy loads outlived it: SIGTERM ended the soak without its finally blocks."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_a_soak_stopped_by_sigterm_stops_its_run_and_its_loads(tmp_path):
    # one busy load: the stop path is the same for each, and every load spins until the stop
    soak = subprocess.Popen([sys.executable, "-m", "tests.soak", "--runs", "3", "--load", "1", "--workers", "0",
                             "--mark", "", "-k", "no_test_is_named_this", "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    me = psutil.Process(soak.pid)
    loads, runs = [], []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (len(loads) == 1 and runs):  # inside a run: its loads and its pytest
            kids = me.children()
            loads = [k for k in kids if "while True: pass" in " ".join(k.cmdline())]
            runs = [k for k in kids if "pytest" in k.cmdline()]
            time.sleep(0.05)
        assert len(loads) == 1 and runs, "the soak never started a run"
        soak.send_signal(signal.SIGTERM)
        assert soak.wait(150) == 128 + signal.SIGTERM  # ended by the signal, inside the run
        gone, alive = psutil.wait_procs(loads + runs, timeout=10)
        assert not alive, [p.pid for p in alive]
    finally:  # whatever failed above: nothing of ours left running (by PID)
        for p in [me] + loads + runs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        soak.wait()
