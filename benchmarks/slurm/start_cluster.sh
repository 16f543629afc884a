#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for perflab's slurm test tier
# (tests/test_slurm.py, docs/slurm.md):
#   bash benchmarks/slurm/start_cluster.sh && pytest -m slurm
#   bash benchmarks/slurm/stop_cluster.sh           # --purge also forgets its state
#
# Installs munge, slurmctld, slurmd and the client tools with apt if they are missing
# (Debian/Ubuntu, as root), writes /etc/slurm/slurm.conf for this host's real CPUs and
# memory, starts munged, slurmctld and slurmd, and waits until sinfo shows the node
# idle. Idempotent: run it again and it only starts what is not running (and restarts
# the daemons when the host's CPUs or memory, hence slurm.conf, changed).
#
# Made for containers and throw-away VMs: no systemd (daemons are started directly), no
# cgroups (proctrack/linuxproc, task/none), no accounting database (slurmdbd), daemons
# running as root. It never overwrites a slurm.conf it did not write.
set -euo pipefail

# state, logs and pid files; PERFLAB_SLURM_STATE moves them
STATE=${PERFLAB_SLURM_STATE:-/var/spool/perflab-slurm}
CONF=/etc/slurm/slurm.conf
# the first line of every slurm.conf this script writes: the one it may replace
MARK="# written by perflab benchmarks/slurm/start_cluster.sh"
# seconds to wait for the node to come up idle (slurmd registers within a few)
WAIT_S=${PERFLAB_SLURM_WAIT_S:-60}

say() { echo "start_cluster: $*"; }
die() {
  echo "start_cluster: error: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"

install_packages() {
  local missing=0 tool
  for tool in munged slurmctld slurmd sinfo sbatch srun scancel; do
    command -v "$tool" >/dev/null || missing=1
  done
  [ "$missing" = 0 ] && return
  command -v apt-get >/dev/null || die "munge/slurm missing and no apt-get: install them yourself"
  say "installing munge, slurmctld, slurmd, slurm-client (apt)"
  export DEBIAN_FRONTEND=noninteractive
  # a fresh image has no package lists yet: update only when the first try fails
  apt-get install -y -q munge slurmctld slurmd slurm-client >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q munge slurmctld slurmd slurm-client >/dev/null; } ||
    die "apt-get could not install munge slurmctld slurmd slurm-client"
}

# munged: authenticates every message between the SLURM daemons and commands
start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  say "starting munged"
  runuser -u munge -- munged
  # stop_cluster.sh stops munged only when this script started it
  install -d "$STATE"
  touch "$STATE/munged.started"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
    sleep 0.1
  done
  die "munged does not answer (log: /var/log/munge/munged.log)"
}

# slurm.conf for this host, printed
render_conf() {
  local host node
  host=$(hostname -s)
  # slurmd -C: this host's real CPUs, sockets, cores, threads and memory (MB), as slurmd
  # will report them when it registers (a mismatch would drain the node)
  node=$(slurmd -C | head -n 1)
  case "$node" in
    NodeName=*) ;;
    *) die "slurmd -C did not describe this node: $node" ;;
  esac
  cat <<EOF
$MARK
# A single-node test cluster for perflab's slurm tier (docs/slurm.md); stop_cluster.sh
# stops it. Not for production: daemons as root, no cgroups, no accounting.
ClusterName=perflab
SlurmctldHost=$host
AuthType=auth/munge
# the daemons run as root: no slurm-owned state directories to set up
SlurmUser=root
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# no cgroups (a container rarely lets slurmd manage them): processes are tracked by
# their parent chain, and tasks are not bound to cores
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
# no accounting: no slurmdbd, no sacct (submitit then learns a job ended from its result
# file, or from squeue in perflab.scaleout)
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# cores and memory are consumable, so two 1-CPU jobs share the node and a job asking
# for more memory than the node has is refused, as on a real cluster
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# a node that went down (a restart of this script) comes back by itself
ReturnToService=2
# seconds between scancel's SIGTERM and SIGKILL (SLURM's default, stated): the time a
# cancelled perflab group has to write its partial summary and report
KillWait=30
# no mail is sent from a test cluster (the default program is missing in containers)
MailProg=/bin/true
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

# write slurm.conf; prints "changed" when it differs from what was there
write_conf() {
  local new
  if [ -e "$CONF" ] && [ "$(head -n 1 "$CONF")" != "$MARK" ]; then
    die "$CONF exists and was not written by this script; move it away to use this test cluster"
  fi
  install -d "$STATE/slurmctld" "$STATE/slurmd" "$STATE/log" /etc/slurm
  new=$(render_conf)
  if [ -e "$CONF" ] && [ "$(cat "$CONF")" = "$new" ]; then
    return
  fi
  printf '%s\n' "$new" >"$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
  echo changed
}

# the pid in a pid file, if that process is alive
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null
}

start_daemons() {
  local changed=$1
  if [ -n "$changed" ] && { alive "$STATE/slurmctld.pid" || alive "$STATE/slurmd.pid"; }; then
    say "slurm.conf changed: restarting the daemons"
    bash "$(dirname "$0")/stop_cluster.sh" --daemons-only
  fi
  if ! alive "$STATE/slurmctld.pid"; then
    say "starting slurmctld (log: $STATE/log/slurmctld.log)"
    slurmctld
  fi
  if ! alive "$STATE/slurmd.pid"; then
    say "starting slurmd (log: $STATE/log/slurmd.log)"
    slurmd
  fi
}

# wait until sinfo shows the node idle
wait_idle() {
  local host state=""
  host=$(hostname -s)
  for _ in $(seq $((WAIT_S * 2))); do
    state=$(timeout 10 sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    case "$state" in
      idle) say "node $host idle: $(sinfo -h -N -o '%N %c CPUs %m MB %P')"; return ;;
      down* | drain*)
        # a node left down by an earlier session, or drained by a restart: bring it back
        scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  die "node $host not idle after ${WAIT_S} s (sinfo says '${state:-nothing}'); logs in $STATE/log"
}

install_packages
start_munge
changed=$(write_conf)
start_daemons "$changed"
wait_idle
