"""Private paths outside the experiment directory (node-local stage dirs, probes).

Only this user creates them, with mode 0700/0600, and never through a symlink. A path someone else
owns is refused.

On a shared node anyone can plant a symlink or a directory at a name in /tmp before we get there.
Job ids are public. So nothing here follows a symlink or trusts a path it did not create.
- `ensure_dir(path)`: the directory at `path` is ours, a real directory, 0700. It is created with
  mode 0700 when absent (`mkdir` never follows a symlink at its last component). Every directory
  above it must be ours or root's, and not writable by others unless sticky (as /tmp). So nobody
  can swap it out from under us. Anything else raises `UnsafePath`, with one line naming the path
  and its owner.
- `make_dir(parent, prefix)`: a fresh directory with an unguessable name (mkdtemp: 0700, O_EXCL).
- `remove_tree(path)`: only a directory `ensure_dir` accepts. rmtree never follows a symlink.
- `open_new(path)`: a new file, 0600, O_EXCL|O_NOFOLLOW.
"""
import os
import pwd
import shutil
import stat
import tempfile
from typing import IO, Any


class UnsafePath(OSError):
    """A path that is not private to this user; str() is one line naming it and its owner."""


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _check_ancestors(path: str) -> None:
    """Every directory above `path` is ours or root's, and writable by others only if sticky."""
    me = os.geteuid()
    d = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(d)  # an ancestor may be a symlink (/tmp -> /private/tmp): its target counts
        if st.st_uid not in (0, me):
            raise UnsafePath(f"{path}: refused: {d} above it belongs to {owner_name(st.st_uid)}")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise UnsafePath(f"{path}: refused: {d} above it is writable by others (mode "
                             f"{stat.S_IMODE(st.st_mode):o}, not sticky)")
        up = os.path.dirname(d)
        if up == d:
            return
        d = up


def check_dir(path: str) -> os.stat_result:
    """`path` is a real directory (not a symlink), ours, with no group/other permissions, under
    safe ancestors; its lstat. UnsafePath otherwise (FileNotFoundError when absent)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path}: refused: a symlink (to {os.readlink(path)}), owned by {owner_name(st.st_uid)}")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path}: refused: not a directory, owned by {owner_name(st.st_uid)}")
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path}: refused: owned by {owner_name(st.st_uid)}, not {owner_name(os.geteuid())}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafePath(f"{path}: refused: mode {stat.S_IMODE(st.st_mode):o} lets others in "
                         f"(owned by {owner_name(st.st_uid)}; a private directory is 700)")
    _check_ancestors(path)
    return st


def ensure_dir(path: str) -> bool:
    """The private directory `path`, created (0700) when absent; True when we created it."""
    _check_ancestors(path)
    try:
        os.mkdir(path, 0o700)  # the umask may only take bits away
        created = True
    except FileExistsError:
        created = False
    check_dir(path)
    return created


def make_dir(parent: str, prefix: str) -> str:
    """A fresh private directory under `parent` with an unguessable name starting with `prefix`."""
    _check_ancestors(os.path.join(parent, prefix))
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    check_dir(path)
    return path


def remove_tree(path: str) -> None:
    """Remove the private directory `path` and everything in it; refuses (UnsafePath) anything
    check_dir refuses; a missing path is fine."""
    try:
        check_dir(path)
    except FileNotFoundError:
        return
    shutil.rmtree(path)  # fd-based on Linux: a symlink inside is removed, never followed


def open_new(path: str, mode: str = "wb") -> IO[Any]:
    """A new file at `path`, 0600, created exclusively (an existing file or symlink: FileExistsError)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, mode)


def open_private(path: str, mode: str = "wb") -> IO[Any]:
    """A file at `path` inside a private directory, created or truncated, 0600, never through a
    symlink (O_NOFOLLOW: a symlink there raises ELOOP)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # a file that already existed keeps its mode otherwise
    return os.fdopen(fd, mode)
