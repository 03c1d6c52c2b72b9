#!/usr/bin/env bash
# A real single-node Slurm cluster for the tests, started as root without systemd, its
# state, logs, sockets and pid files all in one temporary folder.
#
#   source tests/slurm_cluster.sh
#   slurm_cluster_start DIR || skip "$SLURM_CLUSTER_WHY"   # exports SLURM_CONF
#   ...                                                    # sbatch, squeue, scontrol
#   slurm_cluster_stop DIR                                 # only the daemons it started
#
# slurm_cluster_start returns 1 with the reason in SLURM_CLUSTER_WHY when it cannot start
# one (not root, packages missing, a daemon that does not come up). Lines in
# SLURM_CLUSTER_EXTRA go into slurm.conf too (MaxArraySize=4).

SLURM_CLUSTER_WHY=""

# The pid in a pid file, if that process is still alive.
_slurm_pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

slurm_cluster_stop() {
  local dir=$1 f pid
  for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    pid=$(_slurm_pid_alive "$f") || continue
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

slurm_cluster_start() {
  local dir=$1 t
  if [ "$(id -u)" != 0 ]; then SLURM_CLUSTER_WHY="starting Slurm's daemons needs root"; return 1; fi
  for t in munged mungekey slurmctld slurmd sbatch squeue scontrol; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || {
      SLURM_CLUSTER_WHY="$t is not installed (apt-get install slurmctld slurmd slurm-client munge; scripts/setup.sh --test does)"
      return 1; }
  done
  export PATH="$PATH:/usr/sbin"
  mkdir -p "$dir"/munge-etc "$dir"/munge-run "$dir"/state "$dir"/spool "$dir"/dev
  chmod 700 "$dir"/munge-etc
  chmod 755 "$dir"/munge-run "$dir"
  mungekey --create --keyfile="$dir/munge-etc/munge.key" >/dev/null 2>&1 || {
    SLURM_CLUSTER_WHY="mungekey --create failed"; return 1; }
  chown root:root "$dir"/munge-etc/munge.key
  chmod 400 "$dir"/munge-etc/munge.key
  # munged refuses a socket folder others may write; --force lets it run as root
  munged --force --key-file="$dir/munge-etc/munge.key" --socket="$dir/munge-run/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" 2>"$dir/munged.err" || {
    SLURM_CLUSTER_WHY="munged did not start: $(head -c 300 "$dir/munged.err")"; return 1; }
  # two fake GPUs: character devices, which gres.conf accepts (plain files it does not)
  local gres="" gresconf=""
  if mknod "$dir/dev/gpu0" c 1 3 2>/dev/null && mknod "$dir/dev/gpu1" c 1 3 2>/dev/null; then
    gres="Gres=gpu:2"
    gresconf="GresTypes=gpu"
    printf 'NodeName=localhost Name=gpu File=%s/dev/gpu[0-1]\n' "$dir" > "$dir/gres.conf"
  fi
  local cpus
  cpus=$(slurmd -C 2>/dev/null | sed -n 's/^NodeName=[^ ]* //p' | head -1)
  [ -n "$cpus" ] || cpus="CPUs=$(nproc)"
  cat > "$dir/slurm.conf" <<EOF
ClusterName=layerbench-test
SlurmctldHost=localhost(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$dir/munge-run/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$((20000 + RANDOM % 20000))
SlurmdPort=$((40000 + RANDOM % 20000))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MpiDefault=none
MinJobAge=300
KillWait=5
$gresconf
${SLURM_CLUSTER_EXTRA:-}
NodeName=localhost NodeAddr=127.0.0.1 $cpus $gres State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -i 2>"$dir/slurmctld.err" || { SLURM_CLUSTER_WHY="slurmctld did not start: $(tail -c 300 "$dir/slurmctld.log" 2>/dev/null)"; return 1; }
  slurmd -N localhost 2>"$dir/slurmd.err" || { SLURM_CLUSTER_WHY="slurmd did not start: $(tail -c 300 "$dir/slurmd.log" 2>/dev/null)"; return 1; }
  # the node comes up idle within a few seconds
  for _ in $(seq 100); do
    if sinfo -h -o '%t' 2>/dev/null | grep -q '^idle'; then return 0; fi
    sleep 0.2
  done
  SLURM_CLUSTER_WHY="the node did not come up idle: $(sinfo -h 2>&1 | head -2) $(tail -c 300 "$dir/slurmd.log" 2>/dev/null)"
  return 1
}

# Waits until none of the given jobs is in the queue (pending or running); 1 after
# the seconds given.
slurm_wait_jobs() {
  local limit=$1; shift
  local ids
  ids=$(IFS=,; echo "$*")
  for _ in $(seq $((limit * 5))); do
    [ -z "$(squeue -h -j "$ids" -o %i 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}
