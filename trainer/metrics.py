"""Metrics rows in ezpz's History JSONL shape, one file per rank.

Rows are appended, so a relaunch with the same --outdir never overwrites an earlier attempt's rows.
Each row is flushed, so a SIGKILL loses at most the row being written."""
import json
import os
import time

from restartlab.contracts.layout import metrics_name  # torch-free: the experiment directory's names


class MetricsWriter:
    def __init__(self, outdir: str, rank: int, sink=None):
        os.makedirs(outdir, exist_ok=True)
        self.rank = rank
        self.sink = sink  # e.g. W&B: gets each row after it is on disk (never blocks)
        self.path = os.path.join(outdir, metrics_name(rank))
        self._f = open(self.path, "a", buffering=1)

    def write(self, metrics: dict, ts: float = None):
        row = {"timestamp": time.time() if ts is None else ts, "rank": self.rank, "metrics": metrics}
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()
        if self.sink:
            self.sink.log(metrics)

    def close(self, exit_code: int = 0):
        self._f.close()
        if self.sink:
            self.sink.close(exit_code)
