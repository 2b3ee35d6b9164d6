# TEST-ONLY PBS LAYER (mock; see pbs_shim.py). Sourced by bash through BASH_ENV at the start of a
# job that the shim's qsub handed to sbatch: sets what PBS Pro sets and Slurm's spank_pbs does not.
# PBS_NODEFILE lists each node once per MPI slot (PBS Pro writes one line per mpiprocs).
if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${PBS_NODEFILE:-}" ]; then
  PBS_JOBID="$SLURM_JOB_ID.${RL_SHIM_SERVER:-rl-shim-pbs}"
  PBS_NODEFILE="${TMPDIR:-/tmp}/pbs_shim_nodefile.$SLURM_JOB_ID"
  (
    mapfile -t rl_shim_hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    # SLURM_TASKS_PER_NODE looks like "2(x2)" or "3,1": expand to one count per node
    rl_shim_counts=()
    IFS=, read -ra rl_shim_parts <<<"${SLURM_TASKS_PER_NODE:-1}"
    for p in "${rl_shim_parts[@]}"; do
      if [[ $p =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
        for _ in $(seq 1 "${BASH_REMATCH[2]}"); do rl_shim_counts+=("${BASH_REMATCH[1]}"); done
      else
        rl_shim_counts+=("$p")
      fi
    done
    : > "$PBS_NODEFILE"
    for i in "${!rl_shim_hosts[@]}"; do
      for _ in $(seq 1 "${rl_shim_counts[$i]:-1}"); do echo "${rl_shim_hosts[$i]}" >> "$PBS_NODEFILE"; done
    done
  )
  PBS_ENVIRONMENT=PBS_BATCH
  PBS_O_WORKDIR=${SLURM_SUBMIT_DIR:-$PWD}
  export PBS_JOBID PBS_NODEFILE PBS_ENVIRONMENT PBS_O_WORKDIR
fi
unset BASH_ENV
