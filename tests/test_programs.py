"""Program adapters and what reads a program's run, without a training run.

The tests cover the adapters (restartlab/programs), the progress tap (tap.py), rank variables for
any program (rankenv.py) and the survival verdict (survival.py). They use real files, real
directories and real pipes. The multi-rank runs are in test_your_trainer.py."""
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from restartlab.contracts import layout
from restartlab import programs
from restartlab.analysis import collect, survival
from restartlab.runtime import tap

GEN = {"adapter": "generic", "progress": r"step (?P<step>\d+) loss (?P<loss>\S+)",
       "checkpoints": r"{ckpt_dir}/ckpt-(?P<step>\d+)", "resumed": r"resumed from step (?P<step>\d+)"}


def spec(**kw):
    return programs.resolve(dict(GEN, **kw))


def mk(path, text="x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@pytest.mark.parametrize("raw", ["step 3 loss 1.5", "[rank0]: step 3 loss 1.5", "[0] step 3 loss 1.5",
                                 "0: step 3 loss 1.5", "\x1b[32mstep 3\x1b[0m loss 1.5", "  [rank 0]:step 3 loss 1.5"])
def test_progress_lines_with_ansi_codes_and_rank_prefixes(raw):
    assert programs.parse_progress(spec(), programs.clean_line(raw)) == programs.Progress(3, loss=1.5)


def test_progress_takes_dt_and_ignores_other_lines():
    s = spec(progress=r"it (?P<step>\d+) dt (?P<dt>\S+)")
    assert programs.parse_progress(s, "it 7 dt 0.25") == programs.Progress(7, dt=0.25)
    assert programs.parse_progress(s, "loading it 7") is None
    assert programs.parse_resumed(spec(), "resumed from step 40") == 40


@pytest.mark.parametrize("change,key,says", [
    ({"progress": r"step (\d+)"}, "progress", "has no (?P<step>...) group"),
    ({"checkpoints": "ckpt-(?P<step>"}, "checkpoints", "is not a valid regular expression"),
    ({"checkpoints": None}, "checkpoints", "required for adapter 'generic'"),
    ({"complete": "file:"}, "complete", "is not one of"),
    ({"complete": "pointer:a/b"}, "complete", "is not one of"),
    ({"selects": "newest"}, "selects", "is not one of"),
    ({"selects": "pointer"}, "selects", "pointer needs complete: pointer:FILE"),
])
def test_spec_errors_name_the_key(change, key, says):
    errs = programs.spec_errors(spec(**change))
    assert errs and errs[0][0] == key and says in errs[0][1], errs


def test_the_bundled_trainer_needs_no_progress_regex():
    assert programs.spec_errors(programs.resolve({"adapter": "restartlab"})) == []


def test_no_progress_takes_the_steps_from_the_probe_unless_it_is_off(tmp_path):
    """#63.6: a program without `progress` (or progress_file) is valid: its steps are rank 0's torch
    optimizer steps, from the training-state probe. With the probe off (collection.state_every: 0)
    there would be no steps: refused, naming the file, line and key."""
    from restartlab import scenario
    assert programs.spec_errors(spec(progress=None)) == []
    p = tmp_path / "s.yaml"
    text = ("name: t\ntrainer:\n  program:\n    command: [python, x.py]\n    checkpoints: '{ckpt_dir}/c-(?P<step>\\d+)'\n"
            "    steps: 10\nphases: [{name: a}]\n")
    p.write_text(text)
    assert scenario.load(str(p)).trainer.train_iters == 10
    p.write_text(text + "collection: {state_every: 0}\n")
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.load(str(p))
    assert f"{p}:3: trainer.program.progress: required when collection.state_every is 0" in str(e.value), str(e.value)


def test_complete_rules_and_the_programs_own_selection(tmp_path):
    d = str(tmp_path)
    mk(f"{d}/ckpt-10/state", "a")
    mk(f"{d}/ckpt-10/done")
    mk(f"{d}/ckpt-20/state", "b")                 # torn: no marker
    mk(f"{d}/ckpt-5.pt")                          # a file checkpoint is listed too
    mk(f"{d}/notes.txt")
    os.utime(f"{d}/ckpt-10", (1, 1))
    os.utime(f"{d}/ckpt-10/state", (1, 1))
    os.utime(f"{d}/ckpt-10/done", (1, 1))
    s = spec(checkpoints=r"{ckpt_dir}/ckpt-(?P<step>\d+)(\.pt)?", complete="file:done")
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(5, False), (10, True), (20, False)]
    assert programs.newest_complete(ck).step == 10
    assert programs.will_load(s, ck, d).step == 10
    assert programs.will_load(dataclasses.replace(s, selects="highest"), ck, d).step == 20
    assert programs.will_load(dataclasses.replace(s, selects="newest_mtime"), ck, d).step in (5, 20)
    mk(f"{d}/ckpt-5.ptdone")                      # file:NAME beside a file checkpoint
    assert [c.complete for c in programs.list_ckpts(s, d)][0] is True
    # exists: whatever is there; dcp: DCP's .metadata inside the dir
    assert all(c.complete for c in programs.list_ckpts(dataclasses.replace(s, complete="exists"), d))
    mk(f"{d}/ckpt-20/.metadata")
    assert [c.step for c in programs.list_ckpts(dataclasses.replace(s, complete="dcp"), d) if c.complete] == [20]
    assert os.listdir(f"{d}/ckpt-20") and os.path.exists(f"{d}/notes.txt")  # nothing changed


def test_pointer_file_rule(tmp_path):
    d = str(tmp_path)
    for n in (100, 200):
        mk(f"{d}/iter_{n:07d}/model.pt")
    s = spec(checkpoints=r"{ckpt_dir}/iter_(?P<step>\d+)", complete="pointer:latest.txt", selects="pointer")
    assert programs.will_load(s, programs.list_ckpts(s, d), d) is None  # no pointer yet
    mk(f"{d}/latest.txt", "100\n")
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(100, True), (200, False)]
    assert programs.will_load(s, ck, d).step == 100
    mk(f"{d}/latest.txt", "")                     # the empty pointer a kill between open and write leaves
    assert programs.newest_complete(programs.list_ckpts(s, d)) is None


