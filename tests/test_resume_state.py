"""What did the resume forget? (#52) Training-state fingerprints from a PyTorch program restartlab
never changed (trainer/state_probe.py, reached through runtime/linebuf/sitecustomize.py), and the
verdict that sets a resumed attempt's state beside the baseline's piece by piece
(analysis/state_compare.py).

The end-to-end test runs examples/forgetful/train.py through `restartlab run`: one phase per piece
the program leaves out of its load on purpose, and one that leaves out nothing; each verdict must
name exactly its piece."""
import json
import os
import subprocess
import sys

import pytest

from restartlab.analysis import state_compare
from restartlab.contracts import layout
from restartlab.contracts import state_record as SR
from restartlab.runtime import pystdio
from tests.helpers import cleanup_tag, job_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
FORGETFUL = os.path.join(ROOT, "scenarios", "examples", "forgetful.yaml")

# each phase of the scenario: the pieces its verdict must name (and nothing else)
EXPECTED = {
    "exact": set(),
    "scheduler": {"lr"},                              # at the step after the resume: the optimizer carried
    "rng": {"rng_python", "rng_numpy", "rng_torch"},  # the first step's rate, the scheduler the next one's
    "sampler": {"batch"},
    "optimizer": {"opt_state", "opt_step", "lr"},     # its param groups carry the learning rate
    "step": {"opt_step"},
}


def _rec(step, opt=0, **pieces):
    base = {k: "0" for k in SR.KEYS}
    base.update({"lr": [0.1], "scale": None, "rng_device": None})
    base.update(pieces)
    return SR.StateRecord(step, opt, 0.0, base)


def _run(n, offset=0, change=None):
    """Records of steps offset+1..offset+n ({rank 0: [...]}) with `change(step) -> {piece: value}`."""
    return {0: [_rec(k, **{"opt_step": float(offset + k - 1), **(change(offset + k) if change else {})})
                for k in range(1, n + 1)]}


# ------------------------------------------------------------------ the comparison (pure)
def test_an_exact_resume_is_clean_and_a_forgotten_piece_is_named_with_its_values():
    base = _run(30, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1)})
    exact = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1)})
    rs = state_compare.compare(2, exact, 10, base)
    assert rs.forgot == [] and rs.later is None and rs.step == 11
    assert "rng_device" in rs.not_observed and "scale" in rs.not_observed and "params" in rs.equal
    stale = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 11)})
    rs = state_compare.compare(2, stale, 10, base)
    assert rs.forgot == ["opt_step"] and rs.differ_step == 11
    assert "optimizer step count differs (0 against 10)" in rs.text() and "Adam's bias correction" in rs.text()


def test_a_piece_one_rank_forgot_is_named_with_that_rank():
    """A checkpoint that lacked one rank's file (the Trainer's rng_state_1.pth, not begun when
    trainer_state.json landed): the piece differs on that rank only, and the verdict says which."""
    def two(n, offset=0, rank1=None):
        runs = [_run(n, offset), _run(n, offset, rank1)]
        return {0: runs[0][0], 1: runs[1][0]}
    base = two(30)
    rs = state_compare.compare(2, two(20, 10, lambda s: {"rng_torch": "other"}), 10, base)
    assert rs.forgot == ["rng_torch"] and rs.ranks == 2 and rs.as_dict()["differ"]["rng_torch"]["ranks"] == [1]
    assert "torch's CPU RNG differs on rank 1 of 2: " in rs.text()
    both = {r: recs for r, recs in two(20, 10, lambda s: {"rng_torch": "other"}).items()}
    both[0] = _run(20, 10, lambda s: {"rng_torch": "other"})[0]
    rs = state_compare.compare(2, both, 10, base)
    assert "torch's CPU RNG differs: " in rs.text() and rs.as_dict()["differ"]["rng_torch"]["ranks"] == [0, 1]


