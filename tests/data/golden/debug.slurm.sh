#!/bin/bash
#SBATCH --job-name=debug
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=12
#SBATCH --time=01:00:00
#SBATCH --partition=workq
#SBATCH --output=/expt/x/job-%j.out
#SBATCH --open-mode=append
# restartlab job script for Slurm, rendered from ROOT/scenarios/debug.yaml
# Inspect it, do not edit it: change the scenario and re-render.
set -uo pipefail

RL_PY=PYTHON
RL_EXPT_DIR=/expt/x
# relaunch.walltime_margin before job.walltime (counted from the script's start): the ranks get
# the trainer's preemption signal and no attempt is launched after it (0: off)
RL_STOP_AT=$(( $(date +%s) + 3480 ))
RL_FAILED=0
RL_WALLTIME_STOP=0
RL_CHILD=""
export RL_EXPT_DIR

mkdir -p "$RL_EXPT_DIR" || exit 1
cd "$RL_EXPT_DIR" || exit 1
RL_NODEFILE=/expt/x/nodefile."$SLURM_JOB_ID"
scontrol show hostnames "${SLURM_JOB_NODELIST:?not running under Slurm}" > "$RL_NODEFILE"
export RL_NODEFILE
RL_JOBID=${RESTARTLAB_LOCAL_JOBID:-${PBS_JOBID:-${SLURM_JOB_ID:-local}}}
# every job that works on this experiment (a chain has several): restartlab status EXPT_DIR reads it
# this run of the job (a requeued job runs again under the same id): its attempts carry it
RL_JOB_START=$(date +%s.%N)
export RL_JOB_START
printf '{"job": "%s", "start": %s}\n' "$RL_JOBID" "$RL_JOB_START" >> /expt/x/jobs.jsonl
# the nodes found bad belong to one run of one job: a continuation or a rerun has its own nodes
rm -f /expt/x/nodes.bad
echo "restartlab: job $RL_JOBID on $(sort -u "$RL_NODEFILE" | wc -l) node(s), experiment in $RL_EXPT_DIR"

# ---- site setup (launch.setup: shell lines, verbatim)
module load frameworks/2025.3.1

# a rerun (the scheduler requeued the job): what the scheduler says of it, into job-runs.jsonl (after the
# site's setup: its Python may need it)
"$RL_PY" -m restartlab.runtime.jobrun --expt-dir "$RL_EXPT_DIR" --job "$RL_JOBID" --start "$RL_JOB_START" --scheduler slurm \
  --nodefile "$RL_NODEFILE"

# shellcheck disable=SC2317  # (invoked through the trap)
rl_on_signal() {
  # the phase's supervisor stops its attempt (the launcher gets the signal) and its injector
  echo "restartlab: interrupted: stopping the phase's supervisor" >&2
  if [ -n "$RL_CHILD" ]; then kill -TERM "$RL_CHILD" 2>/dev/null; wait "$RL_CHILD"; fi
  exit 130
}
trap rl_on_signal INT TERM

# the relaunch loop (restartlab supervise --help): its settings, the same for every phase
rl_supervise=("$RL_PY" -m restartlab.cli supervise --tag TAG --train-iters 3000 --fanout slurm
  --stop-at "$RL_STOP_AT" --job "$RL_JOBID" --nodefile "$RL_NODEFILE")

rl_phase() {
  # one phase under the supervisor; its exit status is the phase's verdict:
  # 0 completed, 5 stopped by the walltime margin, 6 relaunch budget used up, else failed
  "${rl_supervise[@]}" "$@" &
  RL_CHILD=$!
  wait "$RL_CHILD"
  local rc=$?
  RL_CHILD=""
  case $rc in
    0) ;;
    5) RL_WALLTIME_STOP=1 ;;
    6) RL_FAILED=1 ;;
    *) RL_FAILED=1 ;;
  esac
}

# ---- phase 1: sync (checkpoint: sync)
# injection plan: restartlab inject --every 90s --wait-first-complete --until /expt/x/sync/done --ckpt-dir /expt/x/sync/ckpts --phase-dir /expt/x/sync --train-iters 3000 --tag TAG --fanout slurm --launcher pals
# each attempt's launcher: mpiexec --pmi=pmix -n 24 --ppn 12 --cpu-bind 'verbose,list:4-7:8-11:12-15:16-19:20-23:24-27:56-59:60-63:64-67:68-71:72-75:76-79' --env CCL_PROCESS_LAUNCHER=pmix --env CCL_ATL_TRANSPORT=mpi --env FI_MR_CACHE_MONITOR=userfaultfd --env CCL_KVS_MODE=mpi --env CCL_CONFIGURATION=cpu_gpu_dpcpp --env CCL_KVS_CONNECTION_TIMEOUT=600 --env 'CCL_WORKER_AFFINITY=42,43,44,45,46,47,94,95,96,97,98,99' --env RESTARTLAB_JOB_TAG=TAG
# and on each rank the program after -- (through the exit recorder, or the warm standby's stub)
rl_phase --phase sync --phase-dir /expt/x/sync --ckpt-dir /expt/x/sync/ckpts \
  --inject --inject-every 90s --inject-wait-first-complete \
  --launch '{"python":"PYTHON","launcher":"pals","nodes":2,"ranks_per_node":12,"env":{"CCL_PROCESS_LAUNCHER":"pmix","CCL_ATL_TRANSPORT":"mpi","FI_MR_CACHE_MONITOR":"userfaultfd","CCL_KVS_MODE":"mpi","CCL_CONFIGURATION":"cpu_gpu_dpcpp","CCL_KVS_CONNECTION_TIMEOUT":"600","CCL_WORKER_AFFINITY":"42,43,44,45,46,47,94,95,96,97,98,99","RESTARTLAB_JOB_TAG":"TAG"},"cpu_bind":"verbose,list:4-7:8-11:12-15:16-19:20-23:24-27:56-59:60-63:64-67:68-71:72-75:76-79","launcher_args":["--pmi=pmix"]}' \
  -- PYTHON -m restartlab.trainer --model debug --vocab 0 --train-iters 3000 --save-interval 100 --keep 3 --tp 2 --dp-replicate 1 --seq-len 32 --batch-size 4 --data-dtype auto --lr 0.001 --seed 1234 --meta-init auto --device xpu --device-order local --log-interval 10 --ckpt-format dcp --on-save-error continue --preempt-signal TERM --pg-timeout 600 --ckpt-dir /expt/x/sync/ckpts --outdir .

# ---- collector
"$RL_PY" -m restartlab.cli report "$RL_EXPT_DIR" || RL_FAILED=1
if (( RL_FAILED )); then exit 1; fi
if (( RL_WALLTIME_STOP )); then exit 5; fi  # state saved, training not finished
exit 0
