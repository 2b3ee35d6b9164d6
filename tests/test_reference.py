"""The generated reference pages (docs/reference/, restartlab/reference.py) match the code.

A change to the schema, a parser, a registry or the layout that the committed pages do not show
fails here. To regenerate: python -m restartlab.reference docs/reference."""
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
    """Each row of the targets table finds its figures in the committed bench/results.json.

    A renamed key in a benchmark's output shows here, not as a blank cell."""
    from restartlab.contracts import bench_results
    data = bench_results.read(os.path.join(ROOT, "bench", "results.json"))
    rows = reference.targets_table(data)[2:]
    assert len(rows) == len(reference.TARGETS) and not [r for r in rows if "not in this run" in r], rows
    assert len(reference.scaling_table(data)) == 2 + 3   # tiny, debug, small


def test_the_size_sweep_table_has_both_floors_for_every_series():
    """bench/ckpt_sizes.py's table gives each series' per-byte ratio to two floors.

    The floors are its dd floor and the memory floor (the same tensors written from and read into
    memory). Each floor is a row of its own."""
    from restartlab.contracts import bench_results
    data = bench_results.read(os.path.join(ROOT, "bench", "results.json"))
    rows = [r for r in reference.ckpt_sizes_table(data) if r.startswith("| ") and not r.startswith("| series")]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    floors = [c[0] for c in cells if c[3] == "floor"]
    series = [c for c in cells if c[3] != "floor"]
    assert "write floor from memory (the tensors, fsync)" in floors and len(floors) == 6, floors
    assert series and all(float(c[3]) > 0 and float(c[4]) > 0 for c in series), series


def test_the_size_fit_recovers_a_line():
    import importlib.util
    import sys
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        spec = importlib.util.spec_from_file_location("ckpt_sizes", os.path.join(ROOT, "bench", "ckpt_sizes.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    fixed, bw, worst = mod.fit([(n, 0.25 + n / 2e9) for n in (3e8, 8e8, 1.6e9, 2.6e9)])
    assert abs(fixed - 0.25) < 1e-9 and abs(bw - 2e9) < 1 and worst < 1e-9


def test_a_docstrings_paragraphs_and_lists_stay_markdown():
    """An adapter's or a layout class's docstring on its reference page.

    Each paragraph is one line. A "- " list stays a list, and its indented lines are part of the
    item above. Blank lines go between."""
    from restartlab.reference import markdown
    doc = """Lead line
    wrapped here. The order:
    - one,
      still one;
    - two.
    After the list.

    Old style: one paragraph
    over two lines."""
    assert markdown(doc) == ["Lead line wrapped here. The order:", "", "- one, still one;", "- two.", "",
                             "After the list.", "", "Old style: one paragraph over two lines."]


def test_placeholders_show_as_text_outside_code():
    """Markdown reads `<N>` as an HTML tag and the page then shows nothing there: the heading
    `<expt>/<phase>/` read `//`. Outside code the generator writes them as text; code keeps them."""
    page = "## <expt>/<phase>/\ncheckpoint-<N> and `step-<N>`, (?P<step>\\d+)\n```text\n--expt-dir  <expt_root>/<name>\n```"
    assert reference.escape_placeholders(page).split("\n") == [
        "## &lt;expt&gt;/&lt;phase&gt;/", "checkpoint-&lt;N&gt; and `step-<N>`, (?P&lt;step&gt;\\d+)",
        "```text", "--expt-dir  <expt_root>/<name>", "```"]
    assert reference.escape_placeholders("<!-- a comment --> a < b > c") == "<!-- a comment --> a < b > c"
    for name, make in reference.PAGES.items():
        outside = re.sub(r"```.*?```|`[^`\n]*`", "", reference.HEADER + reference.escape_placeholders(make()),
                         flags=re.S)
        assert not reference.PLACEHOLDER.search(outside), (name, reference.PLACEHOLDER.search(outside))
