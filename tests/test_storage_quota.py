"""The project's quota, not only the file system's free space.
Preflight reads ALCF's `myprojectquotas` and Lustre's `lfs quota -p/-g/-u` where they are. It
refuses a run whose checkpoints would not fit the smallest room left.

Neither tool exists here (no Lustre, not an ALCF login node), so stand-ins on PATH print their
layouts. `myprojectquotas`'s is ALCF's, verbatim from argonne-lcf/user-guides at 7d04a3f9,
docs/data-management/filesystem-and-storage/disk-quota.md:39-43. The first test prints that block
unchanged. The others keep its layout and set the numbers. `lfs`'s is Lustre's manual's.

A path whose file system is not mounted is an error, not a check of the nearest directory that
exists."""
import os
import textwrap

from restartlab.job import preflight, storage
from tests.test_preflight import check, found, no_probe, scen

# docs/data-management/filesystem-and-storage/disk-quota.md:39-43 at 7d04a3f9, verbatim
ALCF_BLOCK = """Lustre : Current Project Quota information for projects you're a member of:

Name                       Type        Filesystem          Used             Quota           Grace
==============================================================================================================
projectX                  Project      eagle                1.87T             1000T            -
"""


def stand_in(bindir, name, body):
    p = bindir / name
    p.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    p.chmod(0o755)


def project_scenario(tmp_path, account="projectX", gb_per_save=1, saves=20):
    """A run keeping `saves` x `gb_per_save` GB in `account`'s space under a site project root."""
    (tmp_path / "projects" / "projectX").mkdir(parents=True, exist_ok=True)
    root = tmp_path / "projects" / "{account}"
    body = (f"site: {{name: ALCF Testsite, project_root: '{root}'}}\njob: {{account: {account}}}\n"
            "trainer:\n  program:\n    command: [python, /bin/true]\n    progress: 'step (?P<step>\\d+)'\n"
            f"    checkpoints: '{{ckpt_dir}}/c-(?P<step>\\d+)'\n    steps: {saves}\n    save_every: 1\n"
            f"    checkpoint_bytes: {gb_per_save}GB\nphases: [{{name: a, checkpoint: sync}}]\n")
    path = scen(tmp_path, body)
    return path, [f"expt_root={tmp_path}/projects/{account}/restartlab"]


def with_tools(tmp_path, monkeypatch, **tools):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in tools.items():
        stand_in(bindir, name, body)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_alcfs_own_myprojectquotas_block_is_read_and_named(tmp_path, monkeypatch):
    with_tools(tmp_path, monkeypatch, myprojectquotas=f"cat <<'EOF'\n{ALCF_BLOCK}EOF\n")
    path, sets = project_scenario(tmp_path)
    f = check(path, sets, probe_fn=no_probe)
    assert not found(f, check_="bytes"), [x.line() for x in f]
    (ok,) = found(f, preflight.OK, "bytes")
    # the page's row is on eagle; this test's path is under /tmp: the only row is taken, and that is said
    assert "(quota: myprojectquotas (projectX on eagle; its only row, and this path is on tmp): 2.1 TB used of " \
        "1.1 PB)" in ok, ok
    assert storage.parse_myprojectquotas(ALCF_BLOCK, "projectX") == (int(1.87 * 1024 ** 4), 1000 * 1024 ** 4, "eagle")


def test_a_project_quota_smaller_than_the_run_is_refused(tmp_path, monkeypatch):
    # Flare's default project quota, 1 TB (getting-started-on-aurora.md:95), nearly used up
    with_tools(tmp_path, monkeypatch, myprojectquotas="cat <<'EOF'\n" + ALCF_BLOCK.replace(
        "projectX                  Project      eagle                1.87T             1000T",
        "projectX                  Project      flare                0.99T                1T") + "EOF\n")
    path, sets = project_scenario(tmp_path)
    (err,) = found(check(path, sets, probe_fn=no_probe), check_="bytes")
    assert "the run keeps up to 20.0 GB of checkpoints" in err and \
        "but 11.0 GB free at" in err and "(quota: myprojectquotas (projectX on flare; its only row, and this path is on tmp): 1.1 TB used of " \
        "1.1 TB)" in err, err


def test_lustres_project_quota_by_the_directorys_project_id(tmp_path, monkeypatch):
    # Lustre's manual's layouts: `lfs project -d DIR` ('PROJID P DIR'), `lfs quota` (kbytes, quota, limit ...)
    with_tools(tmp_path, monkeypatch, lfs="""\
        if [ "$1" = project ]; then echo "   1001 P $3"; exit 0; fi
        lim=0; used=4; [ "$2" = -p ] && [ "$3" = 1001 ] && { used=1048576; lim=2097152; }
        echo "Disk quotas for x $3 (id $3):"
        echo "     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace"
        echo "     $4  $used       0 $lim       -     12       0       0       -"
        """)
    path, sets = project_scenario(tmp_path, gb_per_save=1, saves=2)
    (err,) = found(check(path, sets, probe_fn=no_probe), check_="bytes")
    at = tmp_path / "projects" / "projectX"
    assert f"but 1.1 GB free at {at} (quota: lfs quota -p 1001 {at}: 1.1 GB used of 2.1 GB)" in err, err


def test_a_quota_tool_that_answers_nothing_readable_is_said(tmp_path, monkeypatch):
    with_tools(tmp_path, monkeypatch, myprojectquotas="echo 'Lustre : no projects'\n")
    path, sets = project_scenario(tmp_path, saves=1)
    warns = found(check(path, sets, probe_fn=no_probe), preflight.WARNING, "bytes")
    assert warns == ["myprojectquotas (no row for projectX with a quota): no quota could be read from it: that quota "
                     "was not checked"], warns  # and no second line saying there is no quota tool


def test_without_a_quota_tool_the_project_quota_is_said_unchecked(tmp_path):
    path, sets = project_scenario(tmp_path, saves=1)
    warns = found(check(path, sets, probe_fn=no_probe), preflight.WARNING, "bytes")
    assert warns == ["no quota tool here (myprojectquotas, lfs): ALCF Testsite's project quota was not checked, "
                     "only the free space"], warns


def test_a_file_system_that_is_not_mounted_is_an_error_not_a_check_of_root(tmp_path):
    path = scen(tmp_path, "")
    (err,) = found(check(path, ["expt_root=/lus/nosuchfs/projects/P/restartlab"], probe_fn=no_probe), check_="where")
    assert err == ("--set expt_root: /lus/nosuchfs/projects/P/restartlab: /lus does not exist on this machine: its "
                   "file system is not mounted here (not this site's login node?): neither the space nor the "
                   "quota could be measured"), err


def test_a_project_directory_that_is_not_there_names_the_account(tmp_path):
    path, sets = project_scenario(tmp_path, account="projectY", saves=1)
    (err,) = found(check(path, sets, probe_fn=no_probe), check_="where")
    assert err == (f"{path}:5: job.account: {tmp_path}/projects/projectY does not exist: is projectY your "
                   "project's short name (as `myprojectquotas` lists it)?"), err
