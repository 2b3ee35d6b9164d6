"""Room on a file system before a job writes there: free bytes (statvfs) where a directory will
be, and every quota that limits it where the tools to read them exist: the project's (ALCF's
`myprojectquotas`; Lustre's `lfs quota -p` by the directory's project id and `-g` by its group)
and the user's (`lfs quota -u`). The smallest room left is what the run may use. Reads only.

On ALCF a project's space is limited by a project quota, not a user one: "These project spaces do
not have user quotas but a directory quota" (argonne-lcf/user-guides at 7d04a3f9,
docs/data-management/filesystem-and-storage/index.md:76); Flare's default is 1 TB
(docs/aurora/getting-started-on-aurora.md:95). ALCF documents `myprojectquotas` and its output
(docs/data-management/filesystem-and-storage/disk-quota.md:35-43) and no `lfs quota` use: the
`lfs` calls follow Lustre's manual. Neither runs here (no Lustre): stand-ins printing those
layouts test them (tests/test_storage_quota.py); unverified on a site."""
import getpass
import grp
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


def existing_ancestor(path: str) -> str:
    """`path`, or its nearest parent that exists (where a directory still to be made will be)."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p


class NotMounted(OSError):
    """The file system a path lies on is not there: its top directory does not exist."""


def top_missing(path: str) -> Optional[str]:
    """The first directory under / of `path` when it does not exist, else None.

    Examples are /lus on a machine without Lustre, and /eagle off Polaris. It means the path's file
    system is not mounted here."""
    parts = os.path.abspath(path).split(os.sep)
    top = os.sep + parts[1] if len(parts) > 1 and parts[1] else None
    return top if top and not os.path.exists(top) else None


@dataclass
class Quota:
    used: int
    limit: int
    said: str   # the command that said so

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


@dataclass
class Room:
    path: str                 # the directory measured (the nearest that exists)
    free: int                 # bytes an ordinary user may still write there (statvfs f_bavail)
    writable: bool
    quotas: List[Quota] = field(default_factory=list)
    not_read: List[str] = field(default_factory=list)  # quota tools there whose answer could not be read

    @property
    def tightest(self) -> Optional[Quota]:
        return min(self.quotas, key=lambda q: q.left) if self.quotas else None

    @property
    def quota_left(self) -> Optional[int]:
        tight = self.tightest
        return tight.left if tight is not None else None

    @property
    def quota_text(self) -> str:
        q = self.tightest
        return f"{q.said}: {human(q.used)} used of {human(q.limit)}" if q else ""

    @property
    def usable(self) -> int:
        return self.free if self.quota_left is None else min(self.free, self.quota_left)


def human(n: int) -> str:
    from ..contracts.units import human_bytes
    return human_bytes(n)


def parse_lfs_quota(text: str) -> Optional[Tuple[int, int]]:
    """`lfs quota -u USER PATH` (or -g, -p) -> (used, hard limit) in bytes, None without a limit.

    The layout is the one in Lustre's manual. A 'Filesystem kbytes quota limit grace files ...'
    header comes first, then the values. A value over its quota ends in '*'. The tool is not run
    here, since this machine has no Lustre."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"\bkbytes\b", line) and "limit" in line:
            rest = " ".join(lines[i + 1:i + 3]).split()
            nums = [x.rstrip("*") for x in rest if re.fullmatch(r"\d+\*?", x)]
            if len(nums) >= 3:
                used, _soft, hard = (int(x) * 1024 for x in nums[:3])
                return (used, hard) if hard else None
    return None


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)i?B?$", re.I)