def _zip(path, whole=True, obj=None):
    """A file shaped as torch.save writes it (a zip holding <name>/data.pkl: `obj` pickled, or an
    empty dict), or its first half."""
    import io
    import pickle
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("ckpt/data.pkl", pickle.dumps(obj or {}, protocol=2))
        z.writestr("ckpt/data/0", os.urandom(4096))
    data = buf.getvalue()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if whole else data[:len(data) // 2])


def test_deepspeeds_latest_tag_and_its_shards(tmp_path):
    """DeepSpeed's `latest` holds a tag (global_step10), not a number.

    The pointer's step is the tag's trailing number. Its adapter's rule
    (pointer:latest+torchzips+dsshards) calls a tag complete only when all of these hold:
    - `latest` names it (or a later one);
    - every .pt shard in it reads whole;
    - every rank's ZeRO shard is there (its model states say 2 ranks).
    When one is not complete, the rule says why."""
    d = str(tmp_path)
    s = programs.resolve({"adapter": "deepspeed", "command": ["x"], "steps": 30, "progress": r"step (?P<step>\d+)"})
    assert s.complete == "pointer:latest+torchzips+dsshards" and not programs.spec_errors(s)
    states = {"dp_world_size": 2, "mp_world_size": 1, "global_steps": 5}
    for n in (5, 10):
        _zip(f"{d}/global_step{n}/mp_rank_00_model_states.pt", obj=states)
        _zip(f"{d}/global_step{n}/zero_pp_rank_0_mp_rank_00_optim_states.pt")
        _zip(f"{d}/global_step{n}/zero_pp_rank_1_mp_rank_00_optim_states.pt", whole=n == 5)
    mk(f"{d}/latest", "global_step5")
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(5, True), (10, False)]
    assert programs.will_load(s, ck, d).step == 5
    assert programs.why_not_complete(s.complete, f"{d}/global_step10", 10, d) == \
        "latest names step 5; zero_pp_rank_1_mp_rank_00_optim_states.pt cut short (its zip directory does not read)"
    mk(f"{d}/latest", "global_step10")  # rank 0's mark, before rank 1's shard is whole
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(5, True), (10, False)]
    assert programs.will_load(s, ck, d).step == 10 and programs.newest_complete(ck).step == 5
    assert programs.why_not_complete(s.complete, f"{d}/global_step10", 10, d) == \
        "latest names it, but zero_pp_rank_1_mp_rank_00_optim_states.pt cut short (its zip directory does not read)"
    assert programs.in_flight(s, d, 0) == ["global_step10", "latest"]
    _zip(f"{d}/global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt")
    assert [c.complete for c in programs.list_ckpts(s, d)] == [True, True]
    os.makedirs(f"{d}/global_step15")  # made, nothing written in it yet
    assert programs.why_not_complete(s.complete, f"{d}/global_step15", 15, d) == \
        "latest names step 10; no .pt or .pth file in it"
    # rank 0's files and its mark, rank 1's shard not begun (a soak saw `latest` 4 ms before it)
    _zip(f"{d}/global_step20/mp_rank_00_model_states.pt", obj=states)
    _zip(f"{d}/global_step20/zero_pp_rank_0_mp_rank_00_optim_states.pt")
    mk(f"{d}/latest", "global_step20")
    assert programs.why_not_complete(s.complete, f"{d}/global_step20", 20, d) == \
        "latest names it, but zero_pp_rank_1_mp_rank_00_optim_states.pt not there (2 x 1 ranks' shards)"
    assert [c.step for c in programs.list_ckpts(s, d) if c.complete] == [5, 10]
    _zip(f"{d}/global_step20/zero_pp_rank_1_mp_rank_00_optim_states.pt")
    assert programs.newest_complete(programs.list_ckpts(s, d)).step == 20
    _zip(f"{d}/global_step20/mp_rank_00_model_states.pt", whole=False)
    assert "mp_rank_00_model_states.pt does not say how many ranks wrote it" in \
        programs.why_not_complete(s.complete, f"{d}/global_step20", 20, d)
    mk(f"{d}/latest", "release")  # Megatron's word: no step
    assert programs.newest_complete(programs.list_ckpts(s, d)) is None
    assert programs.spec_errors(dataclasses.replace(s, complete="pointer:latest+nope")) and \
        programs.spec_errors(dataclasses.replace(s, complete="dcp+file:../x"))


def test_in_flight_sees_a_save_being_written_not_leftovers_nor_complete_ones(tmp_path):
    d = str(tmp_path)
    s = spec(complete="file:done")
    mk(f"{d}/ckpt-5/state")
    mk(f"{d}/ckpt-5/done")
    mk(f"{d}/.tmp-ckpt-9/state")                  # an earlier kill's leftover: old
    for p in (f"{d}/.tmp-ckpt-9/state", f"{d}/.tmp-ckpt-9"):
        os.utime(p, (1, 1))
    since = time.time() - 1
    assert programs.in_flight(s, d, since) == []
    mk(f"{d}/.tmp-ckpt-10/state")                 # an atomic save in progress (renamed when done)
    mk(f"{d}/ckpt-15/state")                      # an in-place save in progress
    assert programs.in_flight(s, d, since) == [".tmp-ckpt-10", "ckpt-15"]
    mk(f"{d}/ckpt-15/done")
    assert programs.in_flight(s, d, since) == [".tmp-ckpt-10"]


def _rows(att):
    with open(att.metrics(0)) as f:
        return [json.loads(line)["metrics"] for line in f]


def test_tap_turns_output_into_metrics_rows(tmp_path):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    launch = 1000.0
    at_launch = [programs.Ckpt(10, "x", True, 0.0), programs.Ckpt(20, "y", True, 0.0)]
    t = tap.Tap(spec(resumed=None), att, launch, at_launch)
    t.feed(b"loading...\n", 1001.0)
    assert not t.stepped and t.last_progress == launch
    t.feed(b"[rank0]: step 21 loss 2.5\n", 1002.0)
    t.feed(b"[rank1]: step 21 loss 2.5\n", 1002.1)   # another rank's copy: booked once
    t.feed(b"\r 50%|##   | step 22 loss 2.25\r 60%|### | step 23 loss 2.0\n", 1002.5)
    assert t.finish(0, last_step=23) is None
    rows = _rows(att)
    assert [r["train/iter"] for r in rows] == [21, 22, 23, 23]
    first = rows[0]
    assert first["train/resumed_from"] == 20 and first["program/resume_evidence"] == "inferred"
    assert first["train/restart_seconds"] == pytest.approx(2.0) and "train/dt" not in first
    assert rows[1]["train/dt"] == pytest.approx(0.5)
    assert rows[-1] == {"train/iter": 23, "train/finished": True}


