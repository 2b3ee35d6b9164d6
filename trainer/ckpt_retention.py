"""The retention policy: prune the checkpoints beyond --keep, behind the saves.

After a checkpoint is complete, the ones beyond --keep go out of sight at once. ckptdir.prune
renames them away. Their files are deleted on a thread of their own behind the saves. So deleting
an old checkpoint's files is nobody's wait. Measured with 2 ranks, it was 50-70 ms of a 0.4 s save
of 300 MB. A kill mid-delete leaves a trash tree for the next prune."""
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from restartlab.contracts import ckptdir
from restartlab.trainer.testpoints import delay


class Retention:
    def __init__(self, ckpt_dir: str, keep: int, rank: int, timeout: Callable[[], float]):
        self.ckpt_dir, self.keep, self.rank, self.timeout = ckpt_dir, keep, rank, timeout
        self._deleter, self._deleting = None, None

    def after_complete(self, step: int) -> None:
        """Rank 0, once `step` is marked complete: keep the newest `keep` (0: all)."""
        if self.keep > 0:
            self.wait()  # the last prune's trees (it has had a save interval to go)
            ckptdir.prune(self.ckpt_dir, self.keep, delete=lambda trees: self._delete_behind(trees, step))

    def _delete_behind(self, trees, step):
        if not trees:
            return
        if self._deleter is None:
            self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-prune")

        def delete():
            delay("prune-delete", step, self.rank)
            ckptdir.remove_trees(trees)
        self._deleting = self._deleter.submit(delete)

    def wait(self) -> None:
        if self._deleting is not None:
            self._deleting.result(timeout=self.timeout())
            self._deleting = None

    def close(self) -> None:
        """The last prune's deletions, waited for."""
        self.wait()
        if self._deleter:
            self._deleter.shutdown(wait=True)
