"""Placeholders one side writes and another replaces, and the one function that fills them.

- In a program's command, its phase's args and its progress file (trainer.program): the phase's
  checkpoint dir, the phase's dir, the scenario file's dir (the renderer fills these) and the
  attempt's dir (the supervisor's, per attempt); in a checkpoint regex the checkpoint dir (the
  adapter's, escaped).
- In a torchft phase's program, the replica group's number (the phase's supervisor, per group); in
  a warm pool's directory, the node's name (one pool per node)."""
from typing import Dict, Optional

CKPT_DIR = "{ckpt_dir}"
PHASE_DIR = "{phase_dir}"
ATTEMPT_DIR = "{attempt_dir}"
SCENARIO_DIR = "{scenario_dir}"
GROUP = "{group}"              # in a torchft phase's program: the replica group's number

NODE_TOKEN = "{node}"          # in a pool directory's path: this node's name (one pool per node)


def fill(text: str, values: Dict[str, Optional[str]]) -> str:
    """`text` with each placeholder in `values` ({CKPT_DIR: path, ...}) replaced (None: by "");
    the others are left for the side that knows them."""
    for token, v in values.items():
        text = text.replace(token, v or "")
    return text
