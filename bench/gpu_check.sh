#!/usr/bin/env bash
# The GPU checks, for a machine with one CUDA GPU and its own torch (nothing installed over it):
# the cuda/nccl exact-resume tests and the staging overlap (tests/test_gpu.py), then the async
# checkpoint benchmark on one rank. Logs go to ${OUT:-.}/gpu-*.log, figures to gpu-async.json.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-.}
# no install (a GPU machine may have no package index): restartlab and restartlab.trainer by links
site=$(mktemp -d)
mkdir "$site/restartlab"
ln -s "$PWD"/restartlab/* "$site/restartlab/"
ln -s "$PWD/trainer" "$site/restartlab/trainer"
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'; } | tee "$out/gpu-env.log"
PYTHONUNBUFFERED=1 python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$out/gpu-tests.log" | grep -E "cuda |gpu staging|passed|failed|Error" 
rc=${PIPESTATUS[0]}
PYTHONUNBUFFERED=1 python3 bench/async_ckpt.py --ranks 1 --model small --repeats 3 --timeout 200 --json "$out/gpu-async.json" 2>&1 | tee "$out/gpu-async.log"
exit $(( rc || PIPESTATUS[0] ))
