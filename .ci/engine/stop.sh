#!/usr/bin/env bash
# Stop the server that start.sh started: SIGTERM to its process group (API server,
# EngineCore, worker), up to ENGINE_STOP_TIMEOUT seconds (default 30), then SIGKILL.
# Only the pid in $ENGINE_DIR/server.pid and its process group are touched.
# Exit 0 when nothing is left running (also when nothing was running).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENGINE_DIR="${ENGINE_DIR:-.engine}"
case "$ENGINE_DIR" in /*) ;; *) ENGINE_DIR="$ROOT/$ENGINE_DIR" ;; esac
PID_FILE="$ENGINE_DIR/server.pid"
TIMEOUT="${ENGINE_STOP_TIMEOUT:-30}"

if [ ! -f "$PID_FILE" ]; then
  echo "[engine-stop] no pid file ($PID_FILE): not running"
  exit 0
fi
PID="$(cat "$PID_FILE")"
case "$PID" in ''|*[!0-9]*) echo "[engine-stop] bad pid file $PID_FILE" >&2; rm -f "$PID_FILE"; exit 1 ;; esac

# The launcher makes itself a session and group leader (pgid == pid); if that failed,
# signal the pid alone.
group_alive() { # any member of the group that is not a zombie
  [ -n "$(ps -o pid=,stat= -g "$PID" 2>/dev/null | awk '$2 !~ /^Z/')" ]
}
# A stale pid file may name a pid that now belongs to something else: leave that alone.
CMDLINE="$(tr '\0' ' ' < "/proc/$PID/cmdline" 2>/dev/null || true)"  # empty for a zombie
if [ -n "$CMDLINE" ] && ! grep -q "vllm.entrypoints.cli.main" <<<"$CMDLINE"; then
  echo "[engine-stop] pid $PID is not the engine (stale pid file); removing $PID_FILE"
  rm -f "$PID_FILE"
  exit 0
fi
if [ "$(ps -o pgid= -p "$PID" 2>/dev/null | tr -d ' ')" = "$PID" ]; then
  TARGET="-$PID"; alive() { group_alive; }
else
  TARGET="$PID"; alive() { [ -n "$(ps -o stat= -p "$PID" 2>/dev/null | grep -v '^Z')" ]; }
fi

if ! alive; then
  echo "[engine-stop] pid $PID is not running"
  rm -f "$PID_FILE"
  exit 0
fi

kill -TERM -- "$TARGET" 2>/dev/null || true
t0=$(date +%s)
while alive && [ $(( $(date +%s) - t0 )) -lt "$TIMEOUT" ]; do sleep 0.5; done
if alive; then
  echo "[engine-stop] still running after $TIMEOUT s: SIGKILL"
  kill -KILL -- "-$PID" 2>/dev/null || kill -KILL "$PID" 2>/dev/null || true
  sleep 1
fi
if alive; then
  echo "[engine-stop] could not stop pid $PID" >&2
  exit 1
fi
rm -f "$PID_FILE"
echo "[engine-stop] stopped pid $PID after $(( $(date +%s) - t0 )) s"
