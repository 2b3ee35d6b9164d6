"""`restartlab submit --after`: the wait on the login node, on recorded `qstat -f -x` answers.

The real server's run is in tests/test_site_readiness.py: smoke then experiment in a one-job-per-user
queue.
- A smoke job that is NOT READY, or ended without a report, submits nothing.
- The server not answering ends the wait.
- Progress is said while it waits."""
import io
import json

from restartlab.contracts import layout
from restartlab.job import after


def smoke_expt(tmp_path, ok=None, smoke=True):
    d = tmp_path / "expt"
    d.mkdir()
    e = layout.Expt(str(d))
    open(e.scenario, "w").write("scheduler: pbs\nphases: [{name: sync}]\n")
    open(e.jobid, "w").write("5.srv\n")
    open(e.job_script, "w").write("#!/bin/bash\n\"$RL_PY\" -m restartlab.runtime.smoke run --expt-dir x\n"
                                  if smoke else "#!/bin/bash\ntrue\n")
    if ok is not None:
        open(e.smoke_report, "w").write(json.dumps({"ok": ok, "hosts": ["a", "b"], "checks": [
            {"name": "torch", "ok": ok, "detail": "import torch", "failed_hosts": [] if ok else ["b"]}]}))
    return str(d)


def server(states):
    """qstat -f -x answering each state in turn (the last one from then on)."""
    seen = []

    def run(argv):
        assert argv[:3] == ["qstat", "-f", "-x"], argv
        st = states[min(len(seen), len(states) - 1)]
        seen.append(st)
        if st is None:
            return 1, "", "qstat: cannot connect to server srv (errno=111)"
        code = "    Exit_status = 0\n" if st == "F" else ""
        return 0, f"Job Id: 5.srv\n    job_state = {st}\n{code}", ""
    return run, seen


def wait(d, run):
    out = io.StringIO()
    rc = after.wait(d, "pbs", poll=0, run=run, out=out, sleep=lambda s: None)
    return rc, out.getvalue()


def test_waits_while_queued_and_running_then_a_ready_smoke_lets_it_submit(tmp_path):
    d = smoke_expt(tmp_path, ok=True)
    run, seen = server(["Q", "Q", "R", "F"])
    rc, out = wait(d, run)
    assert rc == 0 and seen == ["Q", "Q", "R", "F"], out
    assert out.splitlines()[0] == "restartlab submit --after: waiting for 5.srv (pending) (0 s)"
    assert "restartlab submit --after: ended: 5.srv (finished: exit code 0)" in out
    assert "restartlab submit --after: smoke: READY (2 host(s))" in out


def test_a_smoke_job_not_ready_submits_nothing(tmp_path):
    rc, out = wait(smoke_expt(tmp_path, ok=False), server(["F"])[0])
    assert rc == 1 and "smoke: NOT READY (2 host(s))" in out and "FAIL torch" in out, out
    assert out.splitlines()[-1] == "restartlab submit --after: the smoke job is NOT READY: nothing submitted"


def test_a_smoke_job_that_ended_without_its_report_submits_nothing(tmp_path):
    rc, out = wait(smoke_expt(tmp_path), server(["F"])[0])
    assert rc == 1 and "the smoke job ended without a readiness report" in out, out


def test_after_a_job_that_is_not_a_smoke_job_only_its_end_counts(tmp_path):
    rc, out = wait(smoke_expt(tmp_path, smoke=False), server(["R", "F"])[0])
    assert rc == 0 and "smoke" not in out, out


def test_a_server_that_stops_answering_ends_the_wait(tmp_path):
    rc, out = wait(smoke_expt(tmp_path, ok=True), server(["Q", None])[0])
    assert rc == 1 and f"did not answer {after.QUERY_FAILURES} times in a row" in out, out
    # one lost answer is not the end
    rc, out = wait(smoke_expt(tmp_path / "b" if (tmp_path / "b").mkdir() is None else None, ok=True),
                   server(["Q", None, "F"])[0])
    assert rc == 0, out


def test_a_job_the_server_holds_after_failed_starts_is_not_waited_for_forever(tmp_path):
    d = smoke_expt(tmp_path, ok=True)
    held = ("Job Id: 5.srv\n    job_state = H\n    comment = job held, too many failed attempts to run\n"
            "    run_count = 21\n    Exit_status = -30\n")  # OpenPBS 23.06's words (tests/pbs_cluster.HELD_BY_PBS)
    rc, out = wait(d, lambda argv: (0, held, ""))
    assert rc == 1 and "5.srv: held: job held, too many failed attempts to run; 21 tries" in out, out
    assert out.rstrip().endswith("it will not end by itself: nothing submitted"), out
    # held on a dependency (a chain's continuation): waited for
    dep = "Job Id: 5.srv\n    job_state = H\n    comment = Job held by a dependency\n"
    seen = []

    def run(argv):
        seen.append(1)
        return 0, dep if len(seen) < 3 else "Job Id: 5.srv\n    job_state = F\n    Exit_status = 0\n", ""
    rc, out = wait(smoke_expt(tmp_path / "c" if (tmp_path / "c").mkdir() is None else None, ok=True), run)
    assert rc == 0 and len(seen) == 3, out


def test_the_poll_and_an_interrupted_wait(tmp_path):
    out = io.StringIO()

    def sleep(s):
        raise KeyboardInterrupt
    rc = after.wait(smoke_expt(tmp_path, ok=True), "pbs", poll=1, run=server(["Q"])[0], out=out, sleep=sleep)
    assert rc == 130 and out.getvalue().endswith("interrupted: nothing submitted\n"), out.getvalue()


def test_not_a_job_is_refused(tmp_path):
    out = io.StringIO()
    assert after.wait(str(tmp_path / "nope"), None, run=server(["F"])[0], out=out) == 2
    assert "neither an experiment directory nor a job id" in out.getvalue(), out.getvalue()
    # a job id the server does not know (a typo, or one it no longer keeps): nothing waited for, nothing submitted
    run = lambda argv: (153, "", "qstat: Unknown Job Id 9.srv\n")  # noqa: E731 (OpenPBS's exit for it)
    rc, text = wait("9.srv", run)
    assert rc == 2 and text == "restartlab submit --after: the server does not know 9.srv: nothing submitted\n", text
