"""The warm pool's wire messages (runtime/warm/wire.py) and its served records (contracts/served.py).

Each message is read by the reader for its place in the exchange. A message of another shape is
refused."""
import json
import os
import signal
import socket

import pytest

from restartlab.contracts import served
from restartlab.runtime.warm import wire


def _pair():
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def _raw(sock, obj):
    data = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    sock.sendall(wire._HDR.pack(len(data)) + data)


def test_a_request_with_its_fds_then_a_start_then_an_end():
    stub, pool = _pair()
    with stub, pool:
        r, w = os.pipe()
        req = wire.Request(["python", "-m", "x"], {"A": "1"}, "/tmp", True, 42)
        wire.send_msg(stub, req, fds=(r, w, w))
        got, fds = wire.recv_request(pool)
        assert got == req and len(fds) == 3
        for fd in fds + [r, w]:
            os.close(fd)
        wire.send_msg(pool, wire.Started(7))
        assert wire.recv_reply(stub) == wire.Started(7)
        wire.send_msg(pool, wire.Ended(signal=int(signal.SIGKILL)))
        end = wire.recv_end(stub)
        assert end == wire.Ended(signal=9) and os.WIFSIGNALED(end.status) and os.WTERMSIG(end.status) == 9
        wire.send_msg(pool, wire.Ended(exit=3))
        assert os.WEXITSTATUS(wire.recv_end(stub).status) == 3
        pool.close()
        assert wire.recv_end(stub) is None  # EOF: the pool died


def test_a_refusal_and_messages_of_another_shape():
    stub, pool = _pair()
    with stub, pool:
        wire.send_msg(pool, wire.Refused("no module named x"))
        assert wire.recv_reply(stub) == wire.Refused("no module named x")
        _raw(pool, {"pid": True})
        with pytest.raises(wire.PoolError, match="not an answer"):
            wire.recv_reply(stub)
        _raw(stub, {"argv": "python x.py", "env": {}, "cwd": "/"})  # argv not a list
        with pytest.raises(wire.PoolError, match="without its argv"):
            wire.recv_request(pool)
        _raw(stub, b"{not json")
        with pytest.raises(wire.PoolError, match="not JSON"):
            wire.recv_request(pool)
        _raw(pool, {"exit": "2"})
        assert wire.recv_end(stub) == wire.Ended(exit=1)  # as before: an end it cannot read is exit 1


def test_served_records_count_an_attempts_warm_ranks(tmp_path):
    a, b = tmp_path / "n1.served.jsonl", tmp_path / "n2.served.jsonl"
    a.write_text(served.Served("2", "sync", "n1", 11, 10, 5.0).to_json() + "\n"
                 + served.Served("3", "sync", "n1", 12, 10, 6.0).to_json() + "\n" + '{"attempt": "3", "rank_p')
    b.write_text(json.dumps({"attempt": "3", "rank_pid": "x"}) + "\n[1]\n")
    recs = served.read([str(a), str(b), str(tmp_path / "none")])
    assert [(r.attempt, r.rank_pid) for r in recs] == [("2", 11), ("3", 12), ("3", None)]
    from restartlab.runtime.warm.standby import served_in
    assert served_in(str(tmp_path), 3) == 2 and served_in(str(tmp_path), 2) == 1
