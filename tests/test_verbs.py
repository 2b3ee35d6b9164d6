"""The processes restartlab starts of itself are named in one table (restartlab/tools/verbs.py).

Each entry is checked against what it names:
- A CLI verb against the CLI's own parser: the subcommand, and every flag of its option table.
- A module against the tree: it exists and runs as a program.
- The job script's templates against the table.

No other module spells one of those module names. A renamed verb or flag then fails here, not in
a job on a cluster (#50)."""
import glob
import importlib.util
import os
import re

import pytest

from restartlab import cli
from restartlab.tools import verbs
from tests import source_scan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def problems(table):
    """What is wrong with each entry of a verbs table, in words."""
    out = []
    for name, v in table.items():
        if v.module == verbs.CLI:
            try:
                parser = cli.verb_parser(v.sub)
            except (StopIteration, KeyError):
                out.append(f"{name}: the CLI has no verb {v.sub!r}")
                continue
            flags = set(parser._option_string_actions)
            for o in (getattr(verbs.options_module(), v.table) if v.table else []):
                if o.flag not in flags:
                    out.append(f"{name}: `restartlab {v.sub}` takes no {o.flag} (its table {v.table} has it)")
            continue
        spec = importlib.util.find_spec(v.module)
        if spec is None:
            out.append(f"{name}: no module {v.module}")
        elif spec.submodule_search_locations is not None:
            if importlib.util.find_spec(v.module + ".__main__") is None:
                out.append(f"{name}: {v.module} is a package without __main__")
        else:
            with open(spec.origin) as f:
                if not re.search(r"""^if __name__ == ["']__main__["']:""", f.read(), re.M):
                    out.append(f"{name}: {v.module} does not run as a program")
    return out


def test_every_verb_is_what_it_names():
    assert problems(verbs.VERBS) == []


def test_a_renamed_verb_or_flag_or_module_fails():
    bad = {"inject": verbs.Verb(verbs.CLI, "injects", "INJECT"),          # a verb the CLI does not have
           "teardown": verbs.Verb(verbs.CLI, "teardown", "SUPERVISE"),    # flags its parser does not take
           "rankexit": verbs.Verb("restartlab.runtime.rank_exit"),         # a module that is not there
           "envvars": verbs.Verb("restartlab.contracts.envvars")}          # a module that is no program
    found = problems(bad)
    assert [p.split(":")[0] for p in found][:2] == ["inject", "teardown"] and len(found) >= 4, found
    assert any(p.startswith("rankexit: no module") for p in found) and found[-1].startswith("envvars: ")


def test_the_templates_call_only_listed_verbs():
    listed = {(v.module, v.sub) for v in verbs.VERBS.values()}
    calls = []
    for path in glob.glob(os.path.join(ROOT, "templates", "*.j2")):
        with open(path) as f:
            text = f.read()
        for module, rest in re.findall(r"-m (restartlab[\w.]*)((?: [\w-]+)?)", text):
            sub = rest.strip() if module == verbs.CLI else None
            calls.append((os.path.basename(path), module, sub))
    assert calls and all((m, s) in listed for _, m, s in calls), [c for c in calls if c[1:] not in listed]


MODULES = {v.module for v in verbs.VERBS.values()}
OWNERS = {os.path.join("restartlab", "tools", "verbs.py")}


def spelled(path):
    return [(line, v) for line, v in source_scan.constants(source_scan.parse(path)) if v in MODULES]


def test_no_module_spells_a_process_it_starts_but_the_table():
    found = [f"{rel}:{line}: {v!r}" for rel in source_scan.modules(OWNERS) for line, v in spelled(os.path.join(ROOT, rel))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("code", ['argv = [sys.executable, "-m", "restartlab.cli", "inject"]',
                                  'RECORDER = ("-m", "restartlab.runtime.rankexit")'])
def test_the_spelling_check_can_fail(tmp_path, code):
    f = tmp_path / "m.py"
    f.write_text(code + "\n")
    assert spelled(str(f))