def test_tap_without_progress_takes_the_probes_steps_and_the_programs_loss_lines(tmp_path):
    """#63.6: no progress pattern.

    The steps are rank 0's optimizer steps from the probe's records, at the times they began. Loads
    and another optimizer's steps are left out. The steps are numbered from the checkpoint the
    program's rule loads: here 20. The program's resume line wins where it prints one. A loss line is
    booked at the step the probe counted when the program printed it (its logged_loss record). This
    holds whatever the order the tap reads things in. Here the loss of step 1 comes after step 2's
    record."""
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(progress=None, resumed=None), att, 1000.0, [programs.Ckpt(20, "x", True, 0.0)], loads=20)
    t.from_probe = True
    for rec in ({"step": 0, "opt": 0, "time": 1001.0, "load": "Optimizer.load_state_dict"},
                {"step": 1, "opt": 0, "time": 1002.0}, {"step": 1, "opt": 1, "time": 1002.1},
                {"step": 2, "opt": 0, "time": 1002.5}, {"step": 1, "opt": 0, "time": 1002.4, "logged_loss": "5.399"},
                {"step": 2, "opt": 0, "time": 1002.9, "logged_loss": "5.385"}, {"step": 2, "time": 1003, "logged_loss": "x"}):
        t.probe_record(rec)
    t.feed(b"{'loss': '9.999', 'grad_norm': '0.87'}\n", 1002.6)  # the output's copy: not read for the loss
    assert t.finish(0, last_step=22) is None
    rows = _rows(att)
    assert [(r["train/iter"], r.get("train/loss_logged")) for r in rows] == [(21, None), (22, None), (21, 5.399),
                                                                             (22, 5.385), (22, None)], rows
    assert rows[0]["train/resumed_from"] == 20 and rows[0]["train/restart_seconds"] == pytest.approx(2.0)
    assert rows[1]["train/dt"] == pytest.approx(0.5) and rows[-1] == {"train/iter": 22, "train/finished": True}
    # its resume line, where it prints one, numbers the steps
    att2 = layout.Attempt(str(tmp_path / "2"))
    os.makedirs(att2.path)
    t = tap.Tap(spec(progress=None), att2, 1000.0, [programs.Ckpt(20, "x", True, 0.0)], loads=20)
    t.from_probe = True
    t.feed(b"resumed from step 15\n", 1001.0)
    t.probe_record({"step": 1, "opt": 0, "time": 1002.0})
    t.finish(1, last_step=30)
    assert _rows(att2)[0]["train/iter"] == 16 and _rows(att2)[0]["program/resume_evidence"] == "line"
    # no step recorded at all: said where the steps were to come from
    att3 = layout.Attempt(str(tmp_path / "3"))
    os.makedirs(att3.path)
    t = tap.Tap(spec(progress=None), att3, 1000.0, [])
    t.from_probe = True
    assert "(no trainer.program.progress: the steps are rank 0's torch optimizer steps, and none was recorded)" \
        in t.finish(1, last_step=30)


@pytest.mark.parametrize("rc, final_saved, finished", [(0, True, True), (134, True, True), (134, False, False),
                                                       (0, False, True)])
def test_tap_a_program_that_ends_badly_after_its_last_step_finished_once_its_last_save_is_complete(
        tmp_path, rc, final_saved, finished):
    """#63.5: the last step logged, then a crash at exit (rc 134).

    With the last step's checkpoint complete, the attempt is finished. It is not relaunched to train
    nothing. Without that checkpoint (killed before or in its save) it is not finished: the relaunch
    resumes and writes it. An exit 0 after the last step is finished either way."""
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(resumed=None), att, 0.0, [])
    t.feed(b"step 22 loss 1\nstep 23 loss 1\n", 1.0)
    t.finish(rc, 23, final_saved)
    assert (_rows(att)[-1] == {"train/iter": 23, "train/finished": True}) == finished, _rows(att)


def test_tap_books_the_programs_save_lines_as_save_stalls(tmp_path):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(saved=r"saved step (?P<step>\d+) in (?P<seconds>\S+)s"), att, 0.0, [])
    t.feed(b"saved step 0 in 0.5s\nstep 1 loss 2\nstep 2 loss 1\nsaved step 2 in 0.25s\nstep 3 loss 0.5\n", 1.0)
    t.finish(0, 3)
    rows = _rows(att)
    assert {"train/iter": 2, "train/ckpt_save_seconds": 0.25} in rows   # a save before the first step: not booked
    assert sum(1 for r in rows if "train/ckpt_save_seconds" in r) == 1
    assert [r["train/iter"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert programs.spec_errors(spec(saved=r"saved (?P<step>\d+)"))[0][0] == "saved"



def test_tap_takes_save_time_out_of_the_step_and_estimates_it_from_a_save_start_line(tmp_path):
    """A save's stall is not productive step time.

    - With the program's own save line (seconds), the interval holding it is the step less those
      seconds.
    - With only a start line (the Trainer's "Saving model checkpoint to ..."), the stall is the
      interval less the median step before it. It is booked as estimated.
    - With too few steps before it to compare, nothing is booked."""
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(saving=r"Saving model checkpoint to \S+", saved=r"saved in (?P<seconds>\S+)s"), att, 0.0, [])
    clock = iter([1.0, 2.0, 3.0, 4.5, 5.0, 6.5, 7.5, 8.0, 13.5, 14.0, 17.5, 18.5])
    t.feed(b"step 1 loss 1\n", next(clock))
    t.feed(b"Saving model checkpoint to /c/checkpoint-1\n", next(clock))
    t.feed(b"step 2 loss 1\n", next(clock))          # interval 2.0, a save in it, no step to compare
    t.feed(b"step 3 loss 1\n", next(clock))          # 1.5
    t.feed(b"step 4 loss 1\n", next(clock))          # 0.5
    t.feed(b"step 5 loss 1\n", next(clock))          # 1.5
    t.feed(b"step 6 loss 1\n", next(clock))          # 1.0
    t.feed(b"saved in 4.0s\n", next(clock))          # the program's own line: 4.0 s
    t.feed(b"step 7 loss 1\n", next(clock))          # interval 6.0, of which 4.0 the save
    t.feed(b"Saving model checkpoint to /c/checkpoint-7\n", next(clock))
    t.feed(b"step 8 loss 1\n", next(clock))          # interval 4.0, a save started in it
    t.feed(b"step 9 loss 1\n", next(clock))          # 1.0
    t.finish(1, 100)
    rows = _rows(att)
    steps = {r["train/iter"]: r for r in rows if "train/loss" in r}
    saves = [r for r in rows if "train/ckpt_save_seconds" in r]
    assert steps[2]["train/dt"] == pytest.approx(2.0)  # its save not booked: no step before it to compare
    assert steps[7]["train/dt"] == pytest.approx(2.0)  # 6.0 less the 4.0 s its line said
    assert saves[0] == {"train/iter": 6, "train/ckpt_save_seconds": 4.0}
    # step 8's interval: 4.0 less the median of the steps without a save (1.5, 0.5, 1.5, 1.0: 1.25)
    assert saves[1] == {"train/iter": 7, "train/ckpt_save_seconds": pytest.approx(2.75), "train/ckpt_estimated": True}
    assert steps[8]["train/dt"] == pytest.approx(1.25) and steps[9]["train/dt"] == pytest.approx(1.0)
    assert len(saves) == 2
    assert programs.spec_errors(spec(saving="(unclosed")) and programs.spec_errors(spec(saving="any line")) == []


def test_tap_prefers_the_programs_resume_line_and_writes_no_final_row_on_failure(tmp_path):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(), att, 0.0, [programs.Ckpt(20, "y", True, 0.0)])
    t.feed(b"resumed from step 15\nstep 16 loss 1\n", 1.0)
    assert t.finish(9, last_step=16, final_saved=False) is None  # killed before its last save: no final row
    rows = _rows(att)
    assert rows[0]["train/resumed_from"] == 15 and rows[0]["program/resume_evidence"] == "line"
    assert not any(r.get("train/finished") for r in rows)


