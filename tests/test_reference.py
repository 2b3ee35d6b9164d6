"""The generated reference pages (docs/reference/, restartlab/reference.py) match the code: a
change to the schema, a parser, a registry or the layout that the committed pages do not show
fails here (regenerate: python -m restartlab.reference docs/reference)."""
import os
import re

from restartlab import failures, programs, reference, scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "docs", "reference")


def test_committed_pages_are_current():
    assert reference.main([REF, "--check"]) == 0, "regenerate: python -m restartlab.reference docs/reference"


def test_every_scenario_key_is_in_the_reference():
    page = reference.scenario_keys()

    def keys(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from keys(v, path + [k])
        elif isinstance(node, scenario.ListOf) and isinstance(node.item, dict):
            yield from keys(node.item, path + ["[i]"])
        else:
            yield ".".join(path)
            if getattr(node, "kind", None) == "program":
                yield from keys(scenario.PROGRAM, path)
    found = set(re.findall(r"^\| `([^`]+)` \|", page, re.M))
    missing = [k for k in keys(scenario.SCHEMA, []) if k not in found]
    assert not missing and "trainer.program.progress_file" in found, missing


def test_registries_are_in_their_pages():
    assert all(f"## {a.name}\n" in reference.adapters() for a in programs.ADAPTERS.all())
    assert all(f"| `{k.name}` |" in reference.failure_kinds() for k in failures.KINDS.all())
    assert "`<expt>/<phase>/attempts/<k>/ckpts-at-launch.json`" in reference.layout_tree()


def test_the_benchmark_tables_read_every_figure_they_name():
    """Each row of the targets table finds its figures in the committed bench/results.json (a
    renamed key in a benchmark's output shows here, not as a blank cell)."""
    import json
    with open(os.path.join(ROOT, "bench", "results.json")) as f:
        data = json.load(f)
    rows = reference.targets_table(data)[2:]
    assert len(rows) == len(reference.TARGETS) and not [r for r in rows if "not in this run" in r], rows
    assert len(reference.scaling_table(data)) == 2 + 3   # tiny, debug, small
