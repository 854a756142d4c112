#!/usr/bin/env bash
# Stop the test-bed that up.sh started in DIR.
#
#   down.sh DIR [--purge]
#
# 1. While slurmctld answers: cancel every job and wait (at most 20 s) until none is running or
#    completing, so that slurmstepd and the job processes end through Slurm (stopping slurmd
#    does not end running jobs: slurmstepd is a separate process).
# 2. SIGTERM to the daemons recorded in DIR/run/*.pid, in the order slurmd, slurmctld,
#    slurmdbd, mariadbd, munged; each PID is checked to still run that program first, and gets
#    SIGKILL after 10 s. Nothing is killed by name.
# 3. slurmstepd processes left over (jobs that could not be cancelled because slurmctld was
#    already down) are stopped too, but only those whose environment names this DIR's
#    slurm.conf (they inherit SLURM_CONF from the slurmd that up.sh started).
# --purge then deletes DIR (only if it looks like a test-bed: DIR/etc/slurm.conf exists).
# Running it twice, or on a half-started test-bed, is harmless.
set -uo pipefail

PURGE=0
DIR_ARG=""
for arg in "$@"; do
  case "$arg" in
    --purge) PURGE=1 ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    -*) echo "down.sh: unknown option $arg" >&2; exit 2 ;;
    *) DIR_ARG="$arg" ;;
  esac
done
[ -n "$DIR_ARG" ] || { echo "usage: down.sh DIR [--purge]" >&2; exit 2; }
[ -d "$DIR_ARG" ] || { echo "down.sh: no directory $DIR_ARG" >&2; exit 1; }
DIR="$(cd "$DIR_ARG" && pwd)"
CONF="$DIR/etc/slurm.conf"
export SLURM_CONF="$CONF"

# Alive = /proc has it, its comm starts with the expected name, and it is not a zombie
# (PID 1 may reap late in containers; kill -0 succeeds on a zombie).
alive() {  # pid comm
  [ -n "$1" ] && [ -r "/proc/$1/status" ] && grep -q "^$2" "/proc/$1/comm" 2>/dev/null &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
pid_in() { cat "$DIR/run/$1" 2>/dev/null || true; }

if [ -r "$CONF" ] && alive "$(pid_in slurmctld.pid)" slurmctld &&
   timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
  ids="$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
  if [ -n "${ids// /}" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $ids 2>/dev/null
    end=$(( $(date +%s) + 20 ))
    while [ -n "$(timeout 10 squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && [ "$(date +%s)" -lt "$end" ]; do
      sleep 0.2
    done
  fi
fi

stop() {  # pidfile comm
  local pid
  pid="$(pid_in "$1")"
  if alive "$pid" "$2"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do alive "$pid" "$2" || break; sleep 0.1; done
    if alive "$pid" "$2"; then
      echo "down.sh: pid $pid ($2) ignored SIGTERM for 10 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$DIR/run/$1"
}
for f in "$DIR"/run/slurmd-*.pid; do
  [ -e "$f" ] && stop "$(basename "$f")" slurmd
done
stop slurmctld.pid slurmctld
stop slurmdbd.pid slurmdbd
stop mariadbd.pid mariadbd
stop munged.pid munged
rm -f "$DIR/run/munge.socket" "$DIR/run/munge.socket.lock"

# Leftover job steps of this test-bed only (see 3. above).
for status in /proc/[0-9]*/status; do
  pid="${status#/proc/}"; pid="${pid%/status}"
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] || continue
  { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$CONF" || continue
  echo "down.sh: stopping leftover slurmstepd $pid" >&2
  kill -TERM "$pid" 2>/dev/null
done

# up.sh --with-lua-plugin mounts a tmpfs for the plugin's records.
if mountpoint -q "$DIR/spool-asrpt-plugin" 2>/dev/null; then
  umount "$DIR/spool-asrpt-plugin" || echo "down.sh: cannot unmount $DIR/spool-asrpt-plugin" >&2
fi

if [ "$PURGE" = 1 ]; then
  if [ -e "$CONF" ]; then
    rm -rf "$DIR"
    echo "down.sh: stopped and removed $DIR" >&2
  else
    echo "down.sh: stopped; not removing $DIR (no etc/slurm.conf: not a test-bed directory?)" >&2
  fi
else
  echo "down.sh: stopped (configs, logs and state kept in $DIR)" >&2
fi
