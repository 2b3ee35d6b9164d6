"""Room on a file system before a job writes there: free bytes (statvfs) where a directory will
be, and the user's Lustre quota (`lfs quota`) where Lustre's tools exist. Reads only."""
import getpass
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional, Tuple


def existing_ancestor(path: str) -> str:
    """`path`, or its nearest parent that exists (where a directory still to be made will be)."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p


@dataclass
class Room:
    path: str                 # the directory measured (the nearest that exists)
    free: int                 # bytes an ordinary user may still write there (statvfs f_bavail)
    writable: bool
    quota_left: Optional[int] = None  # bytes left under the user's Lustre quota (None: none known)
    quota_text: str = ""

    @property
    def usable(self) -> int:
        return self.free if self.quota_left is None else min(self.free, self.quota_left)


def parse_lfs_quota(text: str) -> Optional[Tuple[int, int]]:
    """`lfs quota -u USER PATH` -> (used, hard limit) in bytes, None without a limit. The layout is
    Lustre's manual's (a 'Filesystem kbytes quota limit grace files ...' header, then the values;
    a value over its quota ends in '*'); not run here (no Lustre on this machine): unverified."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"\bkbytes\b", line) and "limit" in line:
            rest = " ".join(lines[i + 1:i + 3]).split()
            nums = [x.rstrip("*") for x in rest if re.fullmatch(r"\d+\*?", x)]
            if len(nums) >= 3:
                used, _soft, hard = (int(x) * 1024 for x in nums[:3])
                return (used, hard) if hard else None
    return None


def room(path: str, run=subprocess.run) -> Room:
    at = existing_ancestor(path)
    st = os.statvfs(at)
    r = Room(at, st.f_bavail * st.f_frsize, os.access(at, os.W_OK | os.X_OK))
    if shutil.which("lfs"):
        try:
            p = run(["lfs", "quota", "-u", getpass.getuser(), at], capture_output=True, text=True, timeout=60)
            q = parse_lfs_quota(p.stdout) if p.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            q = None
        if q:
            r.quota_left, r.quota_text = max(0, q[1] - q[0]), f"lfs quota -u {getpass.getuser()} {at}"
    return r
