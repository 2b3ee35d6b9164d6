"""Placeholders one side writes and another replaces: in a rendered launch argv, where the
program's own argv starts (the renderer marks it, the supervisor puts a warm restart's stub there);
in a warm pool's directory, the node's name (one pool per node)."""

PROGRAM_TOKEN = "@RL_PROGRAM@"  # in a rendered launch argv: where the program's own argv starts
NODE_TOKEN = "{node}"          # in a pool directory's path: this node's name (one pool per node)
