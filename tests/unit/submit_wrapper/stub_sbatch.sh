#!/bin/sh
# A stand-in for Slurm's sbatch in unit tests and the benchmark (no Slurm needed).
#
# Prints "Submitted batch job <pid>" (or "<pid>" with --parsable), exits 0. --test-only prints
# sbatch's estimate line on stderr instead. Behaviour can be changed through the environment:
#   STUB_DIR          write argv (NUL-separated), the process environment and, with
#                     STUB_READ_STDIN=1, stdin (unless a terminal) into files there
#   STUB_SCRIPT_ARG=1 also copy the last argument's file content to STUB_DIR/script
#   STUB_STDOUT_FILE  print this file's bytes instead of the job id line
#   STUB_STDERR_FILE  print this file's bytes on stderr
#   STUB_EXIT         exit status (default 0)
#   STUB_SIGNAL       kill itself with this signal name at the end
#   STUB_SLEEP        after printing, become `sleep STUB_SLEEP` (for signal tests)
#   STUB_CLUSTER      with --parsable print "<pid>;<cluster>"
#   STUB_DELAY        first sleep this long (a slow sbatch: loading its config, a slow controller)
[ -n "${STUB_DELAY:-}" ] && sleep "$STUB_DELAY"
if [ -n "${STUB_DIR:-}" ]; then
  printf '%s\0' "$@" > "$STUB_DIR/argv"
  cat /proc/$$/environ > "$STUB_DIR/env"
  if [ "${STUB_READ_STDIN:-0}" = 1 ] && [ ! -t 0 ]; then cat > "$STUB_DIR/stdin"; fi
  if [ "${STUB_SCRIPT_ARG:-0}" = 1 ]; then for last; do :; done; cat "$last" > "$STUB_DIR/script"; fi
fi
parsable=0
for a; do
  case "$a" in
    --parsable) parsable=1 ;;
    --test-only) echo "sbatch: Job $$ to start at 2030-01-01T00:00:00 using 1 processors on nodes node1 in partition gpu" >&2; exit 0 ;;
  esac
done
[ -n "${STUB_STDERR_FILE:-}" ] && cat "$STUB_STDERR_FILE" >&2
if [ -n "${STUB_STDOUT_FILE:-}" ]; then
  cat "$STUB_STDOUT_FILE"
elif [ "$parsable" = 1 ]; then
  if [ -n "${STUB_CLUSTER:-}" ]; then echo "$$;$STUB_CLUSTER"; else echo "$$"; fi
else
  echo "Submitted batch job $$"
fi
[ -n "${STUB_SIGNAL:-}" ] && kill -s "$STUB_SIGNAL" $$
[ -n "${STUB_SLEEP:-}" ] && exec sleep "$STUB_SLEEP"
exit "${STUB_EXIT:-0}"
