#!/usr/bin/env bash
# A single-node Slurm on this machine, for trying the launcher's slurm backend and for its tests.
#
#   slurm_local.sh start   install slurm-wlm + munge if missing (apt-get, needs root), write a slurm.conf for this
#                          host under $SF_SLURM_DIR, start munged, slurmctld and slurmd, wait until the node is idle
#   slurm_local.sh stop    stop the daemons this script started (by their pid files)
#   slurm_local.sh env     print the SLURM_CONF line to export before using sbatch/squeue with this cluster
#
# Idempotent: `start` with the daemons already up only checks them. The configuration lives entirely in
# $SF_SLURM_DIR (default /tmp/sf_slurm) and the daemons use their own ports, so a system Slurm (if any) is not
# touched; commands find this cluster through SLURM_CONF=$SF_SLURM_DIR/slurm.conf. No cgroups, no accounting:
# processes are tracked by /proc (proctrack/linuxproc), which works in containers.
# Exit codes: 0 ready, 3 cannot be set up here (the reason is printed on the last line), 1 anything else.
set -uo pipefail

DIR="${SF_SLURM_DIR:-/tmp/sf_slurm}"
CONF="$DIR/slurm.conf"
HOST="$(hostname -s)"
CPUS="${SF_SLURM_CPUS:-$(nproc)}"
CTLD_PORT="${SF_SLURM_CTLD_PORT:-16817}"
SLURMD_PORT="${SF_SLURM_SLURMD_PORT:-16818}"
MUNGE_SOCKET="$DIR/munge/munge.socket"
export SLURM_CONF="$CONF"

cannot() {
    echo "CANNOT: $*" >&2
    exit 3
}

log() { echo "[slurm_local] $*" >&2; }

# pid_alive PIDFILE: the daemon named like the file (slurmctld.pid -> slurmctld) runs with that pid (a stale file's
# pid may belong to another process by now)
pid_alive() {
    [[ -f "$1" ]] || return 1
    local pid name
    pid="$(cat "$1")"
    name="$(basename "$1" .pid)"
    [[ -n "$pid" ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]]
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || cannot "Slurm is not installed and installing it (apt-get) needs root"
    command -v apt-get >/dev/null || cannot "Slurm is not installed and there is no apt-get to install it"
    log "installing slurm-wlm and munge with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # An old package list may name versions the mirror no longer has: update once, then install.
    if ! apt-get install -y -q --no-install-recommends slurm-wlm munge >"$DIR/apt.log" 2>&1; then
        apt-get update -q >>"$DIR/apt.log" 2>&1 || cannot "apt-get update failed (see $DIR/apt.log)"
        apt-get install -y -q --no-install-recommends slurm-wlm munge >>"$DIR/apt.log" 2>&1 \
            || cannot "apt-get install slurm-wlm munge failed (see $DIR/apt.log)"
    fi
}

write_conf() {
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/log"
    cat >"$CONF.tmp" <<EOF
# Written by sample_factory/launcher/slurm_local.sh: a one-node cluster on this host.
ClusterName=sflocal
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=300
KillWait=30
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
}

start_munge() {
    if pid_alive "$DIR/munged.pid" && munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
        return 0
    fi
    local key=/etc/munge/munge.key
    if [[ ! -s "$key" ]]; then
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$key" >/dev/null 2>&1 || cannot "mungekey could not create $key"
        else
            dd if=/dev/urandom of="$key" bs=1 count=1024 status=none || cannot "cannot write $key"
        fi
    fi
    chmod 0400 "$key" 2>/dev/null || true
    # --force: run as root and accept this folder's permissions (a test cluster, not a secured one)
    munged --force --socket="$MUNGE_SOCKET" --pid-file="$DIR/munged.pid" --key-file="$key" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" >/dev/null 2>&1 \
        || cannot "munged did not start (see $DIR/log/munged.log)"
    for _ in $(seq 50); do
        munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cannot "munged does not answer on $MUNGE_SOCKET"
}

node_state() { sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n1; }

start() {
    mkdir -p "$DIR"
    install_packages
    if pid_alive "$DIR/slurmctld.pid" && pid_alive "$DIR/slurmd.pid" && [[ "$(node_state)" =~ ^(idle|mixed|allocated) ]]; then
        log "already running (SLURM_CONF=$CONF)"
        echo "already-running"
        return 0
    fi
    write_conf
    start_munge
    if ! pid_alive "$DIR/slurmctld.pid"; then
        # -i: ignore (reset) saved state from an earlier, different configuration
        slurmctld -i -f "$CONF" || cannot "slurmctld did not start (see $DIR/log/slurmctld.log)"
    fi
    if ! pid_alive "$DIR/slurmd.pid"; then
        slurmd -f "$CONF" || cannot "slurmd did not start (see $DIR/log/slurmd.log)"
    fi
    local state=""
    for _ in $(seq 120); do
        state="$(node_state)"
        if [[ "$state" =~ ^(down|drain) ]]; then
            scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
        fi
        [[ "$state" =~ ^(idle|mixed|allocated) ]] && break
        sleep 0.5
    done
    [[ "$state" =~ ^(idle|mixed|allocated) ]] \
        || cannot "the node did not become idle (state '${state:-unknown}'; see $DIR/log/slurmctld.log and slurmd.log)"
    log "ready: node $HOST ($CPUS CPUs), SLURM_CONF=$CONF"
    echo "started"
}

stop_pid() {
    local f="$1"
    pid_alive "$f" || return 0
    local pid
    pid="$(cat "$f")"
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop() {
    if pid_alive "$DIR/slurmctld.pid"; then
        # jobs would outlive the daemons (their slurmstepd is not a daemon's child): cancel them first
        squeue -h -o '%i' 2>/dev/null | xargs -r scancel 2>/dev/null
        for _ in $(seq 50); do
            [[ -z "$(squeue -h -o '%i' 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    stop_pid "$DIR/slurmd.pid"
    stop_pid "$DIR/slurmctld.pid"
    stop_pid "$DIR/munged.pid"
    log "stopped"
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 start|stop|env" >&2
    exit 1
    ;;
esac
