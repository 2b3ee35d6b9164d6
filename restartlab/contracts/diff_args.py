"""`restartlab diff A B`'s arguments (the comparison itself loads tensors: restartlab.trainer.ckpt_diff,
run in its own process, since orchestration never imports torch)."""
import argparse


def add_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("a", help="a checkpoint: a DCP directory (holding .metadata), a torch.save file "
                   "(.pt, .pth, .ckpt, .bin), or a directory of such files (a framework's checkpoint folder)")
    p.add_argument("b", help="the other checkpoint, of the same kind")
    p.add_argument("--show", type=int, default=20, help="differing keys listed (default 20; all are counted)")
    p.add_argument("--json", default=None, help="write the comparison as JSON to this file")
    return p


def build_parser() -> argparse.ArgumentParser:
    return add_args(argparse.ArgumentParser(
        prog="restartlab diff", description="two checkpoints compared key by key: which keys differ and by how "
        "much, which exist on one side only (exit 0: identical, 1: they differ, 2: unreadable)"))
