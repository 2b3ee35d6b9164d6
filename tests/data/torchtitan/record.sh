#!/bin/bash
# Records what torchtitan 0.3.0 itself writes and logs on this machine (CPU, one rank, torch 2.13.0
# held), for tests/test_programs.py's torchtitan test:
#   1. its seed checkpoint (--checkpoint.create_seed_checkpoint, the one mode its trainer runs
#      without an accelerator): <dump_folder>/checkpoint/step-0/{.metadata, __0_0.distcp};
#   2. a relaunch beside a save cut short (step-5 holding the shard, no .metadata): which checkpoint
#      torchtitan loads, in its own words. It fails after the load, at its first backward
#      ("FlexAttention does not support backward on CPU": llama3 takes flex or varlen attention only).
# Kept: seed.log and load.log (its [titan] lines and the last error line), listing.txt (each file
# under checkpoint/ and its size), step-0.metadata (the .metadata bytes: DCP's, read by the test),
# versions.txt. The 75 MB shard is not kept: the test recreates it as a sparse file of its size.
# A venv is made at $TT_VENV (default /tmp/rl-torchtitan-venv; torchtitan needs triton to import).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${TT_VENV:-/tmp/rl-torchtitan-venv}
if [ ! -x "$venv/bin/torchrun" ] || ! "$venv/bin/python" -c "import torchtitan" 2>/dev/null; then
	python3 -m venv "$venv"
	echo "torch==2.13.0" > "$venv/constraints.txt"
	"$venv/bin/pip" install -q -c "$venv/constraints.txt" torch==2.13.0 torchtitan==0.3.0 triton==3.9.0
fi
w=$(mktemp -d /tmp/rl-torchtitan.XXXXXX)
cd "$w"
"$venv/bin/python" "$here/assets.py"
run() {  # one rank, as torchtitan's seed checkpoint requires; its output in $1
	local log=$1; shift
	set +e
	"$venv/bin/torchrun" --nproc_per_node 1 --master_port 29517 "$here/titan_cpu.py" --module llama3 \
		--config llama3_debugmodel --checkpoint.enable --dump_folder "$w/out" "$@" > "$w/$log.full" 2>&1
	echo "$log: exit $?"
	set -e
	{ grep -a '^\[titan\]' "$w/$log.full" || true; grep -a -m1 -E '^\[rank0\]: [A-Za-z]+Error' "$w/$log.full" || true; } \
		| sed -e 's/\x1b\[[0-9;]*m//g' > "$here/$log.log"
}
run seed --checkpoint.create_seed_checkpoint
cp out/checkpoint/step-0/.metadata "$here/step-0.metadata"
mkdir out/checkpoint/step-5 && cp out/checkpoint/step-0/__0_0.distcp out/checkpoint/step-5/  # cut short: no .metadata
run load --training.steps 8 --training.seq_len 128 --checkpoint.interval 5
(cd out && find checkpoint -type f -printf '%p %s\n' | sort) > "$here/listing.txt"
echo "root $w/out/checkpoint" >> "$here/listing.txt"
"$venv/bin/python" -c 'import importlib.metadata as m
for d in ("torch", "torchtitan", "triton", "torchdata", "torch_checkpointing", "datasets"): print(f"{d}=={m.version(d)}")' \
	> "$here/versions.txt"
rm -rf "$w"
echo "recorded into $here: $(wc -l < "$here/seed.log") + $(wc -l < "$here/load.log") log lines; $(head -c 200 "$here/listing.txt")"
