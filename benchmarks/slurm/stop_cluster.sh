#!/usr/bin/env bash
# Stops the single-node test cluster of start_cluster.sh (docs/slurm.md):
#   bash benchmarks/slurm/stop_cluster.sh            # cancel its jobs, stop the daemons
#   bash benchmarks/slurm/stop_cluster.sh --purge    # ... and delete its state and slurm.conf
# munged is stopped only when start_cluster.sh started it. Processes are stopped by the
# ids in their pid files, nothing by name. Safe to run when nothing is running.
set -euo pipefail

STATE=${PERFLAB_SLURM_STATE:-/var/spool/perflab-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by perflab benchmarks/slurm/start_cluster.sh"

daemons_only=0 purge=0
for arg in "$@"; do
  case "$arg" in
    --daemons-only) daemons_only=1 ;; # start_cluster.sh restarting after a config change
    --purge) purge=1 ;;
    *) echo "usage: $0 [--purge]" >&2 && exit 2 ;;
  esac
done

say() { echo "stop_cluster: $*"; }

# stop the process whose id is in pid file $1 (TERM, then KILL after 10 s)
stop_pid() {
  local file=$1 pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping $(basename "$file" .pid) ($pid)"
    kill "$pid"
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$file"
}

if [ "$daemons_only" = 0 ] && [ -s "$STATE/slurmctld.pid" ] && command -v squeue >/dev/null; then
  # every job of this test cluster: a job left running would outlive its slurmd
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    say "cancelling jobs: $(echo $jobs)"
    # shellcheck disable=SC2086
    scancel $jobs || true
    for _ in $(seq 60); do
      [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null || true)" ] && break
      sleep 1
    done
  fi
fi
stop_pid "$STATE/slurmd.pid"
stop_pid "$STATE/slurmctld.pid"
if [ "$daemons_only" = 0 ] && [ -e "$STATE/munged.started" ]; then
  stop_pid /run/munge/munged.pid
  rm -f "$STATE/munged.started"
fi
if [ "$purge" = 1 ]; then
  say "deleting $STATE"
  rm -rf "$STATE"
  if [ -e "$CONF" ] && [ "$(head -n 1 "$CONF")" = "$MARK" ]; then
    rm -f "$CONF"
  fi
fi