def parse_size(text: str) -> Optional[int]:
    """'1.87T', '1000T', '50.00G' (myprojectquotas, myquota) -> bytes, taken as binary units (ALCF's
    pages do not say which; Lustre's own tools count in KiB)."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    unit = m.group(2).upper()
    return int(float(m.group(1)) * 1024 ** ("KMGTP".index(unit) + 1 if unit else 0))


def parse_myprojectquotas(text: str, project: str, fs: Optional[str] = None) -> Optional[Tuple[int, int, str]]:
    """ALCF's `myprojectquotas` -> (used, quota, file system), in bytes, of one row of `project`.

    The row is the one on file system `fs`, or the project's only row when none is on `fs`. None
    when it has no row. The layout is verbatim from disk-quota.md:39-43. It has a 'Name Type
    Filesystem Used Quota Grace' header, a '=' rule, and a row per project and file system."""
    rows = []
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 5 and w[0] == project:
            used, quota = parse_size(w[3]), parse_size(w[4])
            if used is not None and quota:
                rows.append((used, quota, w[2]))
    on_fs = [r for r in rows if r[2] == fs]
    return (on_fs or rows)[0] if len(on_fs) == 1 or (not on_fs and len(rows) == 1) else None


def _lfs(run, args) -> Tuple[Optional[str], str]:
    """(stdout or None, what was run)."""
    said = "lfs " + " ".join(args)
    try:
        p = run(["lfs", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None, said
    return (p.stdout if p.returncode == 0 else None), said


def lustre_quotas(at: str, run) -> Tuple[List[Quota], List[str]]:
    """The user's, the directory's group's and its project id's Lustre quotas at `at`."""
    out, bad = [], []
    try:
        asks = [("-u", getpass.getuser())]
    except (KeyError, OSError):  # no name for this uid (Python before 3.13 raises KeyError)
        asks = [("-u", str(os.getuid()))]
    try:
        asks.append(("-g", grp.getgrgid(os.stat(at).st_gid).gr_name))
    except KeyError:
        pass
    proj, said = _lfs(run, ["project", "-d", at])  # '   1001 P /lus/flare/projects/X' (Lustre's manual)
    m = re.match(r"\s*(\d+)\s", proj or "")
    if m and m.group(1) != "0":
        asks.append(("-p", m.group(1)))
    for flag, who in asks:
        text, said = _lfs(run, ["quota", flag, who, at])
        q = parse_lfs_quota(text) if text is not None else None
        if q:
            out.append(Quota(q[0], q[1], said))
        elif text is None:
            bad.append(said)
    return out, bad


def fs_name(path: str) -> Optional[str]:
    """The file system's short name as myprojectquotas prints it (eagle, flare): the path's
    component after /lus, else its first (/eagle/PROJ, /lus/flare/projects/PROJ)."""
    parts = [p for p in os.path.abspath(path).split(os.sep) if p]
    if not parts:
        return None
    return parts[1] if parts[0] == "lus" and len(parts) > 1 else parts[0]


def room(path: str, project: Optional[str] = None, run=subprocess.run) -> Room:
    """Room where `path` will be. NotMounted when its file system is not there at all."""
    top = top_missing(path)
    if top:
        raise NotMounted(2, f"{top} does not exist on this machine", top)
    at = existing_ancestor(path)
    st = os.statvfs(at)
    r = Room(at, st.f_bavail * st.f_frsize, os.access(at, os.W_OK | os.X_OK))
    if shutil.which("lfs"):
        r.quotas, r.not_read = lustre_quotas(at, run)
    if project and shutil.which("myprojectquotas"):
        fs = fs_name(path)
        try:
            p = run(["myprojectquotas"], capture_output=True, text=True, timeout=60)
            why = f"exit {p.returncode}" if p.returncode else f"no row for {project} with a quota"
            q = parse_myprojectquotas(p.stdout, project, fs) if p.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired) as e:
            q, why = None, f"it did not answer: {e}"
        if q:
            other = f"; its only row, and this path is on {fs}" if q[2] != fs else ""
            r.quotas.append(Quota(q[0], q[1], f"myprojectquotas ({project} on {q[2]}{other})"))
        else:
            r.not_read.append(f"myprojectquotas ({why})")
    return r
