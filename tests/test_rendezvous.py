"""The rendezvous port.

- It is drawn outside the kernel's ephemeral range.
- A port someone else took between the pick and rank 0's bind ends every rank in seconds.
  In CI (2026-12-04), rank 0 died on EADDRINUSE, and its peer talked to a stranger's socket for
  15 minutes."""
import random
import socket
import threading

import pytest

from restartlab import launchers
from tests.helpers import run_trainer
from restartlab.trainer.dist import STORE_CONNECT_VAR


def test_the_pool_lies_below_the_ephemeral_range(tmp_path):
    f = tmp_path / "range"
    f.write_text("32768\t60999\n")
    assert launchers.port_pool(str(f)) == (launchers.PORT_FLOOR, 32767)
    f.write_text("10000 60000\n")  # a site's range that leaves too little below: above it
    assert launchers.port_pool(str(f)) == (60001, 65535)
    f.write_text("1024 65535\n")  # nothing outside: anywhere, each pick checked by a bind
    assert launchers.port_pool(str(f)) == (launchers.PORT_FLOOR, 65535)
    assert launchers.ephemeral_range(str(tmp_path / "absent")) == (32768, 60999)


def test_free_port_is_outside_the_ephemeral_range_and_skips_a_taken_one():
    lo, hi = launchers.ephemeral_range()
    pool = launchers.port_pool()
    picks = [launchers.free_port("127.0.0.1") for _ in range(50)]
    assert all(pool[0] <= p <= pool[1] and not lo <= p <= hi for p in picks), picks
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen(1)

        class Seq(random.Random):  # The first draw is the taken port, then its neighbours, one of them free.
            # A single neighbour was taken by another test's socket once, on CI.
            draws = iter([busy] + [p for p in range(busy + 1, busy + 200) if p <= 65535]
                         + list(range(busy - 1, max(1023, busy - 200), -1)))

            def randint(self, a, b):
                return next(self.draws)
        got = launchers.free_port("127.0.0.1", rng=Seq(), pool=(1024, 65535))
        assert got != busy


class Stranger:
    """A listener that is not a store: it accepts and closes each connection at once."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self):
        self.sock.close()


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_a_stranger_on_the_rendezvous_port_ends_every_rank_with_one_line(tmp_path):
    """The bad interleaving on purpose: the port given to the ranks is held by another process.

    Rank 0 cannot listen: one line, exit 1. Rank 1 reaches the stranger, which fails torch's store
    handshake. Rank 1 gives up after its bound instead of the group's 600 s. The bound is 30 s,
    5 s here (STORE_CONNECT_VAR). Both exit 1, a failure the relaunch loop retries with a new port.
    Nothing hangs past the test's bound: run_trainer fails with the ranks' stacks at 240 s."""
    stranger = Stranger()
    try:
        r = run_trainer(2, ["--model", "tiny", "--train-iters", "4", "--save-interval", "0",
                            "--ckpt-dir", str(tmp_path / "ckpt"), "--outdir", str(tmp_path)],
                        env={"MASTER_PORT": str(stranger.port), STORE_CONNECT_VAR: "5"})
    finally:
        stranger.close()
    where = f"127.0.0.1:{stranger.port}"
    assert r.returncode == 1, r.stdout[-3000:]
    assert (f"restartlab.trainer: error: rank 0: rank 0 cannot listen on {where} (MASTER_ADDR:MASTER_PORT): "
            "the port is in use" in r.stdout), r.stdout[-3000:]
    assert (f"restartlab.trainer: error: rank 1: {where} (MASTER_ADDR:MASTER_PORT) accepts connections "
            "but is not rank 0's store" in r.stdout), r.stdout[-3000:]
    assert stranger.accepted >= 1
    assert "Traceback" not in r.stdout
