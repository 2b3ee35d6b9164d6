"""The checkpoint-directory contract without torch: retention (`--keep`) under kills."""
import os

from restartlab.contracts import ckptdir


def _fake(ckpt, step, complete=True):
    d = ckptdir.step_path(ckpt, step)
    os.makedirs(d)
    with open(os.path.join(d, "__0_0.distcp"), "wb") as f:
        f.write(b"x" * 100)
    if complete:
        ckptdir.mark_complete(d, ckptdir.Marker(step))


def test_prune_keeps_the_newest_and_never_leaves_a_half_deleted_step(tmp_path):
    ck = str(tmp_path)
    for s in (3, 6, 9, 12):
        _fake(ck, s)
    _fake(ck, 5, complete=False)     # torn, older than the newest complete: goes
    _fake(ck, 15, complete=False)    # newer than the newest complete: a save may be in flight
    # What a prune killed mid-delete left behind. It was renamed out of sight first, so it is never a step.
    os.makedirs(os.path.join(ck, ckptdir.TRASH_PREFIX + ckptdir.step_dirname(2), "sub"))
    assert ckptdir.list_steps(ck) == [3, 5, 6, 9, 12, 15]
    assert sorted(ckptdir.prune(ck, 2)) == [3, 5, 6]
    assert ckptdir.complete_steps(ck) == [9, 12] and ckptdir.list_steps(ck) == [9, 12, 15]
    assert not [n for n in os.listdir(ck) if n.startswith(ckptdir.TRASH_PREFIX)]


def test_prune_puts_every_doomed_step_out_of_sight_before_it_hands_them_to_delete(tmp_path):
    """The trainer deletes behind the save.

    `delete` gets trees that are no step any more, and nothing is deleted until it runs.
    A kill before then leaves trash for the next prune."""
    ck = str(tmp_path)
    for s in (3, 6, 9):
        _fake(ck, s)
    killed = os.path.join(ck, ckptdir.TRASH_PREFIX + ckptdir.step_dirname(3))  # same name as a doomed one
    os.makedirs(os.path.join(killed, "sub"))
    seen = []

    def delete(trees):
        assert ckptdir.list_steps(ck) == [9] and ckptdir.complete_steps(ck) == [9]
        assert all(os.path.isdir(t) for t in trees)
        seen.extend(trees)
    assert sorted(ckptdir.prune(ck, 1, delete=delete)) == [3, 6]
    assert sorted(os.path.basename(t) for t in seen) == sorted(
        ckptdir.TRASH_PREFIX + ckptdir.step_dirname(s) for s in (3, 6))
    assert os.path.exists(os.path.join(killed, "__0_0.distcp"))  # step 3's files now, the old trash gone
    ckptdir.remove_trees(seen)
    assert os.listdir(ck) == [ckptdir.step_dirname(9)]
