#!/bin/bash
# A benchmark on two revisions' trees in one run, alternated, so that the machine's drift falls on
# both alike (the trainer too: restartlab.trainer is taken from each tree, not the editable install):
#
#   bench/alternate.sh BEFORE AFTER N bench/async_ckpt.py --ranks 2 --repeats 5
#
# Each revision is checked out into a temporary worktree; the outputs go to build/alternate/<rev>-<i>.txt.
set -euo pipefail
before=$1 after=$2 n=$3; shift 3
root=$(git rev-parse --show-toplevel)
py=${PY:-$root/.venv/bin/python}
out=$root/build/alternate; mkdir -p "$out"
tmp=$(mktemp -d); trap 'for r in "$before" "$after"; do git -C "$root" worktree remove --force "$tmp/$r" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/site"
cat > "$tmp/site/sitecustomize.py" <<'PY'
import sys  # restartlab from PYTHONPATH (the worktree), not the editable install's finder
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "") + repr(f)]
PY
for r in "$before" "$after"; do
  git -C "$root" worktree add -q --detach "$tmp/$r" "$r"
  ln -sfn ../trainer "$tmp/$r/restartlab/trainer"   # restartlab.trainer is trainer/, as installed
done
for i in $(seq 1 "$n"); do
  order=("$before" "$after"); (( i % 2 == 0 )) && order=("$after" "$before")  # who goes first alternates too
  for r in "${order[@]}"; do
    (cd "$tmp/$r" && PATH="$(dirname "$py"):$PATH" PYTHONPATH="$tmp/site:$tmp/$r" "$py" "$@" > "$out/$r-$i.txt" 2>&1)
    echo "$r run $i: $out/$r-$i.txt"
  done
done
