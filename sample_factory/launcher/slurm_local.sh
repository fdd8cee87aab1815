#!/usr/bin/env bash
# A single-node Slurm on this machine, for trying the launcher's slurm backend and for its tests.
#
#   slurm_local.sh start   install slurm-wlm + munge if missing (apt-get, needs root), write a slurm.conf for this
#                          host in a private folder, start munged, slurmctld and slurmd, wait until the node is idle
#   slurm_local.sh stop    stop the daemons this script started (by their pid files)
#   slurm_local.sh env     print the SLURM_CONF line to export before using sbatch/squeue with this cluster
#
# Idempotent: `start` with the daemons already up only checks them. The configuration, the munge key, the state and
# the logs live entirely in one private folder (mode 700, owned by this user): a fresh `mktemp -d` under $TMPDIR
# (default /tmp) whose path is remembered in $STATE_FILE for `stop` and `env`, or $SF_SLURM_DIR if set (created
# with mode 700, or refused if it exists and is not private: the daemons run as root and write there, so a folder
# someone else could write to would let them plant symlinks). The daemons use their own ports, so a system Slurm
# (if any) is not touched; commands find this cluster through SLURM_CONF=<folder>/slurm.conf. No cgroups, no
# accounting: processes are tracked by /proc (proctrack/linuxproc), which works in containers.
# Exit codes: 0 ready, 3 cannot be set up here (the reason is printed on the last line), 1 anything else.
set -uo pipefail

STATE_FILE="${XDG_STATE_HOME:-$HOME/.local/state}/sample_factory/slurm_local_dir"
HOST="$(hostname -s)"
CPUS="${SF_SLURM_CPUS:-$(nproc)}"
CTLD_PORT="${SF_SLURM_CTLD_PORT:-16817}"
SLURMD_PORT="${SF_SLURM_SLURMD_PORT:-16818}"

cannot() {
    echo "CANNOT: $*" >&2
    exit 3
}

log() { echo "[slurm_local] $*" >&2; }

# private_dir DIR: a real folder (not a symlink) owned by this user that no one else may read or write
private_dir() {
    [[ -d "$1" && ! -L "$1" ]] || return 1
    local owner mode
    read -r owner mode < <(stat -c '%u %a' "$1") || return 1
    [[ "$owner" == "$(id -u)" ]] && (((8#$mode & 8#077) == 0))
}

# choose_dir CREATE: set DIR to the cluster's folder (CREATE=1: make a fresh one if there is none yet)
choose_dir() {
    if [[ -n "${SF_SLURM_DIR:-}" ]]; then
        DIR="$SF_SLURM_DIR"
        if [[ "$1" == 1 && ! -e "$DIR" && ! -L "$DIR" ]]; then
            mkdir -m 700 "$DIR" || cannot "cannot create $DIR"
        fi
        if [[ -e "$DIR" || -L "$DIR" ]]; then
            private_dir "$DIR" || cannot "$DIR (SF_SLURM_DIR) is not a private folder of this user (mode 700, no symlink)"
        else
            DIR=""
        fi
        return 0
    fi
    DIR="$(cat "$STATE_FILE" 2>/dev/null)"
    if [[ -n "$DIR" ]] && private_dir "$DIR"; then
        return 0
    fi
    DIR=""
    [[ "$1" == 1 ]] || return 0
    DIR="$(mktemp -d "${TMPDIR:-/tmp}/sf_slurm.XXXXXXXX")" || cannot "mktemp -d failed"
    mkdir -p -m 700 "$(dirname "$STATE_FILE")" && echo "$DIR" >"$STATE_FILE.tmp" && mv "$STATE_FILE.tmp" "$STATE_FILE" \
        || cannot "cannot write $STATE_FILE"
}

set_paths() {
    CONF="$DIR/slurm.conf"
    MUNGE_SOCKET="$DIR/munge/munge.socket"
    export SLURM_CONF="$CONF"
}

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
    local key="$DIR/munge/munge.key"  # this cluster's own key: a system munge's is left alone
    if [[ ! -s "$key" ]]; then
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
    choose_dir 1
    set_paths
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
    choose_dir 0
    [[ -n "$DIR" && -d "$DIR" ]] || {
        log "no cluster of this script to stop"
        return 0
    }
    set_paths
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
env)
    choose_dir 0
    [[ -n "$DIR" ]] || {
        echo "no cluster started by $0 (run: $0 start)" >&2
        exit 1
    }
    set_paths
    echo "export SLURM_CONF=$CONF"
    ;;
*)
    echo "usage: $0 start|stop|env" >&2
    exit 1
    ;;
esac
