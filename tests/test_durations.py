"""tests/durations.py: the test time by file that make test prints, from JUnit reports."""
from tests import durations

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="x" time="2.5"/><testcase classname="tests.test_a" name="y" time="1.0"/>
<testcase classname="tests.test_b" name="z" time="7.25"/></testsuite></testsuites>"""


def test_sums_by_file_most_first(tmp_path, capsys):
    (tmp_path / "p.xml").write_text(XML)
    (tmp_path / "q.xml").write_text(XML.replace('time="7.25"', 'time="0.75"'))
    assert durations.main([str(tmp_path / "p.xml"), str(tmp_path / "q.xml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["8.0", "2", "tests/test_b.py"]
    assert lines[2].split() == ["7.0", "4", "tests/test_a.py"]
    assert lines[3].split()[:2] == ["15.0", "6"]


def test_a_missing_or_broken_report_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "bad.xml").write_text("<testsuites>")
    assert durations.main([str(tmp_path / "bad.xml")]) == 2
    assert durations.main([str(tmp_path / "none.xml")]) == 2
    assert durations.main([]) == 2
    assert "Traceback" not in capsys.readouterr().err
