"""The checkpoint bytes the run keeps against the free space and quota where it writes, and where
it writes (a site's project space, not $HOME)."""
import os

from .. import sizing, storage
from ...contracts.units import human_bytes
from . import ERROR, OK, WARNING, Check

WARN_SHARE = 0.5  # a run that would take more than this share of what is free is a warning


class StorageCheck(Check):
    def run(self):
        phases = sizing.phase_bytes(self.sc)
        root = self.pf.root
        home = os.path.realpath(self.env.get("HOME", "~"))
        in_home = os.path.realpath(storage.existing_ancestor(root)).startswith(home.rstrip("/") + "/")
        unknown = [p.phase for p in phases if p.peak is None]
        if unknown:
            self.add(WARNING, "bytes", f"{self.key('trainer', 'program', 'checkpoint_bytes')}: the checkpoints of "
                     f"phase(s) {', '.join(unknown)} cannot be sized: set trainer.program.checkpoint_bytes (one "
                     f"checkpoint, e.g. 24GB) and save_every, and preflight checks they fit")
        total = sum(p.peak or 0 for p in phases)
        account = self.sc.job.account
        try:
            r = storage.room(root, project=account)
        except storage.NotMounted as e:
            whose = f"{self.sc.site.name}'s" if self.sc.site.name else "this site's"
            self.add(ERROR, "where", f"{self.key('expt_root')}: {root}: {e.strerror}: its file system is not mounted "
                     f"here (not {whose} login node?): neither the space nor the quota could be measured")
            return
        except OSError as e:
            self.add(ERROR, "where", f"{self.key('expt_root')}: cannot look at {root}: {e.strerror}")
            return
        if not r.writable:
            self.add(ERROR, "where", f"{self.key('expt_root')}: {root} cannot be created: {r.path} is not writable "
                     "by you")
        if in_home and self.sc.site.project_root:
            proj = self.sc.site.project_root
            self.add(WARNING, "where", f"{self.key('expt_root')}: {root} is under $HOME ({home}); the run keeps up "
                     f"to {human_bytes(total)} of checkpoints there. {self.site}'s project space is "
                     f"{proj}: set expt_root: {proj}/restartlab")
        proj = self.sc.site.project_root
        if proj and account and "{account}" in proj:
            mine = proj.replace("{account}", account)
            under = os.path.abspath(root).startswith(os.path.abspath(mine).rstrip("/") + "/")
            if under and not os.path.isdir(mine) and os.path.isdir(os.path.dirname(mine.rstrip("/"))):
                self.add(ERROR, "where", f"{self.key('job', 'account')}: {mine} does not exist: is {account} your "
                         f"project's short name (as `myprojectquotas` lists it)?")
        for said in r.not_read:
            self.add(WARNING, "bytes", f"{said}: no quota could be read from it: that quota was not checked")
        if not r.quotas and not r.not_read and proj:
            self.add(WARNING, "bytes", f"no quota tool here (myprojectquotas, lfs): {self.site}'s project quota was "
                     "not checked, only the free space")
        if total == 0:
            return
        detail = "; ".join(f"{p.phase}: {p.kept} x {human_bytes(p.per_save)} ({p.why})" for p in phases
                           if p.peak is not None)
        left = r.usable
        what = f"{human_bytes(left)} free at {r.path}" + (f" (quota: {r.quota_text})" if r.quota_left is not None
                                                          else "")
        keep_at = self.key("trainer", "program", "checkpoint_bytes") if self.sc.trainer.program \
            else self.key("trainer", "keep")
        if total > left:
            self.add(ERROR, "bytes", f"{keep_at}: the run keeps up to {human_bytes(total)} of checkpoints "
                     f"({detail}) but {what}: free space, keep fewer (trainer.keep), or write elsewhere (expt_root)")
        elif total > WARN_SHARE * left:
            self.add(WARNING, "bytes", f"{keep_at}: the run keeps up to {human_bytes(total)} of checkpoints "
                     f"({detail}): more than {WARN_SHARE:.0%} of the {what}")
        else:
            self.add(OK, "bytes", f"up to {human_bytes(total)} of checkpoints ({detail}); {what}")