def test_a_relaunch_that_resumes_at_the_last_step_has_finished(tmp_path):
    """A program killed between its last save and its exit: its relaunch has finished.

    The relaunch resumes at the last step, trains nothing and exits 0. That attempt finished. This
    was found running examples/forgetful/train.py, whose kill landed after its step-30 save. The
    phase relaunched it until its budget ran out. A resume short of the last step with no progress
    is still the warning."""
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(), att, 0.0, [programs.Ckpt(30, "y", True, 0.0)])
    t.feed(b"resumed from step 30\n", 1.0)
    assert t.finish(0, last_step=30) is None
    first, last = _rows(att)
    assert first["train/iter"] == 30 and first["train/resumed_from"] == 30 and first["train/loss"] is None
    assert last == {"train/iter": 30, "train/finished": True}
    att = layout.Attempt(str(tmp_path / "2"))
    os.makedirs(att.path)
    t = tap.Tap(spec(), att, 0.0, [programs.Ckpt(20, "y", True, 0.0)])
    t.feed(b"resumed from step 20\n", 1.0)
    assert "no progress seen" in t.finish(0, last_step=30) and not os.path.exists(att.metrics(0))


def test_tap_without_progress_warns_with_the_regex_and_the_last_lines(tmp_path):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(), att, 0.0, [])
    t.feed(b"epoch 1 batch 1 loss 3\nepoch 1 batch 2 loss 2\n", 1.0)
    w = t.finish(0, last_step=5)
    assert "no progress seen" in w and "trainer.program.progress" in w and "epoch 1 batch 2 loss 2" in w
    assert not os.path.exists(att.metrics(0))


def test_pump_copies_a_pipe_to_the_output_and_the_tap(tmp_path):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path)
    t = tap.Tap(spec(), att, time.time(), [])
    p = subprocess.Popen([sys.executable, "-c", "import time\nfor i in range(1, 4):\n print(f'step {i} loss {i/2}', "
                          "flush=True); time.sleep(0.05)"], stdout=subprocess.PIPE)
    pump = tap.Pump(p.stdout, att, t)
    pump.start()
    assert p.wait(30) == 0
    pump.join(10)
    t.finish(0, 3)
    with open(att.output) as f:
        assert f.read().splitlines() == [f"step {i} loss {i / 2}" for i in range(1, 4)]
    ts = [json.loads(x)["timestamp"] for x in open(att.metrics(0))]
    assert ts == sorted(ts) and ts[1] - ts[0] >= 0.04   # timestamps are when each line came


