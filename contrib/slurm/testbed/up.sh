#!/usr/bin/env bash
# Start asrpt's local Slurm test-bed: one host, four fake nodes, fake typed GPUs and NPUs.
#
#   up.sh DIR [--with-slurmdbd] [--with-lua-plugin]
#   eval "$(up.sh DIR)"          # stdout is only export lines; the last one sets SLURM_CONF
#
# The cluster (every node declares 32 CPUs; CR_Core, so memory is not a consumed resource):
#
#   node   GRES         Slurm partitions          asrpt partition (DIR/asrpt.toml)
#   node1  gpu:a100:8   a100, gpu (default)       a100
#   node2  gpu:a100:8   a100, gpu (default)       a100
#   node3  gpu:v100:4   v100, gpu (default)       v100
#   node4  npu:8        npu                       npu
#
# `gpu` is the default partition and spans both GPU types, as on a real mixed cluster: a job
# sent there with an untyped `--gres=gpu:N` may run on a100 or v100, and the daemon chooses.
# The per-type partitions a100/v100/npu are what the daemon's partitions (one accelerator
# type and one interconnect each) are built from.
#
# Options:
#   --with-slurmdbd    also run a private mariadbd and slurmdbd, so that sacct works
#                      (needs: slurmdbd mariadb-server).
#   --with-lua-plugin  enable JobSubmitPlugins=lua with contrib/slurm/job_submit.lua copied to
#                      DIR/etc (ASRPT_TESTBED_LUA=FILE uses another file). No extra package:
#                      Debian's slurm-wlm-basic-plugins already pulls in liblua5.1-0.
#                      The copy's "local SPOOL_DIR = ..." line is rewritten to
#                      DIR/spool-asrpt-plugin (root, 0700; a tmpfs mounted there, unmounted
#                      by down.sh), where it writes one record per submission; asrpt.toml's
#                      [spool] plugin_dir names it.
#
# Environment:
#   ASRPT_TESTBED_PORT_BASE  slurmctld port; slurmd fallback = base+1, slurmdbd = base+2,
#                            mariadbd = base+3, node1..node4 = base+11..base+14. When set, the
#                            ports must be free. When unset, the first free block of
#                            26817, 26837, 26857, ... is taken, so test-beds in different
#                            directories never collide (the choice is serialised with flock).
#   ASRPT_TESTBED_TIMEOUT    seconds to wait for each daemon (default 60).
#
# Installs nothing. Debian 12 (Slurm 22.05) and Debian 13 (Slurm 24.11), as root, no systemd:
#   apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
#   apt-get install -y --no-install-recommends slurmdbd mariadb-server   # for --with-slurmdbd
#
# Everything lives in DIR: etc/ (rendered configs), run/ (pid files, munge socket), log/
# (daemon logs and log/jobcomp.log, one line per finished job), state/, spool/<node>/,
# dev/<node>/ (fake GPU devices), munge/, mysql/, spool-asrpt/, spool-asrpt-plugin/ and asrpt.toml (a daemon
# configuration for this cluster). A re-run after down.sh starts a fresh cluster (job ids
# from 1 again); the munge key and the database files are kept.
# If anything fails, what this run started is stopped again (down.sh) and the exit status is 1.
# Stop with down.sh DIR; slurmctld alone with slurmctld.sh DIR stop|start.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
WITH_DBD=0
WITH_LUA=0
DIR_ARG=""
for arg in "$@"; do
  case "$arg" in
    --with-slurmdbd) WITH_DBD=1 ;;
    --with-lua-plugin) WITH_LUA=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    -*) echo "up.sh: unknown option $arg" >&2; exit 2 ;;
    *) [ -z "$DIR_ARG" ] || { echo "up.sh: only one DIR, got $DIR_ARG and $arg" >&2; exit 2; }
       DIR_ARG="$arg" ;;
  esac
