"""python -m restartlab.runtime.warm serve|stub: the standby pool, or the stub in a rank's place.
Each imports only its own side (the stub: the standard library and the wire)."""
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m restartlab.runtime.warm", description="warm standby restart: the pool, or the stub in a rank's place")
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("serve", help="the node's standby pool: preload, then fork one rank per stub")
    s.add_argument("--dir", required=True, help="the pool's private directory (its socket)")
    s.add_argument("--preload", default="torch", help="modules to import before serving (comma-separated)")
    s.add_argument("--python", default=None, help="the interpreter the programs name (default: this one)")
    s.add_argument("--parent", type=int, default=0, help="exit with this process (the supervisor)")
    s.add_argument("--tag", default=None, help="the job tag (the ranks are found by it)")
    s.add_argument("--state-dir", default=None, help="where to say it serves (<node>.ready) and which "
                   "ranks it forked (<node>.served.jsonl)")
    s.add_argument("--make-dir", action="store_true", help="a pool per node: make --dir itself ({node}: "
                   "this node's name)")
    t = sub.add_parser("stub", help="stand in for a rank under the launcher")
    t.add_argument("--dir", required=True)
    t.add_argument("--attempt-dir", help="where the rank's end is recorded (exits/<rank>.json)")
    t.add_argument("--rankenv", action="store_true",
                   help="the program gets torchrun-style variables (as restartlab.runtime.rankenv gives a cold one)")
    t.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.verb == "serve":
        from .pool import serve_main
        return serve_main(a)
    from .stub import stub_main
    return stub_main(a)


if __name__ == "__main__":
    sys.exit(main())
