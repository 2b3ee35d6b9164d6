"""The standby pool's wire, spoken by the stub and the pool: the pool's socket in its private
directory (one per node), length-prefixed JSON messages, the stub's standard fds by SCM_RIGHTS.
Standard library only (and this node's name): the stub imports it.

The messages, in order: the stub's `Request` (with its three fds); the pool's `Started` (the rank's
pid), or `Refused` (why: the stub then starts its rank cold); when the rank ends, the pool's `Ended`
(its signal or exit status). Each is written by `send_msg` and read by the reader for its place in
the exchange (`recv_request`, `recv_reply`, `recv_end`), which refuses a message of another shape.
The messages and their readers are records: contracts/warm_messages.py."""
import array
import contextlib
import json
import os
import socket
import struct
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from ...contracts.envvars import node_name
from ...contracts.warm_messages import (Ended, Message, Refused, Request, Started,  # noqa: F401 (tests/test_wire.py)
                                        end_of, reply_of, request_of)
from ...contracts.placeholders import NODE_TOKEN, fill

SOCKET_NAME = "pool.sock"
_HDR = struct.Struct("!I")


class PoolError(RuntimeError):
    """The pool cannot run this request (the stub starts the program cold)."""


def node_dir(path: str) -> str:
    return fill(path, {NODE_TOKEN: node_name()})


UNIX_PATH_MAX = 107  # sun_path: 108 bytes on Linux, the last one a NUL


@contextlib.contextmanager
def unix_path(path: str) -> Iterator[str]:
    """`path` as an AF_UNIX address.

    That is `path` itself when it is short enough. Otherwise it goes through a descriptor of its
    directory (/proc/self/fd/N/name: Linux). A batch job's TMPDIR can be long, and bind and connect
    would then fail 'AF_UNIX path too long'. PBS's TMPDIR is /var/tmp/pbs.<jobid>, with the server's
    full name in the job id. The OpenPBS test cluster's put the pools' sockets at 112 bytes."""
    if len(os.fsencode(path)) <= UNIX_PATH_MAX or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def send_msg(sock: socket.socket, msg: Message, fds: Sequence[int] = ()) -> None:
    data = json.dumps(msg.to_dict()).encode()
    payload = _HDR.pack(len(data)) + data
    if fds:
        sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(payload)


def recv_request(sock: socket.socket) -> Tuple[Optional[Request], List[int]]:
    """The stub's request and its three fds; (None, fds) at EOF. PoolError: not a request."""
    d, fds = _recv(sock, want_fds=3)
    if d is None:
        return None, fds
    req = request_of(d)
    if req is None:
        for fd in fds:
            os.close(fd)
        raise PoolError("a request without its argv, environment or working directory")
    return req, fds


def recv_reply(sock: socket.socket) -> Union[Started, Refused, None]:
    """The pool's answer to a request; None at EOF. PoolError: neither answer."""
    d, _ = _recv(sock)
    if d is None:
        return None
    reply = reply_of(d)
    if reply is None:
        raise PoolError(f"not an answer to a request: {str(d)[:80]}")
    return reply


def recv_end(sock: socket.socket) -> Optional[Ended]:
    """How the rank ended; None at EOF (the pool died). A message of another shape reads as exit 1."""
    d, _ = _recv(sock)
    return None if d is None else end_of(d)


def _recv(sock: socket.socket, want_fds: int = 0) -> Tuple[Optional[Any], List[int]]:
    """(the message's JSON, fds); (None, []) at EOF."""
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
    try:
        return json.loads(body), list(fds)
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise PoolError("a message that is not JSON") from None