def test_rankenv_maps_launcher_variables_and_keeps_what_is_set():
    from restartlab.runtime import rankenv
    hydra = {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    got = rankenv.torchrun_env(dict(hydra, RESTARTLAB_ATTEMPT="3", RESTARTLAB_JOB_TAG="rl-x"))
    assert got == {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                   "TORCHELASTIC_RUN_ID": "rl-x", "TORCHELASTIC_RESTART_COUNT": "2"}
    pals = {"PALS_RANKID": "5", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "1", "PALS_LOCAL_SIZE": "4"}
    assert rankenv.torchrun_env(pals)["WORLD_SIZE"] == "8"
    assert rankenv.torchrun_env({}) == {}
    env = dict(os.environ, PMI_RANK="1", PMI_SIZE="2", MPI_LOCALRANKID="1", RANK="7")
    env.pop("PYTHONUNBUFFERED", None)
    out = subprocess.run([sys.executable, "-m", "restartlab.runtime.rankenv", "--", "sh", "-c",
                          "echo $RANK $WORLD_SIZE $LOCAL_RANK $PYTHONUNBUFFERED $$"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[:4] == ["7", "2", "1", "1"]  # RANK was set: kept
    bad = subprocess.run([sys.executable, "-m", "restartlab.runtime.rankenv", "--", "/no/such/program"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 127 and "cannot run '/no/such/program'" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- survival verdicts on made-up phases
def _attempt(phase, k, rows=None, rc=0, completed=False, snap=None, hang=False, launch=None):
    att = phase.attempt(k)
    os.makedirs(att.path)
    launch = launch if launch is not None else 100.0 * k
    with open(att.record, "w") as f:
        json.dump({"attempt": k, "launch_ts": launch, "end_ts": launch + 50, "exit_code": rc,
                   "completed": completed, "hang": hang}, f)
    if snap is not None:
        with open(att.at_launch, "w") as f:
            json.dump(snap, f)
    if rows:
        with open(att.metrics(0), "w") as f:
            for i, m in enumerate(rows):
                f.write(json.dumps({"timestamp": launch + i, "rank": 0, "metrics": m}) + "\n")


def _snap(ck, pick=None):
    good = [s for s, c in ck if c]
    return {"checkpoints": [list(x) for x in ck], "newest_complete": max(good) if good else None,
            "will_load": {"step": pick, "path": f"ckpt-{pick}", "complete": dict(ck).get(pick)} if pick else None}


def _steps(a, b, first=None, loss=lambda s: 1.0 / s):
    rows = [{"train/iter": s, "train/loss": loss(s)} for s in range(a, b + 1)]
    if first is not None:
        rows[0]["train/resumed_from"] = first
    return rows


def _read(phase):
    return collect.load_phase(phase.name, phase_dir=phase.path, losses=True)


def _kill(phase, k):
    with open(phase.injections, "a") as f:
        f.write(json.dumps({"time": 100.0 * k + 1, "killed": 2, "attempt": k}) + "\n")


def test_verdicts_of_each_kind_of_restart(tmp_path):
    ph = layout.Phase(str(tmp_path / "p"))
    _attempt(ph, 1, _steps(1, 12, 0), rc=9, snap=_snap([]))
    _kill(ph, 1)
    _attempt(ph, 2, _steps(11, 17, 10), rc=9, snap=_snap([(10, True)]))                 # newest
    _kill(ph, 2)
    _attempt(ph, 3, _steps(11, 23, 10), rc=9, snap=_snap([(10, True), (15, True)]))     # older
    _kill(ph, 3)
    _attempt(ph, 4, _steps(1, 4, 0), rc=9, snap=_snap([(10, True), (20, True)]))        # fresh
    _kill(ph, 4)
    torn = _snap([(20, True), (25, False)], 25)
    torn["will_load"]["why"] = "rng_state_1.pth not there (2 processes' RNG states)"
    _attempt(ph, 5, _steps(26, 27, 25), rc=9, snap=torn)                                # incomplete
    _kill(ph, 5)
    _attempt(ph, 6, None, rc=9, snap=_snap([(20, True)], 20))                         # killed in start-up
    _kill(ph, 6)
    _attempt(ph, 7, None, rc=1, snap=_snap([(20, True), (30, False)], 30))            # crashed loading
    _attempt(ph, 8, _steps(21, 40, 20) + [{"train/iter": 40, "train/finished": True}], completed=True,
             snap=_snap([(20, True)], 20))
    v = survival.phase_verdict(ph.path)
    assert [r.outcome for r in v.restarts] == ["first", "newest", "older", "fresh", "incomplete", "startup_kill",
                                               "load_crash", "newest"]
    assert "5 step(s) lost beyond necessity" in v.restarts[2].text
    assert "ckpt-30" in v.restarts[6].text and "NOT complete" in v.restarts[6].text
    assert v.restarts[4].text == ("resumed from step 25, whose checkpoint was not complete at the launch "
                                  "(rng_state_1.pth not there (2 processes' RNG states))")  # what it lacked
    assert v.finished and len(v.findings) == 4


def test_crash_loop_unfinished_and_hung(tmp_path):
    ph = layout.Phase(str(tmp_path / "p"))
    _attempt(ph, 1, _steps(1, 5, 0), rc=9, snap=_snap([]))
    _kill(ph, 1)
    for k in (2, 3):
        _attempt(ph, k, None, rc=1, snap=_snap([(5, False)], 5))
    _attempt(ph, 4, None, rc=9, snap=_snap([(5, False)], 5))
    _kill(ph, 4)                                   # a kill in start-up does not break the count
    _attempt(ph, 5, None, rc=1, snap=_snap([(5, False)], 5))
    _attempt(ph, 6, None, rc=9, hang=True, snap=_snap([]))
    v = survival.phase_verdict(ph.path)
    assert any(f.startswith("crash loop") and "attempt 5" in f for f in v.findings)
    assert any(f.startswith("did not finish (no attempt reached the last step)") for f in v.findings)
    assert v.restarts[-1].outcome == "hung" and "trainer.program.progress" in v.restarts[-1].text


def test_a_crash_is_a_finding_a_lost_node_is_not(tmp_path):
    """An attempt that took steps and exited non-zero with nobody striking it crashed.

    That is a finding. The same end, with the next health check finding one of its nodes bad, died
    with its node. That is a failure restartlab recovers from, as PBS's node-loss test has it for
    real."""
    def phase(name, bad_node):
        ph = layout.Phase(str(tmp_path / name))
        _attempt(ph, 1, _steps(1, 12, 0), rc=255, snap=_snap([]))
        _attempt(ph, 2, _steps(11, 20, 10), completed=True, snap=_snap([(10, True)]))
        with open(ph.node_checks, "w") as f:
            for node, ok in (("n0", True), ("n1", not bad_node)):
                f.write(json.dumps({"attempt": 2, "node": node, "ok": ok}) + "\n")
            f.write(json.dumps({"attempt": 1, "node": "n1", "ok": False}) + "\n")  # before attempt 1: not its
        return survival.phase_verdict(ph.path)
    crashed = phase("crashed", False)
    assert [r.outcome for r in crashed.restarts] == ["crash", "newest"], crashed.restarts
    assert "crashed at step 12, exit 255, not killed by restartlab" in crashed.findings[0], crashed.findings
    lost = phase("lost", True)
    assert [r.outcome for r in lost.restarts] == ["first", "newest"] and not lost.findings, lost
    assert "ended with its node (n1 found bad at the next launch)" in lost.restarts[0].text


def test_against_the_baseline_identical_within_tolerance_or_diverged(tmp_path):
    base, ph = layout.Phase(str(tmp_path / "base")), layout.Phase(str(tmp_path / "p"))
    _attempt(base, 1, _steps(1, 20, 0), completed=True)
    _attempt(ph, 1, _steps(1, 12, 0), rc=9)
    _attempt(ph, 2, _steps(11, 20, 10), completed=True)
    assert survival.compare(_read(ph), _read(base)) == (None, "loss identical to the baseline's at all 20 steps both logged")
    ph2 = layout.Phase(str(tmp_path / "p2"))
    _attempt(ph2, 1, _steps(1, 12, 0), rc=9)
    _attempt(ph2, 2, _steps(11, 20, 10, loss=lambda s: 1.0 / s * (1 + 1e-9 * (s >= 15))), completed=True)
    finding, text = survival.compare(_read(ph2), _read(base))
    assert finding == "diverged" and "at step 15" in text
    assert survival.compare(_read(ph2), _read(base), tolerance=1e-6)[0] is None
    # a recomputed step counts with its last value: the first attempt's steps 11-12 are replaced
    ph3 = layout.Phase(str(tmp_path / "p3"))
    _attempt(ph3, 1, _steps(1, 12, 0, loss=lambda s: 9.0 if s > 10 else 1.0 / s), rc=9)
    _attempt(ph3, 2, _steps(11, 20, 10), completed=True)
    assert survival.compare(_read(ph3), _read(base))[0] is None


def test_torchtitan_adapter_on_recorded_lines_and_layout(tmp_path):
    """torchtitan needs GPUs, so its adapter is tested on recorded lines and its layout.

    The lines are in the format its source logs:
    - torchtitan/components/checkpoint.py and metrics.py at commit 0128b99;
    - components/checkpointer/dcp.py and metrics.py of torchtitan 0.3.0, read from its wheel."""
    s = programs.resolve({"adapter": "torchtitan"})
    assert programs.spec_errors(s) == []
    line = ("[rank0]:[titan] 2026-12-01 10:00:00,000 - root - INFO - \x1b[31mstep:  7  \x1b[32mloss:  9.8765  "
            "\x1b[33mgrad_norm:  1.2345  \x1b[34mmemory:  3.21GiB(4.05%)  \x1b[36mtps: 1,234  \x1b[35mmfu: 1.23%\x1b[39m")
    assert programs.parse_progress(s, programs.clean_line(line)) == programs.Progress(7, loss=9.8765)
    assert programs.parse_resumed(s, "[titan] ... - root - INFO - Loading the checkpoint at step 20.") == 20
    assert programs.parse_saved(s, "[titan] ... - root - INFO - Finished saving the checkpoint (or staging if async "
                                   "is enabled)in 1.23 seconds.") == programs.Saved(1.23, "save")
    d = str(tmp_path)
    mk(f"{d}/step-10/.metadata")
    mk(f"{d}/step-10/__0_0.distcp")
    mk(f"{d}/step-20/__0_0.distcp")                 # a save cut short: no .metadata yet
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(10, True), (20, False)]
    assert programs.will_load(s, ck, d).step == 10
    # torchtitan 0.3.0 (components/checkpointer/dcp.py) words them otherwise: the path it loads, and
    # saving or staging (async)
    assert programs.parse_resumed(s, f"[titan] ... - root - INFO - Loading the checkpoint from {d}/step-10.", ck) == 10
    assert programs.parse_saved(s, "[titan] ... INFO - Finished saving the checkpoint in 1.23 seconds.") == \
        programs.Saved(1.23, "save")
    assert programs.parse_saved(s, "[titan] ... INFO - Finished staging the checkpoint in 0.40 seconds.") == \
        programs.Saved(0.4, "stage")



TITAN = os.path.join(os.path.dirname(__file__), "data", "torchtitan")


def _titan_recorded(root):
    """The checkpoint folder torchtitan 0.3.0 left (tests/data/torchtitan/record.sh), rebuilt under `root`.

    Its .metadata is as torchtitan wrote it, and each shard is a sparse file of its size. Returns
    the folder's path at the recording."""
    recorded = None
    for line in open(os.path.join(TITAN, "listing.txt")):
        name, value = line.split()
        if name == "root":
            recorded = value
            continue
        path = os.path.join(root, os.path.relpath(name, "checkpoint"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.basename(name) == ".metadata":
            with open(os.path.join(TITAN, "step-0.metadata"), "rb") as src, open(path, "wb") as dst:
                dst.write(src.read())
            assert os.path.getsize(path) == int(value)
        else:
            with open(path, "wb") as f:
                f.truncate(int(value))
    return recorded


def test_torchtitan_adapter_on_what_torchtitan_030_wrote_and_logged(tmp_path):
    """torchtitan 0.3.0 run on this machine (record.sh): its seed checkpoint, then a relaunch beside
    a step-5 cut short. The adapter must list, judge and pick what torchtitan itself loaded, read
    its load line and its last-step save line."""
    s = programs.resolve({"adapter": "torchtitan"})
    d = str(tmp_path / "checkpoint")
    recorded = _titan_recorded(d)
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(0, True), (5, False)]
    load = open(os.path.join(TITAN, "load.log")).read().replace(recorded, d).splitlines()
    said = [programs.parse_resumed(s, programs.clean_line(x), ck) for x in load]
    said = [x for x in said if x is not None]
    assert said == [0]                                  # torchtitan's own words: it loaded step-0
    assert programs.will_load(s, ck, d).step == 0       # and so says the adapter, by its rule
    assert "NotImplementedError: FlexAttention does not support backward on CPU" in load[-1]
    seed = open(os.path.join(TITAN, "seed.log")).read().splitlines()
    saves = [programs.parse_saved(s, programs.clean_line(x)) for x in seed]
    saves = [x for x in saves if x is not None]
    assert len(saves) == 1 and saves[0].kind == "save" and 0 < saves[0].seconds < 60
    # the .metadata is DCP's own and names the shard the listing holds
    pytest.importorskip("torch")
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(os.path.join(d, "step-0")).read_metadata()
    files = {v.relative_path for v in md.storage_data.values()}
    assert files == {"__0_0.distcp"} and len(md.state_dict_metadata) > 10


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/restartlab-torchzip-pwned",))


HF_ARGS_2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "transformers", "training_args.bin")


def test_the_trainers_checkpoint_holds_every_processs_rng_state(tmp_path):
    """The Trainer's rank 0 writes trainer_state.json with no barrier for the other processes'
    rng_state_<r>.pth.

    A process late to begin its file leaves a folder with everything rank 0 writes. Its adapter's
    rule (file:trainer_state.json+torchzips+hfrngs) counts the processes from training_args.bin. It
    reads that file without running its pickle. The file is the one transformers 5.25.0 with
    accelerate 1.15.0 wrote for 2 processes (tests/data/transformers/). Its distributed_state says
    num_processes 2. When a folder is not complete, the rule says why."""
    import shutil
    from restartlab.programs import torchzip
    assert torchzip.read_attr_int(HF_ARGS_2, "PartialState", "num_processes") == 2
    d = str(tmp_path)
    s = programs.resolve({"adapter": "transformers", "command": ["x"], "steps": 30, "progress": r"step (?P<step>\d+)"})
    assert s.complete == "file:trainer_state.json+torchzips+hfrngs" and not programs.spec_errors(s)
    ck = f"{d}/checkpoint-10"
    for n in ("optimizer.pt", "scheduler.pt", "rng_state_0.pth"):
        _zip(f"{ck}/{n}")
    shutil.copy(HF_ARGS_2, f"{ck}/training_args.bin")
    mk(f"{ck}/trainer_state.json", "{}")
    assert programs.why_not_complete(s.complete, ck, 10, d) == "rng_state_1.pth not there (2 processes' RNG states)"
    assert [(c.step, c.complete) for c in programs.list_ckpts(s, d)] == [(10, False)]
    _zip(f"{ck}/rng_state_1.pth", whole=False)  # begun, cut short: torchzips says so
    assert programs.why_not_complete(s.complete, ck, 10, d) == "rng_state_1.pth cut short (its zip directory does not read)"
    _zip(f"{ck}/rng_state_1.pth")
    assert programs.why_not_complete(s.complete, ck, 10, d) is None
    with open(HF_ARGS_2, "rb") as f:
        data = f.read()
    with open(f"{ck}/training_args.bin", "wb") as f:
        f.write(data[: len(data) // 2])
    assert programs.why_not_complete(s.complete, ck, 10, d) == \
        "training_args.bin cut short: it does not say how many processes wrote their RNG states"
    os.unlink(f"{ck}/training_args.bin")  # not there yet: the other parts judge (rank 0 writes it before its state)
    assert programs.why_not_complete(s.complete, ck, 10, d) is None
    _zip(f"{ck}/training_args.bin", obj={"output_dir": d})  # whole, no distributed_state: not judged
    assert programs.why_not_complete(s.complete, ck, 10, d) is None
    one = f"{d}/checkpoint-20"  # one process: rng_state.pth, no count needed
    for n in ("optimizer.pt", "rng_state.pth", "training_args.bin"):
        _zip(f"{one}/{n}")
    mk(f"{one}/trainer_state.json", "{}")
    assert programs.why_not_complete(s.complete, one, 20, d) is None


def test_torchzip_reads_the_step_without_running_the_pickle(tmp_path):
    torch = pytest.importorskip("torch")
    from collections import OrderedDict

    from restartlab.programs import torchzip
    good = tmp_path / "last.ckpt"
    torch.save({"epoch": 1, "global_step": 42, "state_dict": OrderedDict(w=torch.ones(3)),
                "hyper": _Evil(), "loops": {"fit": {"step": 7}}}, good)
    if os.path.exists("/tmp/restartlab-torchzip-pwned"):
        os.unlink("/tmp/restartlab-torchzip-pwned")
    assert torchzip.read_step(str(good)) == 42
    assert not os.path.exists("/tmp/restartlab-torchzip-pwned")   # nothing the pickle names ran
    data = good.read_bytes()
    (tmp_path / "torn.ckpt").write_bytes(data[: len(data) // 2])  # a save cut short: no zip directory
    assert torchzip.read_step(str(tmp_path / "torn.ckpt")) is None
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    assert torchzip.read_step(str(tmp_path / "text.ckpt")) is None
    torch.save({"step": 5}, tmp_path / "s.pt")
    assert torchzip.read_step(str(tmp_path / "s.pt")) == 5


def test_in_flight_a_checkpoint_renamed_in_between_the_listings_is_not_a_save(tmp_path, monkeypatch):
    """The interleaving forced: a save renames its complete checkpoint into place after in_flight
    listed the checkpoints and before it scans the entries (as Lightning's and an atomic
    program's saves do, any time). The new checkpoint is complete: no save is in flight."""
    from restartlab.programs import base
    d = str(tmp_path)
    s = spec(complete="file:done")
    mk(f"{d}/.tmp-ckpt-5/state")
    mk(f"{d}/.tmp-ckpt-5/done")
    since = time.time() - 60
    real, calls = base._entries, []

    def rename_first(root, descend):
        calls.append(root)
        if len(calls) == 2:  # the first walk is the listing of checkpoints, the second the scan
            os.replace(f"{d}/.tmp-ckpt-5", f"{d}/ckpt-5")   # the save lands now
        return real(root, descend)
    monkeypatch.setattr(base, "_entries", rename_first)
    assert programs.in_flight(s, d, since) == []


def test_megatron_adapter_on_recorded_lines_and_layout(tmp_path):
    """Megatron-LM needs GPUs, so its adapter is tested on recorded lines and its layout.

    The lines are in the format its source prints (megatron/training/checkpointing.py at commit
    0032978, its training log). The layout includes the empty tracker file that a kill between its
    open and its write leaves."""
    s = programs.resolve({"adapter": "megatron"})
    assert programs.spec_errors(s) == []
    line = (" [2026-12-01 10:00:00] iteration      120/     500 | consumed samples:         3840 | elapsed time per "
            "iteration (ms): 812.3 | learning rate: 1.500000E-04 | global batch size:    32 | lm loss: 6.123456E+00 "
            "| loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |")
    assert programs.parse_progress(s, programs.clean_line(line)) == programs.Progress(120, loss=6.123456)
    assert programs.parse_resumed(s, "  successfully loaded checkpoint from /ckpt [ t 1/2, p 1/1 ] at iteration 100") == 100
    d = str(tmp_path)
    for n in (100, 200):
        mk(f"{d}/iter_{n:07d}/mp_rank_00/model_optim_rng.pt")
    mk(f"{d}/latest_checkpointed_iteration.txt", "100")
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(100, True), (200, False)]
    assert programs.will_load(s, ck, d).step == 100
    mk(f"{d}/latest_checkpointed_iteration.txt", "")
    ck = programs.list_ckpts(s, d)
    assert programs.newest_complete(ck) is None and programs.will_load(s, ck, d) is None


def test_ezpz_adapter_on_recorded_lines_and_layout(tmp_path):
    """ezpz's fsdp_tp needs a GPU or XPU, so its adapter is tested on recorded lines and its layout.

    The lines are in the format its source prints (saforem2/ezpz at 1229a17, 0.26.1):
    History.log_metrics's compact line, and the resume and save lines of examples/fsdp_tp.py.
    The layout:
    - step-<N> with .complete written last;
    - a re-save that has removed the stale marker;
    - the highest complete one loaded."""
    s = programs.resolve({"adapter": "ezpz"})
    assert programs.spec_errors(s) == []
    line = ("[2026-12-01 10:00:00,123456][I][examples/fsdp_tp:3643:train] iter=120   epoch=0 bidx=119 "
            "loss=6.123456(±0.012345) dt=0.456789(±0.001234) dtf=0.123456 dtb=0.333333 tokens=8192 "
            "tokens_seen=983040 tps=17934.512345 memory=12.3/64.0GB")
    assert programs.parse_progress(s, programs.clean_line(line)) == programs.Progress(120, loss=6.123456, dt=0.456789)
    nan = programs.parse_progress(s, "iter=7 epoch=0 bidx=6 loss=nan dtf=0.1")  # a NaN loss is kept; dtf is not dt
    assert nan.step == 7 and nan.loss != nan.loss and nan.dt is None
    assert programs.parse_resumed(s, "[I] RESUMED from step=100 (epoch=0, batch_offset=100, tokens_seen=8192)") == 100
    assert programs.parse_saved(s, "[I] train/ckpt_save_seconds=2.5000 (sync save @ step 100)") == \
        programs.Saved(2.5, "save", step=100)
    assert programs.parse_saved(s, "[I] train/ckpt_stage_seconds=0.2500 (async stage @ step 200)") == \
        programs.Saved(0.25, "stage", step=200)
    assert programs.parse_saved(s, "iter=101 loss=6.1 ckpt_save_seconds=2.5") is None  # the metric echoed: not a save
    d = str(tmp_path)
    for n in (100, 200, 300):
        mk(f"{d}/step-{n}/__0_0.distcp")
    mk(f"{d}/step-100/meta.json", '{"step": 100}')
    mk(f"{d}/step-100/.complete")
    mk(f"{d}/step-200/meta.json", '{"step": 200}')   # meta.json, killed before .complete
    ck = programs.list_ckpts(s, d)
    assert [(c.step, c.complete) for c in ck] == [(100, True), (200, False), (300, False)]
    assert programs.will_load(s, ck, d).step == programs.newest_complete(ck).step == 100


def test_save_interval_is_what_the_checkpoints_show():
    ck = lambda *steps: [programs.Ckpt(s, f"/c/{s}", True, 0.0) for s in steps]  # noqa: E731
    assert programs.save_interval(ck(5, 10, 15, 40)) == 5
    assert programs.save_interval(ck(30, 40)) == 10              # the ones a keep-last-k program kept
    assert programs.save_interval(ck(programs.UNKNOWN_STEP, 25)) == 25
    assert programs.save_interval(ck(programs.UNKNOWN_STEP)) is None and programs.save_interval([]) is None


def _follow(tmp_path, path, **kw):
    att = layout.Attempt(str(tmp_path / "1"))
    os.makedirs(att.path, exist_ok=True)
    t = tap.Tap(spec(progress=None, progress_file=path, **kw), att, 0.0, [programs.Ckpt(10, "x", True, 0.0)])
    return att, t, tap.Follow(path, t)


def test_follow_reads_a_jsonl_progress_file_as_it_grows(tmp_path):
    """The progress file appears after the launch and grows while it is read.

    - A record arrives in two writes and is read once, whole.
    - A line that is not JSON is skipped.
    - The console's step lines count for nothing."""
    path = str(tmp_path / "m.jsonl")
    att, t, f = _follow(tmp_path, path, progress_fields={"step": "train/iter", "loss": "train/loss"})
    f.poll()                                      # no file yet
    with open(path, "a") as out:
        out.write('{"train/iter": 11, "train/loss": 0.5}\n{"train/iter": 12, "tr')
    f.poll()
    assert t.last_step == 11                      # the half-written record waits
    with open(path, "a") as out:
        out.write('ain/loss": 0.25, "dt": 0.1}\nnot json\n{"train/iter": 13}\n')
    t.feed(b"step 99 loss 1.0\n", 5.0)            # progress comes from the file only
    f.stop()
    assert t.finish(0, last_step=13) is None
    rows = _rows(att)
    assert [r["train/iter"] for r in rows] == [11, 12, 13, 13]
    assert rows[0]["train/resumed_from"] == 10 and rows[0]["train/loss"] == 0.5
    assert rows[1]["train/loss"] == 0.25 and rows[1]["train/dt"] == 0.1


def test_follow_skips_an_earlier_attempts_records_and_restarts_on_a_rewrite(tmp_path):
    """A CSV that held an earlier attempt's rows at the launch.

    Those rows are skipped, but the header is read for the columns. When the program rewrites the
    file, it is read from its start."""
    path = str(tmp_path / "p.csv")
    mk(path, "step,train_loss\n1,3.0\n2,2.5\n")
    att, t, f = _follow(tmp_path, path, progress_fields={"loss": "train_loss"})
    with open(path, "a") as out:
        out.write("3,2.25\n")
    f.poll()
    assert t.last_step == 3 and t.rows == 1       # 1 and 2 were the earlier attempt's
    with open(path, "w") as out:                  # rewritten: shorter than what was read
        out.write("step,train_loss\n")
    f.poll()
    with open(path, "a") as out:
        out.write("4,2.0\n")
    f.stop()
    assert [r["train/iter"] for r in _rows(att)] == [3, 4]


def test_progress_file_keys_are_checked():
    assert programs.spec_errors(spec(progress=None, progress_file="{attempt_dir}/m.jsonl")) == []
    assert [k for k, _ in programs.spec_errors(spec(progress=None, progress_file="m.txt"))] == ["progress_file"]
    assert programs.spec_errors(spec(progress=None)) == []  # #63.6: the steps from the state probe
    errs = programs.spec_errors(spec(progress_file="m.csv", progress_fields={"iter": "x"}))
    assert errs == [("progress_fields", "iter: not one of step, loss, dt (each names the record's key or column "
                     "that holds it)")]
    assert programs.spec_errors(spec(progress_fields={"step": "x"})) == [("progress_fields", "only with progress_file")]


def test_a_relaunch_that_trains_past_the_last_step_is_a_finding(tmp_path):
    """#63.5: a program resumed at its final checkpoint that trains on is a finding of its own.

    The issue's Trainer run did this: resumed from checkpoint-80 with max_steps=80, it trained step
    81. The run's last step comes from the scenario. transformers 5.25.0 as run here trained no step
    the second time (examples/transformers/train.py run twice on one output dir, one epoch of data).
    So this test guards the rule."""
    ph = layout.Phase(str(tmp_path / "p"))
    _attempt(ph, 1, _steps(1, 20, 0), rc=137, snap=_snap([(20, True)]))
    _attempt(ph, 2, _steps(21, 21, 20) + [{"train/iter": 21, "train/finished": True}], completed=True,
             snap=_snap([(20, True)], 20))
    v = survival.phase_verdict(ph.path, last_step=20)
    assert v.restarts[1].outcome == "past_last" and v.restarts[1].text.endswith(
        "then trained past the last step (step 21 of 20: it resumed at the final checkpoint)"), v
    assert any(f.startswith("attempt 2: ") and "trained past the last step" in f for f in v.findings), v
    assert survival.phase_verdict(ph.path).restarts[1].outcome != "past_last"  # no last step given: not judged


@pytest.mark.parametrize("how, finding, words", [
    ("crash", True, "then finished (step 20) and crashed at exit, "),
    ("hang", True, "then finished (step 20) and hung at exit: the watchdog stopped it"),
    ("struck", False, "then finished (step 20) and was struck before its exit"),
    ("struck_earlier", True, "then finished (step 20) and crashed at exit, "),
])
def test_a_finished_attempt_that_ended_badly(tmp_path, how, finding, words):
    """#63.5: the last step reached, then a crash or a hang at exit.

    - That is a finding of the program's (not "a crash").
    - A strike of ours after the last step is not a finding.
    - A strike before it (a fault the attempt survived) does not hide a crash at exit."""
    ph = layout.Phase(str(tmp_path / "p"))
    rows = _steps(1, 20, 0) + [{"train/iter": 20, "train/finished": True}]
    _attempt(ph, 1, rows, rc=134, completed=True, snap=_snap([]), hang=how == "hang")
    if how.startswith("struck"):
        with open(ph.injections, "a") as f:  # by time: after its last step (120 s), or at 105 s
            f.write(json.dumps({"time": 130.0 if how == "struck" else 105.0, "killed": 1}) + "\n")
    v = survival.phase_verdict(ph.path)
    assert v.finished and len(v.restarts) == 1 and words in v.restarts[0].text, v
    assert bool(v.findings) == finding and (v.restarts[0].outcome == "exit_crash") == finding, v
