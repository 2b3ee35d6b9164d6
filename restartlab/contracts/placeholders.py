"""Placeholders one side writes and another replaces, and the one function that fills them.

A program's command, its phase's args and its progress file (trainer.program) hold four
placeholders. The renderer fills the phase's checkpoint dir, the phase's dir and the scenario
file's dir. The supervisor fills the attempt's dir, per attempt. A checkpoint regex holds the
checkpoint dir, which the adapter fills, escaped.

A torchft phase's program holds the replica group's number. The phase's supervisor fills it, per
group. A warm pool's directory holds the node's name (one pool per node)."""
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
