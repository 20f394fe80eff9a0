#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for tests: `up` installs (if missing) and
# starts munged, slurmctld and slurmd; `down` stops exactly the daemons `up` started, by the
# process ids in their pid files. Needs root. State lives in $SLURM_LOCAL_DIR.
set -euo pipefail
D=${SLURM_LOCAL_DIR:-/tmp/trainer-slurm}
HOST=$(hostname -s)
CPUS=${SLURM_LOCAL_CPUS:-8}

log() { echo "local_cluster: $*" >&2; }

alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

stop() {  # stop the daemon whose pid file is $1
  [ -s "$1" ] || return 0
  local pid; pid=$(cat "$1"); rm -f "$1"
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

down() {
  stop "$D/slurmd.pid"
  stop "$D/slurmctld.pid"
  if [ -e "$D/munged.ours" ]; then stop /run/munge/munged.pid; rm -f "$D/munged.ours"; fi
}

up() {
  down
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null \
     || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
  fi
  # munge authenticates slurm's messages; it runs as user munge with a private key.
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge /etc/munge/munge.key && chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  rm -rf "$D"; mkdir -p "$D/state" "$D/spool" "$D/log"
  if ! { [ -s /run/munge/munged.pid ] && alive "$(cat /run/munge/munged.pid)"; }; then
    runuser -u munge -- /usr/sbin/munged
    touch "$D/munged.ours"
  fi
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  # No cgroups, no accounting: nothing that depends on the container's setup.
  mkdir -p /etc/slurm
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=trainer
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  /usr/sbin/slurmctld
  /usr/sbin/slurmd
  for _ in $(seq 150); do
    sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && { log "up (node $HOST)"; return 0; }
    sleep 0.2
  done
  log "the node did not become ready"; tail -n 20 "$D"/log/*.log >&2; exit 1
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
