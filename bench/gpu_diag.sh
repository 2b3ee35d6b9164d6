cd "$(dirname "$0")" 2>/dev/null; site=$(mktemp -d); mkdir "$site/restartlab"; ln -s "$PWD"/restartlab/* "$site/restartlab/"; ln -s "$PWD/trainer" "$site/restartlab/trainer"; export PYTHONPATH="$site:$PWD"
for v in plain syncstage; do d=$(mktemp -d); (cd /tmp && timeout 120 python3 /work/main/tests/gpu_async_diag.py "$d" $v 2>&1 | grep -E "DIAG|Error|error" | tail -5); done