def test_a_piece_used_one_step_later_is_the_resumes_and_a_later_one_is_not_blamed():
    """A scheduler left out shows at the resume's second step (the optimizer carried the first
    step's rate): named, a finding. A piece that first differs further on, with everything equal
    at the resume and the step after, is named as nondeterminism or late-used state, not a finding;
    the first attempt's matched steps are said beside it."""
    base = _run(30, change=lambda s: {"lr": [0.1 * 0.9 ** s]})
    sched = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** (s if s == 11 else s - 10)]})
    rs = state_compare.compare(2, sched, 10, base)
    assert rs.forgot == ["lr"] and rs.differ_step == 12 and "learning rate differs from step 12" in rs.text()
    late = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "params": "x" if s >= 18 else "0"})
    rs = state_compare.compare(2, late, 10, base, first_matched=10)
    assert rs.forgot == [] and rs.later == (18, ["params"])
    assert "first differ at step 18, 7 steps after the resume" in rs.text() and "all 10 steps" in rs.text()


def test_a_run_that_does_not_repeat_itself_is_not_judged_in_what_differs_before_any_restart():
    base = _run(30)
    first = _run(12, change=lambda s: {"rng_torch": f"other-{s}"})  # unseeded: differs from step 1
    not_judged, matched = state_compare.repeatability(first, base)
    assert not_judged == ["rng_torch"] and matched == 0
    resumed = _run(20, offset=10, change=lambda s: {"rng_torch": f"again-{s}"})
    rs = state_compare.compare(2, resumed, 10, base, not_judged)
    assert rs.forgot == [] and rs.unrepeatable == ["rng_torch"] and "not judged" in rs.text()


def test_no_records_is_said_never_an_equal():
    rs = state_compare.compare(2, {}, 10, _run(30))
    assert rs.forgot == [] and rs.equal == [] and rs.text().startswith("state not observed")
    rs = state_compare.compare(2, _run(5, offset=10), 10, {})
    assert rs.text().startswith("state not compared: the baseline wrote no state records")
    rs = state_compare.compare(2, {1: _run(5, offset=10)[0]}, 10, _run(30))
    assert "no rank in both" in rs.text()


def test_a_torn_last_line_is_skipped(tmp_path):
    p = tmp_path / "state-0.jsonl"
    p.write_text(_rec(1).to_json() + "\n" + _rec(2).to_json()[:30])
    assert [r.step for r in SR.read(str(p))] == [1]


# ------------------------------------------------------------------ the probe, from outside the program
PROBED = r"""import sys, torch
m = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.5)
for _ in range(3):
    opt.zero_grad(); m(torch.ones(2, 3)).sum().backward(); opt.step()
print("stepped", "restartlab.trainer.state_probe" in sys.modules)
"""


def _probe_env(d, every="1"):
    env = dict(os.environ, RESTARTLAB_STATE_DIR=str(d), RESTARTLAB_STATE_EVERY=every, RANK="3")
    env.pop("PYTHONPATH", None)
    pystdio.line_buffered(env)
    return env


