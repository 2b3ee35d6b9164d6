#!/usr/bin/env bash
# stop_slurm.sh - stop the private Slurm started by start_slurm.sh, and nothing else: the pids in
# $SLURM_PREFIX/run/*.pid (checked against the expected program name, against pid reuse), plus
# slurmstepd processes whose environment carries *our* SLURM_CONF (children of our slurmd).
set -uo pipefail
SLURM_PREFIX=${SLURM_PREFIX:?set SLURM_PREFIX to a private directory}
export SLURM_CONF="$SLURM_PREFIX/etc/slurm.conf"
RUN="$SLURM_PREFIX/run"

# alive = exists and is not a zombie (PID 1 here may not reap promptly)
alive() { [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
pid_of() {  # name pidfile -> pid, only if that pid is still the program we expect
  local pid; pid=$(cat "$2" 2>/dev/null) || return 1
  alive "$pid" || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
  echo "$pid"
}
stop_pid() {  # name pid
  local _; kill -TERM "$2" 2>/dev/null
  for _ in $(seq 1 50); do alive "$2" || { echo "[stop_slurm] $1 ($2) stopped"; return 0; }; sleep 0.1; done
  kill -KILL "$2" 2>/dev/null; echo "[stop_slurm] $1 ($2) killed"
}
our_stepds() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && echo "${p#/proc/}"
  done
}
descendants() {
  local c
  # shellcheck disable=SC2013  # pids are words
  for c in $(cat "/proc/$1"/task/*/children 2>/dev/null); do echo "$c"; descendants "$c"; done
}

# 1. cancel our cluster's jobs while the controller is still up
if pid_of slurmctld "$RUN/slurmctld.pid" >/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    echo "[stop_slurm] cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 1 100); do [ -z "$(squeue -h -t R,CG,PD -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

# 2. daemons, in reverse start order
for pf in "$RUN"/slurmd-*.pid; do
  [ -e "$pf" ] || continue
  if pid=$(pid_of slurmd "$pf"); then stop_pid "slurmd $(basename "$pf" .pid)" "$pid"; fi
done
for s in $(our_stepds); do
  kids=$(descendants "$s")
  echo "[stop_slurm] leftover slurmstepd $s (tasks: ${kids:-none})"
  # shellcheck disable=SC2086
  kill -KILL "$s" $kids 2>/dev/null
done
if pid=$(pid_of slurmctld "$RUN/slurmctld.pid"); then stop_pid slurmctld "$pid"; fi
if pid=$(pid_of munged "$RUN/munged.pid"); then stop_pid munged "$pid"; fi
rc=0
for pf in "$RUN"/*.pid; do
  [ -e "$pf" ] || continue
  n=$(basename "$pf" .pid); n=${n%%-*}
  if pid_of "$n" "$pf" >/dev/null; then echo "[stop_slurm] $n still alive ($pf)" >&2; rc=1
  else rm -f "$pf"; fi
done
exit $rc
