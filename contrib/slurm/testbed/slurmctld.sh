#!/usr/bin/env bash
# Stop or start only the slurmctld of the test-bed in DIR, keeping jobs and nodes: for tests
# of what asrpt does while the controller is away.
#
#   slurmctld.sh DIR stop     SIGTERM (SIGKILL after 10 s) to the PID in DIR/run/slurmctld.pid
#   slurmctld.sh DIR start    start it again from its saved state and wait until it answers
#                             and every slurmd has re-registered (no node "unk" or "*")
#
# Running jobs keep running meanwhile (slurmd and slurmstepd are not touched).
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: slurmctld.sh DIR stop|start" >&2; exit 2; }
DIR="$(cd "$1" && pwd)"
CONF="$DIR/etc/slurm.conf"
PIDFILE="$DIR/run/slurmctld.pid"
TIMEOUT="${ASRPT_TESTBED_TIMEOUT:-60}"
export SLURM_CONF="$CONF"
[ -r "$CONF" ] || { echo "slurmctld.sh: no $CONF (not a test-bed?)" >&2; exit 1; }

alive() {
  [ -n "$1" ] && [ -r "/proc/$1/status" ] && grep -q '^slurmctld' "/proc/$1/comm" 2>/dev/null &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
pid="$(cat "$PIDFILE" 2>/dev/null || true)"

case "$2" in
  stop)
    if alive "$pid"; then
      kill -TERM "$pid"
      for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then kill -KILL "$pid"; fi
    fi
    rm -f "$PIDFILE"
    ;;
  start)
    if alive "$pid"; then echo "slurmctld.sh: slurmctld already runs (pid $pid)" >&2; exit 0; fi
    rm -f "$PIDFILE"
    # No -c: recover jobs and nodes from DIR/state.
    slurmctld -f "$CONF" -i
    end=$(( $(date +%s) + TIMEOUT ))
    # Nodes show "unk" until their slurmd re-registers (about 2 s), "*" while not responding.
    until scontrol ping 2>/dev/null | grep -q 'is UP' &&
          [ -n "$(sinfo -h -N -o '%t' 2>/dev/null)" ] &&
          ! sinfo -h -N -o '%t' 2>/dev/null | grep -Eq 'unk|down|\*'; do
      pid="$(cat "$PIDFILE" 2>/dev/null || true)"
      if [ -n "$pid" ] && ! alive "$pid"; then
        echo "slurmctld.sh: slurmctld (pid $pid) died; see $DIR/log/slurmctld.log" >&2; exit 1
      fi
      [ "$(date +%s)" -lt "$end" ] || { echo "slurmctld.sh: not up after ${TIMEOUT} s" >&2; exit 1; }
      sleep 0.2
    done
    ;;
  *) echo "usage: slurmctld.sh DIR stop|start" >&2; exit 2 ;;
esac
