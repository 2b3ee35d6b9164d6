"""A verb starts with its own modules only.

A job script starts `restartlab supervise`, `inject`, `kill-ranks` and `report` many times. The
suite starts about 1,100 of them (tests/cpu_account.py). When each built the parser of every verb,
each imported the scenario package, preflight, fuzz and Jinja. That cost about 0.13 CPU-s a process
here (supervise --help: 0.31 -> 0.10 CPU-s). The parser built for one verb must say and parse exactly
what the whole parser does. The errors main() turns into one line must still be caught when their
module is loaded."""
import json
import subprocess
import sys

import pytest

from restartlab import cli

# what no verb of the job script's needs (each was imported by every verb before)
HEAVY = ("restartlab.scenario", "restartlab.job.preflight", "restartlab.fuzz", "jinja2", "yaml")


def _imported_by(verb):
    """What `restartlab VERB --help` imported, through main() as the job script runs it.

    --help exits from inside the parse, so the list is printed at the interpreter's exit."""
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules])))\n"
            f"from restartlab import cli\ncli.main([{verb!r}, '--help'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("verb", ["supervise", "inject", "kill-ranks", "node-check", "report", "teardown"])
def test_a_job_scripts_verb_does_not_import_what_it_does_not_use(verb):
    assert _imported_by(verb) == []


def test_a_scenario_verb_still_gets_what_it_needs():
    # the check above is not vacuous: the same probe sees the modules a verb does use
    assert set(_imported_by("preflight")) >= {"restartlab.job.preflight", "restartlab.scenario"}


def _sub(parser):
    return next(a for a in parser._actions if a.dest == "verb").choices


@pytest.mark.parametrize("verb", sorted(cli.VERB_ARGS))
def test_one_verbs_parser_is_the_whole_parsers(verb):
    alone, whole = _sub(cli.build_parser(only=verb))[verb], _sub(cli.build_parser())[verb]
    assert alone.format_help() == whole.format_help()
    assert [(a.dest, a.option_strings, a.default, a.choices) for a in alone._actions] == \
        [(a.dest, a.option_strings, a.default, a.choices) for a in whole._actions]


def test_the_top_level_help_lists_every_verb():
    assert set(_sub(cli.build_parser(only="supervise"))) == set(cli.VERB_ARGS)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "nosuchverb"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'nosuchverb'" in r.stderr and "supervise" in r.stderr


def test_a_scenario_error_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntrainer: {train_iterz: 3}\n")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "render", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "train_iterz" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_scheduler_error_is_one_line_and_exit_1(tmp_path):
    # a job id the scheduler's query tool cannot be run for: SchedulerError, caught in main()
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", "slurm", "123"],
                       capture_output=True, text=True, env={"PATH": str(tmp_path)})
    assert r.returncode == 1 and r.stderr.startswith("restartlab status: ") and "Traceback" not in r.stderr, r.stderr


def test_errors_of_an_unloaded_module_are_caught_by_nothing():
    assert cli._loaded("no.such.module", "X") == ()
    assert cli._loaded("contracts.units", "parse_duration")  # a loaded one is found