def test_the_probe_reaches_a_program_that_never_heard_of_it(tmp_path):
    """A plain torch loop (SGD, no DataLoader, no scaler) run with the rank's environment: one record
    per step in state-<RANK>.jsonl; what it cannot see is None (not observed), never a value; an
    optimizer with no state says so ("empty"). every=5: the heavy crcs on an attempt's first 2 steps
    and steps 1, 6, 11, ... A program that never imports torch never loads the probe (or torch)."""
    r = subprocess.run([PY, "-c", PROBED], env=_probe_env(tmp_path, "5"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stepped", "True"], r.stderr
    recs = SR.read(str(layout.Attempt(str(tmp_path)).state(3)))
    assert [x.step for x in recs] == [1, 2, 3]
    first = recs[0].pieces
    assert first["batch"] is None and first["scale"] is None and first["rng_device"] is None
    assert first["opt_state"] == "empty" and first["opt_step"] == 0.0 and first["lr"] == [0.5]
    assert first["params"] != recs[1].pieces["params"]  # the first update changed the weights
    assert recs[2].pieces["params"] is None  # step 3: neither an attempt's first 2 nor 1 + a multiple of 5
    r = subprocess.run([PY, "-c", "import sys; print('torch' in sys.modules)"], env=_probe_env(tmp_path / "none"),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False" and not (tmp_path / "none").exists()


DCP_INIT = r"""import sys, torch
from torch.distributed.checkpoint.state_dict import get_state_dict
m = torch.nn.Linear(3, 1)
opt = torch.optim.AdamW(m.parameters(), lr=0.5)
get_state_dict(m, opt)  # a relaunch before its load: DCP initialises the optimizer with a zero-lr step
for _ in range(2):
    opt.zero_grad(); m(torch.ones(2, 3)).sum().backward(); opt.step()
"""


def test_dcps_optimizer_initialisation_is_not_a_training_step(tmp_path):
    """torch.distributed.checkpoint's get_state_dict steps a fresh optimizer once at lr 0 (the
    bundled trainer's relaunch does, before its load): not counted, or every step of the attempt
    would be numbered one too high (mutation: the probe without its _init_optim_state wrapper ->
    three records, the first at lr 0)."""
    r = subprocess.run([PY, "-c", DCP_INIT], env=_probe_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = SR.read(str(layout.Attempt(str(tmp_path)).state(3)))
    # two records, at the program's rate (Adam's own count includes the initialising step: a load replaces it)
    assert [(x.step, x.pieces["lr"], x.pieces["opt_step"]) for x in recs] == [(1, [0.5], 1.0), (2, [0.5], 2.0)]


def test_the_accelerator_fingerprint_sees_one_changed_element():
    """device_digest (what an accelerator's tensors get; run here on host tensors: no GPU on this
    machine): equal state, equal digest; one element changed in any dtype's bits, another digest."""
    torch = pytest.importorskip("torch")
    from restartlab.trainer.state_probe import device_digest
    ts = [torch.randn(1000, dtype=torch.bfloat16), torch.randn(77), torch.arange(5) > 2, torch.randn(3).double()]
    same = [t.clone() for t in ts]
    assert device_digest(ts) == device_digest(same)
    for i in range(len(ts)):
        other = [t.clone() for t in ts]
        flat = other[i].view(-1)
        flat[0] = (~flat[0]) if flat.dtype == torch.bool else flat[0] + 1
        assert device_digest(other) != device_digest(ts), i
    swapped = [ts[1], ts[0]] + ts[2:]
    assert device_digest(swapped) != device_digest(ts)  # each tensor weighted by its position


def test_state_every_0_turns_it_off(tmp_path):
    r = subprocess.run([PY, "-c", PROBED], env=_probe_env(tmp_path, "0"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stepped", "False"], r.stderr
    assert not layout.Attempt(str(tmp_path)).state_files()


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def forgetful(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("forgetful") / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false"], capture_output=True, text=True, timeout=500, cwd=ROOT)
    cleanup_tag(job_tag(d))
    return d, r


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_each_forgotten_piece_is_named_and_nothing_else(forgetful):
    """Through `restartlab run`: each phase's program leaves one piece out of its load (the one that
    leaves out nothing is the control); the kill, aimed at step 15 and gated on its checkpoint's
    completion, lands there (the program waits after that save for it), the relaunch resumes from it, and its verdict names exactly the pieces
    left out, each a finding, with the loss's divergence beside it; the control is clean and survives."""
    d, r = forgetful
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    with open(layout.Expt(d).report) as f:
        report = f.read()
    for name, pieces in EXPECTED.items():
        v = phases[name]["survival"]
        resumed = [x for x in v["restarts"] if x["attempt"] > 1]
        assert len(resumed) == 1 and resumed[0]["outcome"] == "newest", v
        st = resumed[0]["state"]
        assert st["step"] == 16 and set(st["forgot"]) == pieces, (name, st)
        assert {"params", "batch"} - pieces <= set(st["equal"]), (name, st)  # observed, and equal
        assert st["text"] in report
        if pieces:
            assert not v["survived"] and any("did not restore" in f for f in v["findings"]), v
        else:
            assert v["survived"] and st["later"] is None, v
    assert "learning rate differs from step 17" in phases["scheduler"]["survival"]["restarts"][1]["state"]["text"]


def test_after_a_resume_that_forgot_the_next_one_is_judged_against_the_attempt_that_saved_it():
    """Once the phase has left the baseline (attempt 2 forgot the data position), the baseline is no
    reference for attempt 3's resume: the attempt that saved its checkpoint and ran past it is. A
    faithful resume of a diverged run is then clean; without such a record it is said, not judged."""
    from restartlab.analysis import collect, survival
    base_recs = _run(30)
    forgot = _run(12, offset=10, change=lambda s: {"batch": f"replayed-{s}", "params": "0" if s == 11 else f"p2-{s}"})
    faithful = _run(10, offset=20, change=lambda s: {"batch": f"replayed-{s}", "params": f"p2-{s}"})

    def att(n, recs, resumed, last):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1})
    ph = collect.PhaseData("restart", losses={s: (1.0 if s <= 10 else 2.0) for s in range(1, 31)})
    ph.attempts = [att(1, _run(12), 0, 12), att(2, forgot, 10, 22), att(3, faithful, 20, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, base_recs, 0, 30)]
    restarts = [survival.Restart(1, "first", "", 0), survival.Restart(2, "newest", "", 10),
                survival.Restart(3, "newest", "", 20)]
    findings = survival.resumed_state(ph, base, restarts)
    assert findings == ["attempt 2: the resume at step 11 did not restore the batch"]
    assert restarts[1].state["against"] == "the baseline's" and restarts[1].state["forgot"] == ["batch"]
    st = restarts[2].state
    assert st["forgot"] == [] and st["against"].startswith("attempt 2's, which saved it (the phase left the baseline at step 11")
    ph.attempts[1].last_iter = 20  # attempt 2 killed as its step-20 save completed: no record of step 21
    restarts = [survival.Restart(k, o, "", r) for k, o, r in ((1, "first", 0), (2, "newest", 10), (3, "newest", 20))]
    survival.resumed_state(ph, base, restarts)
    assert restarts[2].state["text"].startswith("state not compared: the phase left the baseline at step 11")



def test_a_phase_whose_state_left_the_baseline_after_an_exact_resume_judges_the_next_against_its_saver():
    """Its loss equal to the baseline's throughout, the phase's state differed from step 15 after
    attempt 2's exact resume (a warm rank ran other threads than the baseline: seen with the
    Trainer). Attempt 3 resumed faithfully from attempt 2's step-20 save: judged against the
    baseline it would read "the weights were not loaded"; it is judged against attempt 2's."""
    from restartlab.analysis import collect, survival
    base_recs = _run(30)
    drift = lambda s: {"params": f"p2-{s}" if s >= 15 else "0", "opt_state": f"o2-{s}" if s >= 15 else "0"}  # noqa: E731
    second = _run(12, offset=10, change=drift)
    third = _run(10, offset=20, change=drift)

    def att(n, recs, resumed, last):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1})
    ph = collect.PhaseData("restart", losses={s: 1.0 for s in range(1, 31)})
    ph.attempts = [att(1, _run(12), 0, 12), att(2, second, 10, 22), att(3, third, 20, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, base_recs, 0, 30)]
    restarts = [survival.Restart(1, "first", "", 0), survival.Restart(2, "newest", "", 10),
                survival.Restart(3, "newest", "", 20)]
    assert survival.resumed_state(ph, base, restarts) == []
    assert restarts[1].state["forgot"] == [] and restarts[1].state["later"]["step"] == 15
    st = restarts[2].state
    assert st["forgot"] == [] and st["against"].startswith("attempt 2's, which saved it (the phase left the baseline "
                                                          "at step 15"), st


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_a_kill_after_the_last_save_and_a_relaunch_with_nothing_left_to_train(tmp_path):
    """The kill lands after the last step's save, before the program exits (it waits there for it):
    the relaunch resumes at the last step, trains nothing and exits 0. That attempt finished the
    phase (runtime/tap.py); before, restartlab waited for a progress line that never came and
    relaunched it until its budget ran out (found with the forgetful program here)."""
    d = str(tmp_path / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false", "--set", "failures.schedule.at_steps=[24]",
                        "--set", 'phases=[{name: end, checkpoint: sync, args: [--save-every, "6", --hold-at, "24"]}]'],
                       capture_output=True, text=True, timeout=280, cwd=ROOT)
    cleanup_tag(job_tag(d))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        ph, = json.load(f)["phases"]
    v = ph["survival"]
    assert ph["completed"] and ph["attempts"] == 2 and ph["kills"] == 1, ph
    assert [(x["outcome"], x["resumed_from"]) for x in v["restarts"]] == [("first", 0), ("newest", 24)], v
    assert v["survived"], v


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_a_warm_forked_rank_records_its_state_too(tmp_path):
    """Under warm restart the relaunch's rank is forked from a pool that imported torch before the
    fork, so no import of the program's installs the probe: the pool's forked rank installs it
    (runtime/warm/pool.py), into its own attempt's file. The exact resume is judged, and clean.
    Mutation: no install in the forked rank -> "state not observed" for attempt 2."""
    d = str(tmp_path / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false", "--set", "relaunch.warm=true",
                        "--set", 'phases=[{name: baseline, checkpoint: none}, '
                                 '{name: exact, checkpoint: sync, args: [--save-every, "5", --hold-at, "15"]}]'],
                       capture_output=True, text=True, timeout=280, cwd=ROOT)
    cleanup_tag(job_tag(d))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        ph = {p["phase"]: p for p in json.load(f)["phases"]}["exact"]
    from restartlab.runtime.warm.standby import served_in
    assert served_in(layout.Expt(d).phase("exact").warm_dir, 2) == 1  # the relaunch's rank was forked by the pool
    st = ph["survival"]["restarts"][1]["state"]
    assert st["step"] == 16 and st["forgot"] == [] and {"params", "opt_state", "batch", "lr"} <= set(st["equal"]), st
    assert ph["survival"]["survived"]


def test_the_repeatability_check_uses_the_phases_first_run_from_step_0_that_recorded():
    """An attempt killed in start-up records nothing: the phase's first run from step 0 with records
    says what does not repeat (found by the soak: a fuzz whose first attempt was killed in start-up
    had the bundled trainer's unseeded Python and NumPy RNG called forgotten at every resume)."""
    from restartlab.analysis import collect, survival
    unseeded = lambda run: (lambda s: {"rng_python": f"{run}-{s}"})  # noqa: E731

    def att(n, recs, resumed, last, stepped=True):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1} if stepped else None)
    ph = collect.PhaseData("sync", losses={s: 1.0 for s in range(1, 31)})
    ph.attempts = [att(1, {}, 0, 0, stepped=False), att(2, _run(12, change=unseeded("a")), 0, 12),
                   att(3, _run(20, offset=10, change=unseeded("b")), 10, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, _run(30, change=unseeded("base")), 0, 30)]
    restarts = [survival.Restart(1, "startup_kill", "", None), survival.Restart(2, "first", "", 0),
                survival.Restart(3, "newest", "", 10)]
    assert survival.resumed_state(ph, base, restarts) == []
    assert restarts[2].state["unrepeatable"] == ["rng_python"] and restarts[2].state["forgot"] == []
