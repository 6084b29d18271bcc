#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, for meshplan's tests, CI and newcomers.
#
#   sudo deploy/slurm/dev-cluster.sh up       # install (Debian packages) if needed, configure, start
#   deploy/slurm/dev-cluster.sh status        # exit 0 and print "up" when jobs can run, else exit 1
#   sudo deploy/slurm/dev-cluster.sh down     # stop the daemons this script started
#
# Idempotent; needs no systemd (the daemons are started directly and tracked by their pid files).
# What runs: munged, slurmctld, slurmd (node "localhost", the machine's CPUs, partition "cpu"),
# and slurmrestd on a UNIX socket with rest_auth/local. Accounting: no slurmdbd; finished jobs are
# written by jobcomp/filetxt to $JOBCOMP_FILE, which the submitters read for jobs slurmctld has
# purged (MinJobAge=$MIN_JOB_AGE_S s). Debian 12's Slurm (22.05) ships no auth/jwt plugin, so
# slurmrestd's JWT authentication cannot run here; see docs/submissions.md.
set -euo pipefail

SLURM_CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
PARTITION=${MESHPLAN_DEV_PARTITION:-cpu}
MIN_JOB_AGE_S=${MESHPLAN_DEV_MIN_JOB_AGE_S:-5}
JOBCOMP_FILE=/var/log/slurm/jobcomp.log
RESTD_SOCKET=/run/slurmrestd/slurmrestd.socket
RESTD_PIDFILE=/run/slurmrestd/slurmrestd.pid
RESTD_LOG=/var/log/slurm/slurmrestd.log
# openssh-server: the ssh transport's test starts its own sshd on 127.0.0.1 as a "login node"
PACKAGES=(munge slurm-wlm slurmctld slurmd slurm-client slurmrestd openssh-server openssh-client)

# Daemons keep the directory they were started in as their working directory: start them from
# / so that removing the caller's directory (a test's tmp dir, a checkout) cannot break them
# (slurmrestd fails its requests once its working directory is gone). No path below is relative.
cd /

log() { echo "dev-cluster: $*" >&2; }

need_root() {
  if [[ $(id -u) -ne 0 ]]; then
    log "'$1' must run as root"
    exit 2
  fi
}

pid_alive() { # pidfile
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

write_config() {
  # slurmd -C reports this machine's real CPU layout and memory; the node is named localhost so
  # the configuration does not depend on the host name.
  local hw
  hw=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //')
  local tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
# Written by meshplan's deploy/slurm/dev-cluster.sh; rewritten on every 'up'.
ClusterName=meshplan-dev
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
# start batch jobs at submit time (the default lets slurmctld defer them by up to 3 s)
SchedulerParameters=batch_sched_delay=0
MinJobAge=$MIN_JOB_AGE_S
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP_FILE
NodeName=localhost NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP
EOF
  if ! cmp -s "$tmp" "$SLURM_CONF"; then
    install -m 0644 "$tmp" "$SLURM_CONF"
    log "wrote $SLURM_CONF"
    CONFIG_CHANGED=1
  fi
  rm -f "$tmp"
}

start_munge() {
  install -d -o munge -g munge -m 0755 /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  if ! pid_alive /run/munge/munged.pid; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
  fi
}

start_slurm() {
  install -d -o slurm -g slurm -m 0755 /run/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd \
    /var/log/slurm
  touch "$JOBCOMP_FILE"
  chown slurm:slurm "$JOBCOMP_FILE"
  chmod 0644 "$JOBCOMP_FILE"
  if [[ ${CONFIG_CHANGED:-0} == 1 ]]; then
    stop_daemons
  fi
  if ! pid_alive /run/slurm/slurmctld.pid; then
    log "starting slurmctld"
    /usr/sbin/slurmctld
  fi
  if ! pid_alive /run/slurm/slurmd.pid; then
    log "starting slurmd"
    /usr/sbin/slurmd -N localhost
  fi
  if ! pid_alive "$RESTD_PIDFILE"; then
    log "starting slurmrestd on unix:$RESTD_SOCKET"
    install -d -m 0755 /run/slurmrestd
    rm -f "$RESTD_SOCKET"
    # rest_auth/local only serves UNIX sockets; the connecting uid is checked with SO_PEERCRED.
    # slurmrestd refuses to run as root unless told to: this dev cluster's jobs run as root.
    # Only the openapi/v0.0.38 plugin is loaded: the dbv0.0.38 one exits without slurmdbd.
    SLURMRESTD_SECURITY=disable_user_check setsid /usr/sbin/slurmrestd -a rest_auth/local \
      -s openapi/v0.0.38 "unix:$RESTD_SOCKET" >>"$RESTD_LOG" 2>&1 </dev/null &
    echo $! >"$RESTD_PIDFILE"
  fi
}

wait_ready() {
  local i
  for i in $(seq 1 60); do
    if cluster_ready; then
      log "up: partition $PARTITION, $(sinfo -h -o '%c CPUs' -p "$PARTITION")"
      return 0
    fi
    # a node left DOWN by an earlier unclean stop comes back once slurmd answers
    if ((i == 10)); then scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true; fi
    sleep 0.5
  done
  log "not ready after 30 s; see /var/log/slurm/slurmctld.log and slurmd.log"
  return 1
}

cluster_ready() {
  [[ -S $RESTD_SOCKET ]] && pid_alive "$RESTD_PIDFILE" || return 1
  scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  local state
  state=$(sinfo -h -n localhost -o '%T' 2>/dev/null | head -1)
  [[ $state =~ ^(idle|mixed|allocated|completing)$ ]]
}

stop_pidfile() { # name pidfile
  if pid_alive "$2"; then
    local pid
    pid=$(cat "$2")
    log "stopping $1 (pid $pid)"
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$2"
}

stop_daemons() {
  stop_pidfile slurmrestd "$RESTD_PIDFILE"
  stop_pidfile slurmd /run/slurm/slurmd.pid
  stop_pidfile slurmctld /run/slurm/slurmctld.pid
}

case ${1:-} in
  up)
    need_root up
    install_packages
    write_config
    start_munge
    start_slurm
    wait_ready
    ;;
  down)
    need_root down
    stop_daemons
    stop_pidfile munged /run/munge/munged.pid
    ;;
  status)
    if cluster_ready; then
      echo "up"
      echo "partition $PARTITION"
      echo "slurmrestd unix:$RESTD_SOCKET"
      echo "jobcomp $JOBCOMP_FILE"
      exit 0
    fi
    echo "down"
    exit 1
    ;;
  *)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