done
[ -n "$DIR_ARG" ] || { echo "usage: up.sh DIR [--with-slurmdbd] [--with-lua-plugin]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "up.sh: must run as root (slurmd runs jobs as their users)" >&2; exit 1; }

log() { echo "up.sh: $*" >&2; }

missing=""
for b in munged munge unmunge slurmctld slurmd scontrol sinfo squeue sbatch scancel flock mknod; do
  command -v "$b" >/dev/null 2>&1 || missing="$missing $b"
done
if [ "$WITH_DBD" = 1 ]; then
  for b in slurmdbd sacct sacctmgr mariadbd mariadb mariadb-install-db; do
    command -v "$b" >/dev/null 2>&1 || missing="$missing $b"
  done
fi
if [ -n "$missing" ]; then
  log "missing commands:$missing"
  log "install: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge$([ "$WITH_DBD" = 1 ] && echo ' slurmdbd mariadb-server')"
  exit 1
fi

LUA_SRC=""
if [ "$WITH_LUA" = 1 ]; then
  LUA_SRC="${ASRPT_TESTBED_LUA:-$REPO/contrib/slurm/job_submit.lua}"
  [ -r "$LUA_SRC" ] || { log "--with-lua-plugin: no readable $LUA_SRC (set ASRPT_TESTBED_LUA=FILE)"; exit 1; }
  # DIR is written into a Lua string and a sed replacement below.
  case "$DIR_ARG" in *[\\\"\|\&\']*) log "--with-lua-plugin: DIR must not contain \\ \" | & or '"; exit 1 ;; esac
fi

mkdir -p "$DIR_ARG"
DIR="$(cd "$DIR_ARG" && pwd)"
CONF="$DIR/etc/slurm.conf"
SOCK="$DIR/run/munge.socket"
TIMEOUT="${ASRPT_TESTBED_TIMEOUT:-60}"
NODES="node1 node2 node3 node4"
export SLURM_CONF="$CONF"

# A process is alive when /proc has it and it is not a zombie: in containers PID 1 may reap
# late, and kill -0 succeeds on a zombie.
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

for f in "$DIR"/run/*.pid; do
  [ -e "$f" ] || continue
  pid="$(cat "$f" 2>/dev/null || true)"
  if [ -n "$pid" ] && alive "$pid"; then
    log "$f: pid $pid is still running; run down.sh $DIR first"
    exit 1
  fi
  rm -f "$f"
done

# Clients of every user need o+x on DIR and all its parents; munged refuses its socket
# directory otherwise. --force turns that into a warning (then only root can use the cluster).
MUNGED_FORCE=""
p="$DIR"
while [ "$p" != / ]; do
  p="$(dirname "$p")"
  if [ -z "$(find "$p" -maxdepth 0 -perm -o+x 2>/dev/null)" ]; then
    log "note: $p is not o+x, so only root can use this test-bed"
    MUNGED_FORCE="--force"
    break
  fi
done

# ---- ports ------------------------------------------------------------------------------------
listening_ports() {  # every local TCP port in LISTEN (state 0A), from /proc: no ss/netstat needed
  local sl local_addr state rest
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | while read -r sl local_addr _ state rest; do
    if [ "$state" = 0A ]; then printf '%d\n' "0x${local_addr##*:}"; fi
  done | sort -un
}
block_ports() { echo "$1 $(($1 + 1)) $(($1 + 2)) $(($1 + 3)) $(($1 + 11)) $(($1 + 12)) $(($1 + 13)) $(($1 + 14))"; }
block_free() {  # base -> 0 when none of its ports is listening
  local busy port
  busy="$(listening_ports)"
  for port in $(block_ports "$1"); do
    if grep -qx "$port" <<< "$busy"; then return 1; fi
  done
}
# Serialise port choice and daemon start-up between concurrent up.sh runs: two runs must not
# both pick a block that is free only because the other has not bound it yet. (The daemons
# are started with fd 9 closed, so they never hold the lock.)
exec 9>"${TMPDIR:-/tmp}/asrpt-testbed-ports.lock"
flock -w 120 9 || { log "could not lock ${TMPDIR:-/tmp}/asrpt-testbed-ports.lock"; exit 1; }
if [ -n "${ASRPT_TESTBED_PORT_BASE:-}" ]; then
  BASE="$ASRPT_TESTBED_PORT_BASE"
  [[ "$BASE" =~ ^[0-9]+$ ]] && [ "$BASE" -ge 1024 ] && [ "$BASE" -le 65500 ] ||
    { log "ASRPT_TESTBED_PORT_BASE=$BASE is not a port number in 1024..65500"; exit 1; }
  block_free "$BASE" || { log "a port of $(block_ports "$BASE") is in use; choose another ASRPT_TESTBED_PORT_BASE"; exit 1; }
else
  BASE=""
  for candidate in $(seq 26817 20 27797); do
    if block_free "$candidate"; then BASE="$candidate"; break; fi
  done
  [ -n "$BASE" ] || { log "no free port block in 26817..27811; set ASRPT_TESTBED_PORT_BASE"; exit 1; }
fi
CTLD_PORT=$BASE
SLURMD_PORT=$((BASE + 1))
DBD_PORT=$((BASE + 2))
DB_PORT=$((BASE + 3))

# ---- layout and configs ---------------------------------------------------------------------
rm -rf "$DIR/state" "$DIR/spool" "$DIR/log"
mkdir -p "$DIR"/{etc,run,log,state,spool,munge,dev,spool-asrpt,spool-asrpt-plugin}
chmod 755 "$DIR" "$DIR"/{etc,run,log,spool,dev}
chmod 700 "$DIR/munge" "$DIR/state"
# The daemon's spool: sticky and world-writable like /tmp (the wrapper writes 0600 files).
chmod 1777 "$DIR/spool-asrpt"
# job_submit.lua's records: written by slurmctld (SlurmUser=root), read by the daemon only. The
# plugin writes only to a memory file system (MEMORY_FS_ONLY), so it gets a tmpfs, as in
# production; without mount rights the copy is told to write to disk.
LUA_ON_DISK=0
if [ "$WITH_LUA" = 1 ] && ! mountpoint -q "$DIR/spool-asrpt-plugin"; then
  if ! mount -t tmpfs -o size=256m,mode=0700 asrpt-testbed "$DIR/spool-asrpt-plugin" 2>/dev/null; then
    log "--with-lua-plugin: cannot mount a tmpfs on $DIR/spool-asrpt-plugin; the plugin writes to disk (MEMORY_FS_ONLY = false)"
    LUA_ON_DISK=1
  fi
fi
chmod 700 "$DIR/spool-asrpt-plugin"
rm -f "$SOCK" "$SOCK.lock" "$DIR/run/mysqld.sock"
for n in $NODES; do mkdir -p "$DIR/spool/$n"; chmod 755 "$DIR/spool/$n"; done

VERSION="$(slurmctld -V | grep -Eo '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1)"
version_at_least() { [ "$(printf '%s\n%s\n' "$1" "$VERSION" | sort -V | head -n 1)" = "$1" ]; }

cat > "$CONF" <<EOF
# asrpt test-bed, rendered by contrib/slurm/testbed/up.sh for Slurm $VERSION.
ClusterName=asrpt-testbed
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
# Only a fallback: every node has its own Port= below (Debian builds multiple-slurmd).
SlurmdPort=$SLURMD_PORT
CommunicationParameters=NoInAddrAny

# A private munged on a private socket; nothing of the host's /etc/munge is used.
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge

# Root daemons, no systemd, no cgroups (Slurm >= 23.11 also reads etc/cgroup.conf).
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
# Nodes claim 32 CPUs and 8 GPUs on a small host: trust the configuration, not the hardware.
SlurmdParameters=config_overrides
ReturnToService=2

StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

Include $DIR/etc/accounting.conf
# One line per finished job (any end state), whether or not slurmdbd runs.
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
# Finished jobs stay visible to squeue/scontrol for this many seconds.
MinJobAge=300
# Cancelled test jobs are sleeps: no need for the default 30 s grace.
KillWait=2

# priority/basic is FIFO: a new job gets 4294901759, 4294901758, ... in submit order, and a
# priority set with "scontrol update JobId=X Priority=N" is kept as set. asrptd writes its
# order ABOVE that automatic range (4294901760..4294967293), so a job submitted between two
# cycles queues behind every job the daemon has ordered instead of overtaking them.
PriorityType=priority/basic
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,npu
EOF
if [ -n "$LUA_SRC" ]; then
  cat >> "$CONF" <<EOF

# job_submit.lua next to this file runs inside slurmctld for every submission.
JobSubmitPlugins=lua
EOF
fi
cat >> "$CONF" <<EOF

NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 11)) CPUs=32 RealMemory=64000 Gres=gpu:a100:8 State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 12)) CPUs=32 RealMemory=64000 Gres=gpu:a100:8 State=UNKNOWN
NodeName=node3 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 13)) CPUs=32 RealMemory=64000 Gres=gpu:v100:4 State=UNKNOWN
NodeName=node4 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + 14)) CPUs=32 RealMemory=64000 Gres=npu:8 State=UNKNOWN
PartitionName=gpu Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP
PartitionName=a100 Nodes=node[1-2] MaxTime=INFINITE State=UP
PartitionName=v100 Nodes=node3 MaxTime=INFINITE State=UP
PartitionName=npu Nodes=node4 MaxTime=INFINITE State=UP
EOF

# gres/gpu needs File= (Count= alone makes slurmd report 0 GPUs and the node INVAL): the files
# are character devices 1:3 (/dev/null's numbers), made below. npu works with Count= alone.
cat > "$DIR/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=node1 Name=gpu Type=a100 File=$DIR/dev/node1/nvidia[0-7]
NodeName=node2 Name=gpu Type=a100 File=$DIR/dev/node2/nvidia[0-7]
NodeName=node3 Name=gpu Type=v100 File=$DIR/dev/node3/nvidia[0-3]
NodeName=node4 Name=npu Count=8
EOF
make_devices() {  # node count
  local i
  mkdir -p "$DIR/dev/$1"
  for ((i = 0; i < $2; i++)); do
    # A regular file also counts (slurmd logs "not a valid character or block device").
    [ -e "$DIR/dev/$1/nvidia$i" ] || mknod -m 666 "$DIR/dev/$1/nvidia$i" c 1 3 2>/dev/null ||
      touch "$DIR/dev/$1/nvidia$i"
  done
}
make_devices node1 8; make_devices node2 8; make_devices node3 4

if [ "$WITH_DBD" = 1 ]; then
  cat > "$DIR/etc/accounting.conf" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# The dbd connection takes its munge socket from here, not from AuthInfo.
AccountingStoragePass=$SOCK
# GRES as TRES (sacct AllocTRES shows gres/gpu:a100=N); fatal without slurmdbd.
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100,gres/npu
EOF
  # slurmdbd refuses a slurmdbd.conf readable by others.
  (umask 077; cat > "$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=asrpt-testbed
StorageLoc=slurm_acct_db
EOF
  )
else
  cat > "$DIR/etc/accounting.conf" <<EOF
# No slurmdbd (up.sh --with-slurmdbd adds it): sacct says accounting storage is disabled.
# AccountingStorageTRES=gres/gpu must not be set without slurmdbd (slurmctld dies).
AccountingStorageType=accounting_storage/none
EOF
  rm -f "$DIR/etc/slurmdbd.conf"
fi

# Slurm >= 23.11 initialises a cgroup plugin in slurmd even with proctrack/linuxproc and
# task/none, and dies without a mounted cgroup fs; 22.05 does not know "disabled".
if version_at_least 23.11; then
  echo "CgroupPlugin=disabled" > "$DIR/etc/cgroup.conf"
else
  rm -f "$DIR/etc/cgroup.conf"
fi
if [ -n "$LUA_SRC" ]; then
  sed -e "s|^local SPOOL_DIR = .*|local SPOOL_DIR = \"$DIR/spool-asrpt-plugin\"|" \
      -e "$([ "$LUA_ON_DISK" = 1 ] && echo 's|^local MEMORY_FS_ONLY = .*|local MEMORY_FS_ONLY = false|' || echo 's|^$||')" \
      "$LUA_SRC" > "$DIR/etc/job_submit.lua"
else
  rm -f "$DIR/etc/job_submit.lua"
fi
chmod 644 "$DIR"/etc/*.conf "$DIR"/etc/*.lua 2>/dev/null || true
[ "$WITH_DBD" = 1 ] && chmod 600 "$DIR/etc/slurmdbd.conf"

# ---- start --------------------------------------------------------------------------------------
STARTED=0
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$STARTED" = 1 ]; then
    log "failed; last lines of the logs in $DIR/log:"
    for f in "$DIR"/log/*.log; do [ -s "$f" ] && { echo "== $f" >&2; tail -n 8 "$f" >&2; }; done
    log "stopping what was started"
    "$HERE/down.sh" "$DIR" >&2 || true
  fi
}
trap on_exit EXIT
die() { log "$*"; exit 1; }

# wait_until WHAT PIDFILES COMMAND...: poll COMMAND until it succeeds; fail when TIMEOUT passes,
# when a pid file has not appeared after 15 s, or as soon as a daemon of PIDFILES has died.
wait_until() {
  local what="$1" pidfiles="$2" start now f pid
  shift 2
  start=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    now=$(date +%s)
    for f in $pidfiles; do
      if [ -s "$f" ]; then
        pid="$(cat "$f")"
        alive "$pid" || die "$what: pid $pid (from $f) has died"
      elif [ $((now - start)) -ge 15 ]; then
        die "$what: $f did not appear within 15 s"
      fi
    done
    [ $((now - start)) -lt "$TIMEOUT" ] || die "$what: not ready after ${TIMEOUT} s"
    sleep 0.1
  done
}

STARTED=1
[ -s "$DIR/munge/munge.key" ] || dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
# shellcheck disable=SC2086
munged $MUNGED_FORCE --key-file="$DIR/munge/munge.key" --socket="$SOCK" \
  --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" 9>&-
munge_works() { munge -n -S "$SOCK" | unmunge -S "$SOCK"; }
wait_until munged "$DIR/run/munged.pid" munge_works

if [ "$WITH_DBD" = 1 ]; then
  DBSOCK="$DIR/run/mysqld.sock"
  NEW_DB=0
  if [ ! -d "$DIR/mysql/mysql" ]; then
    mkdir -p "$DIR/mysql"
    mariadb-install-db --user=root --datadir="$DIR/mysql" --skip-test-db \
      --auth-root-authentication-method=socket > "$DIR/log/mariadb-install.log" 2>&1 ||
      die "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    NEW_DB=1
  fi
  # mariadbd does not daemonise; as root because it must write DIR/run and DIR/log.
  setsid mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$DBSOCK" \
    --pid-file="$DIR/run/mariadbd.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --log-error="$DIR/log/mariadb.log" --skip-name-resolve --innodb-buffer-pool-size=128M \
    < /dev/null > /dev/null 2>&1 9>&- &
  db_works() { mariadb --no-defaults -S "$DBSOCK" -e 'select 1'; }
  wait_until mariadbd "$DIR/run/mariadbd.pid" db_works
  if [ "$NEW_DB" = 1 ]; then
    # Created here because slurmdbd 24.11 with MariaDB 11.8 dies creating it itself
    # ("_check_mysql_concat_is_sane: null result").
    mariadb --no-defaults -S "$DBSOCK" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'asrpt-testbed';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" ||
      die "creating the accounting database failed"
  fi
  # slurmdbd reads slurmdbd.conf next to \$SLURM_CONF.
  slurmdbd 9>&-
  dbd_works() { sacctmgr -n list cluster; }
  wait_until slurmdbd "$DIR/run/slurmdbd.pid" dbd_works
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx asrpt-testbed; then
    sacctmgr -i add cluster asrpt-testbed >/dev/null || die "sacctmgr add cluster failed"
  fi
fi

# -c: start from an empty state; -i: ignore unreadable state files ("Could not open job state
# file" errors at start are expected).
slurmctld -f "$CONF" -c -i 9>&-
ctld_up() { scontrol ping | grep -q 'is UP'; }
wait_until slurmctld "$DIR/run/slurmctld.pid" ctld_up

for n in $NODES; do slurmd -f "$CONF" -N "$n" 9>&-; done
all_idle() {
  local states
  states="$(sinfo -h -N -o '%N %t' | sort -u)"
  [ "$(wc -l <<< "$states")" -eq 4 ] && ! awk '$2 != "idle" { bad = 1 } END { exit !bad }' <<< "$states"
}
pidfiles=""
for n in $NODES; do pidfiles="$pidfiles $DIR/run/slurmd-$n.pid"; done
wait_until "all nodes idle" "$pidfiles" all_idle
flock -u 9

# ---- daemon configuration --------------------------------------------------------------------
cat > "$DIR/asrpt.toml" <<EOF
# asrptd configuration for the test-bed in $DIR (written by contrib/slurm/testbed/up.sh).
#
# Format: src/asrpt/daemon/config.py (unknown keys are errors that list the valid ones;
# ASRPT_<SECTION>_<KEY> environment variables override).
#   [daemon]              the cycle: interval, policy
#   [database]            the history database
#   [spool]               where asrpt-sbatch leaves one record per submission
#   [wrapper]             asrpt-sbatch: the real sbatch by absolute path (never a PATH lookup)
#   [slurm]               keys = fields of asrpt.slurm.cli_backend.SlurmBackendConfig
#   [[slurm.partitions]]  one per asrpt partition (nodes of one accelerator type and one
#                         interconnect). A node belongs to the first listed partition whose
#                         Slurm partition contains it. Slurm partitions not listed here (the
#                         default "gpu", spanning node1-3) are umbrellas: a job sent there may
#                         run on any listed partition that shares nodes with it.
#                         Bandwidths in GB/s (intra: between accelerators of a node; inter: per
#                         node NIC). relative_speed/relative_to define a type the speed table
#                         lacks (npu = 0.8 x a100 here; the test-bed's NPUs are fake anyway).

[daemon]
interval_s = 10.0
policy = "asrpt"
state_dir = "$DIR"
# Users' asrpt queue/eta/explain ask the daemon here (default /run/asrpt/asrptd.sock).
socket_path = "$DIR/asrptd.sock"

[database]
url = "sqlite:///$DIR/asrpt.db"

[spool]
dir = "$DIR/spool-asrpt"
# job_submit.lua's records (up.sh --with-lua-plugin); "" = not read.
plugin_dir = "$([ -n "$LUA_SRC" ] && echo "$DIR/spool-asrpt-plugin")"

[wrapper]
real_sbatch = "/usr/bin/sbatch"

[slurm]
slurm_conf = "$CONF"
# Directory of squeue/sinfo/scontrol/sacct; "" = look them up on PATH.
bin_dir = ""
# Seconds before a command counts as unreachable (22.05 clients retry a dead controller ~9 s).
timeout_s = 15.0
# GRES names that are accelerators; a job requesting none of them is left to Slurm.
accelerator_gres = ["gpu", "npu"]
default_workload_class = "resnet50"
jobcomp_log = "$DIR/log/jobcomp.log"
use_sacct = $([ "$WITH_DBD" = 1 ] && echo true || echo false)
# Priorities the daemon writes: above priority/basic's automatic range (new jobs get
# 4294901759 and below), at most 4294967293 (Slurm refuses 4294967294 and up).
priority_floor = 4294901800
priority_ceiling = 4294967293
priority_gap = 64
# Pending jobs that get distinct priorities, most urgent first; the rest share priority_floor.
ordered_limit = 1000

[[slurm.partitions]]
name = "a100"
accelerator = "a100"
intra_node_gbps = 300.0
inter_node_gbps = 25.0

[[slurm.partitions]]
name = "v100"
accelerator = "v100"
intra_node_gbps = 150.0
inter_node_gbps = 12.5

[[slurm.partitions]]
name = "npu"
accelerator = "npu"
intra_node_gbps = 56.0
inter_node_gbps = 25.0
relative_speed = 0.8
relative_to = "a100"
EOF

log "Slurm $VERSION test-bed up in $DIR (ports $CTLD_PORT, $((BASE + 11))-$((BASE + 14))$([ "$WITH_DBD" = 1 ] && echo ", slurmdbd $DBD_PORT")$([ -n "$LUA_SRC" ] && echo ", job_submit.lua"))"
sinfo -N -o '%N %P %T %G' >&2
log "daemon configuration: $DIR/asrpt.toml; job completion log: $DIR/log/jobcomp.log"
log "stop with: $HERE/down.sh $DIR [--purge]"
echo "export ASRPT_TESTBED_DIR=$DIR"
echo "export SLURM_CONF=$CONF"
