#!/usr/bin/env bash
# Bring up a single-node SLURM cluster (munge + [mariadb + slurmdbd] + slurmctld + slurmd)
# on this machine, as root, without systemd and without cgroups. Idempotent. Used by
# tests/test_slurm.py; SLURM_BASE=<folder> down.sh stops what it started.
#   SLURM_WITH_DBD=1 (default): accounting via slurmdbd+mariadb, so `sacct` works
#                               (snakemake-executor-plugin-slurm's default status command).
#   SLURM_WITH_DBD=0          : no accounting; use `--slurm-status-command squeue` in snakemake.
#   SLURM_INSTALL=1 (default) : apt-get install missing Debian packages.
set -euo pipefail

BASE=${SLURM_BASE:?set SLURM_BASE to a folder that holds the cluster state}
ETC=$BASE/etc
VAR=$BASE/var
RUN=$VAR/run
LOG=$VAR/log
WITH_DBD=${SLURM_WITH_DBD:-1}
DB_PORT=${SLURM_DB_PORT:-3306}
STARTED=$RUN/started.list      # "name pid" of every daemon THIS script started

say() { echo "[up.sh $(date +%T)] $*"; }
alive() { # alive PIDFILE COMM -> true if a process with that pid and command name runs
  [ -s "$1" ] || return 1
  local pid; pid=$(cat "$1")
  [ -r "/proc/$pid/comm" ] && [ "$(cat /proc/$pid/comm)" = "$2" ]
}
record() { echo "$1 $(cat "$2")" >> "$STARTED"; }
wait_for() { # wait_for SECONDS CMD... -> poll every 0.2 s
  local n=$(( $1 * 5 )); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "timeout waiting for: $*" >&2; return 1
}

# --- 0. packages -------------------------------------------------------------
pkgs="munge slurmctld slurmd slurm-client"
[ "$WITH_DBD" = 1 ] && pkgs="$pkgs slurmdbd mariadb-server"
missing=""; for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  [ "${SLURM_INSTALL:-1}" = 1 ] || { echo "missing packages:$missing" >&2; exit 1; }
  say "installing:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$ETC" "$RUN" "$LOG" "$VAR/spool/slurmctld" "$VAR/spool/slurmd"
touch "$STARTED"

# --- 1. host name must resolve (slurmd derives its NodeName from it) ---------
H=$(hostname -s)
getent hosts "$H" >/dev/null || { say "adding $H to /etc/hosts"; echo "127.0.0.1 $H" >> /etc/hosts; }

# --- 2. config ---------------------------------------------------------------
# Node line from the hardware as slurmd sees it; RealMemory lowered to 90 % so the
# node is never drained for "Low RealMemory".
NODE=$(slurmd -C | head -1)
MEM=$(echo "$NODE" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
NODE=$(echo "$NODE" | sed "s/RealMemory=[0-9]*/RealMemory=$(( MEM * 9 / 10 ))/")
if [ "$WITH_DBD" = 1 ]; then
  # job_comment: sacct shows the comment the Snakemake plugin gives each job (rule_<name>...)
  ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux"
else
  ACCT="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
cat > "$ETC/slurm.conf.new" <<EOF
ClusterName=ci
SlurmctldHost=${H}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# no cgroups: plain /proc based process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$ACCT
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
# keep finished jobs visible to squeue/scontrol for 10 min (plugin needs >= 3x its poll interval)
MinJobAge=600
DefMemPerCPU=1000
StateSaveLocation=$VAR/spool/slurmctld
SlurmdSpoolDir=$VAR/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$NODE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
conf_changed=0
cmp -s "$ETC/slurm.conf.new" "$ETC/slurm.conf" || { mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"; conf_changed=1; }
rm -f "$ETC/slurm.conf.new"
# Must be at the compiled-in default path: snakemake-executor-plugin-slurm-jobstep strips
# SLURM_CONF (all SLURM_* vars) before calling srun inside the job.
mkdir -p /etc/slurm
ln -sfn "$ETC/slurm.conf" /etc/slurm/slurm.conf

# --- 3. munge ----------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  say "creating munge key"; mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge; chown munge:munge /run/munge; chmod 755 /run/munge
if ! alive /run/munge/munged.pid munged; then
  say "starting munged"
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged
  wait_for 10 sh -c 'munge -n | unmunge'
  record munged /run/munge/munged.pid
fi

# --- 4. accounting: mariadb + slurmdbd ---------------------------------------
if [ "$WITH_DBD" = 1 ]; then
  SOCK=$RUN/mysqld.sock
  if [ ! -d "$VAR/mysql/mysql" ]; then
    say "initialising mariadb datadir"
    mariadb-install-db --user=root --datadir="$VAR/mysql" --auth-root-authentication-method=normal \
      --skip-test-db > "$LOG/mariadb-install.log" 2>&1
  fi
  if ! alive "$RUN/mariadb.pid" mariadbd; then
    say "starting mariadbd on 127.0.0.1:$DB_PORT"
    nohup mariadbd --user=root --datadir="$VAR/mysql" --socket="$SOCK" --bind-address=127.0.0.1 \
      --port="$DB_PORT" --pid-file="$RUN/mariadb.pid" --log-error="$LOG/mariadb.err" \
      --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
    wait_for 30 mariadb-admin --socket="$SOCK" ping
    wait_for 5 test -s "$RUN/mariadb.pid"
    record mariadbd "$RUN/mariadb.pid"
  fi
  mariadb --socket="$SOCK" -uroot -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat > "$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC/slurmdbd.conf"            # slurmdbd refuses group/other-readable conf
  ln -sfn "$ETC/slurmdbd.conf" /etc/slurm/slurmdbd.conf
  if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    say "starting slurmdbd"
    slurmdbd
    wait_for 30 bash -c 'exec 3<>/dev/tcp/127.0.0.1/6819'
    record slurmdbd "$RUN/slurmdbd.pid"
  fi
fi

# --- 5. slurmctld + slurmd ---------------------------------------------------
if ! alive "$RUN/slurmctld.pid" slurmctld; then
  say "starting slurmctld"
  slurmctld
  wait_for 30 scontrol ping
  record slurmctld "$RUN/slurmctld.pid"
elif [ "$conf_changed" = 1 ]; then
  say "slurm.conf changed -> scontrol reconfigure"; scontrol reconfigure
fi
if ! alive "$RUN/slurmd.pid" slurmd; then
  say "starting slurmd"
  slurmd
  wait_for 10 test -s "$RUN/slurmd.pid"
  record slurmd "$RUN/slurmd.pid"
fi
# node must come up idle (ReturnToService=2 clears stale DOWN states)
wait_for 30 sh -c "sinfo -h -n $H -o %T | grep -qE '^(idle|mixed|allocated)'"
if [ "$WITH_DBD" = 1 ]; then
  wait_for 30 sh -c "sacctmgr -n show cluster format=cluster | grep -q ci"   # cluster auto-registered
fi
srun -t 1 true                            # end-to-end smoke test
say "cluster up:"; sinfo
