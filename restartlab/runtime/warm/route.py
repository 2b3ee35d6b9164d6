"""A warm phase's standby pools, through the phase.

They start beside the phase's first attempt. Each attempt is routed through their stubs when they
serve. When they do not, it goes cold through the exit recorder, and this is said once. The pools
stop at the phase's end."""
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from ... import programs
from ...contracts import layout
from ...tools.launch import LaunchSpec
from .standby import Standby
from .wire import PoolError


class WarmRoute:
    def __init__(self, cfg: Any, spec: programs.Spec):  # cfg: supervise.Config (it imports us)
        self.cfg, self.spec = cfg, spec   # the supervisor's settings; the program's adapter spec
        self.pool: Optional[Standby] = None
        self.served = False  # said that they serve

    def start(self, phase: layout.Phase, hosts: List[str], slots: Optional[List[int]]) -> Optional[str]:
        """Start the pools (one per node) without waiting for them: they preload while the phase's
        first attempt starts cold. None, or why they cannot start."""
        cfg = self.cfg
        if cfg.fanout == "local" and len(hosts) > 1:
            return f"fanout local reaches this node only, and the job has {len(hosts)} nodes"
        try:
            # what the pools import before they fork: relaunch.warm_preload, else the program's adapter's
            # (the bundled trainer's warm-up module for the bundled trainer: programs/builtin.py)
            preload = cfg.warm_preload or programs.ADAPTERS.get(self.spec.adapter).preload or "torch"
            # The pools import the program's modules in the ranks' environment (launch.env, which the
            # launcher gives only the ranks). For torch, its OpenMP and BLAS read their threads then.
            env = {**os.environ, **cfg.launch_spec.env}
            self.pool = Standby(cfg.launch_spec.python, cfg.tag, phase.warm_log,
                                preload, env=env, fanout=cfg.fanout,
                                hosts=hosts, slots=slots, launcher=cfg.launcher, state_dir=phase.warm_dir)
        except (PoolError, OSError) as e:
            self.stop()
            return f"the standby pool did not start ({e}; see {phase.warm_log})"
        self.served = False
        return None

    def argv(self, launch: LaunchSpec, attempt_dir: str, wait: bool = True) -> Tuple[List[str], Optional[Tuple[str, bool]]]:
        """The attempt's argv, through the pools' stubs when they serve, else cold; and what to say
        (text, is it a fall-back) the first time they serve, or when they cannot. A relaunch
        (`wait`) waits for pools still preloading: they started before the attempt that failed, so
        what is left of their preload is less than a cold start's imports. The phase's first
        launch does not wait: it starts cold beside them. A cold rank starts through the exit
        recorder (runtime/rankexit.py), a warm one's stub records its end itself."""
        if self.pool is None:
            return launch.cold_argv(attempt_dir), None
        pool = self.pool
        try:
            if wait:
                pool.wait_ready(max(0.0, self.cfg.startup_timeout - (time.time() - pool.started)))
            elif not pool.ready():
                return launch.cold_argv(attempt_dir), None
            if not pool.alive():
                raise PoolError(f"a pool exited ({pool.last_line()})")
        except (PoolError, OSError) as e:
            self.stop()
            return launch.cold_argv(attempt_dir), (f"the standby pool cannot serve ({e}; see {pool.log_path})", True)
        note = None
        if not self.served:
            self.served = True
            note = (f"the standby pool serves (preloaded in {pool.ready_after:.1f}s; see {pool.log_path})", False)
        return launch.stub_argv(pool.dir, attempt_dir), note

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
