"""The standby pool's wire, spoken by the stub and the pool: the pool's socket in its private
directory (one per node), length-prefixed JSON messages, the stub's standard fds by SCM_RIGHTS.
Standard library only (and this node's name): the stub imports it."""
import array
import contextlib
import json
import os
import signal
import socket
import struct
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ...contracts.envvars import node_name
from ...contracts.placeholders import NODE_TOKEN, fill

SOCKET_NAME = "pool.sock"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)
_HDR = struct.Struct("!I")


class PoolError(RuntimeError):
    """The pool cannot run this request (the stub starts the program cold)."""


def node_dir(path: str) -> str:
    return fill(path, {NODE_TOKEN: node_name()})


UNIX_PATH_MAX = 107  # sun_path: 108 bytes on Linux, the last one a NUL


@contextlib.contextmanager
def unix_path(path: str) -> Iterator[str]:
    """`path` as an AF_UNIX address: itself when short enough, else through a descriptor of its
    directory (/proc/self/fd/N/name: Linux). A batch job's TMPDIR can be long (PBS's is
    /var/tmp/pbs.<jobid>, with the server's full name in the job id; the OpenPBS test cluster's
    put the pools' sockets at 112 bytes): bind and connect would fail 'AF_UNIX path too long'."""
    if len(os.fsencode(path)) <= UNIX_PATH_MAX or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def send_msg(sock: socket.socket, obj: Dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(obj).encode()
    payload = _HDR.pack(len(data)) + data
    if fds:
        sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(payload)


def recv_msg(sock: socket.socket, want_fds: int = 0) -> Tuple[Optional[Dict[str, Any]], List[int]]:
    """(message, fds); (None, []) at EOF."""
    fds = array.array("i")
    head = b""
    while len(head) < _HDR.size:
        if want_fds and not fds:
            chunk, anc, _, _ = sock.recvmsg(_HDR.size - len(head), socket.CMSG_LEN(want_fds * fds.itemsize))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        else:
            chunk = sock.recv(_HDR.size - len(head))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        head += chunk
    n = _HDR.unpack(head)[0]
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, list(fds)
        body += chunk
    return json.loads(body), list(fds)
