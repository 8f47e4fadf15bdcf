#!/usr/bin/env bash
# Start vLLM's CPU server in the background on 127.0.0.1:$PORT with the synthetic model
# (dummy random weights, eager mode), wait until GET /v1/models answers, print the
# settings a simulator must copy. Exit non-zero, with the server log printed, on failure.
#
#   PORT                 (default 8000)
#   ENGINE_VENV          venv made by install.sh (default: .engine-venv in the repo root)
#   ENGINE_DIR           folder for the pid file and the log (default: .engine in the repo root)
#   ENGINE_MODEL_DIR     model folder (default: $ENGINE_DIR/model; written by make_model.py if it has no config.json)
#   ENGINE_MODEL_NAME    name the API serves it under (default: tiny-llama)
#   ENGINE_START_TIMEOUT seconds to wait for readiness (default: 300)
#   ENGINE_KV_CACHE_BYTES KV cache size (default: 1 GiB = 364 blocks of 128 tokens for the default model)
#   Extra arguments are passed to `vllm serve` after the defaults (a later flag wins).
#
# Writes $ENGINE_DIR/server.pid and $ENGINE_DIR/server.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
abs() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
PORT="${PORT:-8000}"
ENGINE_VENV="$(abs "${ENGINE_VENV:-.engine-venv}")"
ENGINE_DIR="$(abs "${ENGINE_DIR:-.engine}")"
ENGINE_MODEL_DIR="$(abs "${ENGINE_MODEL_DIR:-$ENGINE_DIR/model}")"
ENGINE_MODEL_NAME="${ENGINE_MODEL_NAME:-tiny-llama}"
TIMEOUT="${ENGINE_START_TIMEOUT:-300}"
KV_BYTES="${ENGINE_KV_CACHE_BYTES:-1073741824}"
PY="$ENGINE_VENV/bin/python"
PID_FILE="$ENGINE_DIR/server.pid"
LOG="$ENGINE_DIR/server.log"
URL="http://127.0.0.1:$PORT"

[ -x "$PY" ] || { echo "[engine-start] no engine venv at $ENGINE_VENV: run .ci/engine/install.sh" >&2; exit 1; }
mkdir -p "$ENGINE_DIR"

get() { # get URL: body on stdout, non-zero if no 200 within 3 s
  "$PY" -c 'import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
    sys.stdout.write(r.read().decode())' "$1" 2>/dev/null
}

if [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
  if get "$URL/v1/models" >/dev/null; then
    echo "[engine-start] already running (pid $(cat "$PID_FILE")) at $URL"
    exit 0
  fi
  echo "[engine-start] pid $(cat "$PID_FILE") from $PID_FILE is alive but $URL does not answer; run stop.sh first" >&2
  exit 1
fi
if get "$URL/v1/models" >/dev/null; then
  echo "[engine-start] something else already answers at $URL" >&2
  exit 1
fi

if [ ! -f "$ENGINE_MODEL_DIR/config.json" ]; then
  "$PY" "$ROOT/.ci/engine/make_model.py" --out "$ENGINE_MODEL_DIR"
fi

# No hub, no telemetry. VLLM_CPU_KVCACHE_SPACE (a legacy variable) would override the
# KV cache size set below, so it is dropped.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
unset VLLM_CPU_KVCACHE_SPACE

# The launcher, run with `python -c`:
# - vllm-cpu's `vllm` console script dies on importlib.metadata.version("vllm") (the
#   distribution is named vllm-cpu), so "vllm" is answered with vllm-cpu's version plus
#   "+cpu" (the suffix is what vLLM's platform detection looks for);
# - the main guard keeps multiprocessing's spawned children from starting a second server;
# - os.setsid() gives the server and its children their own process group, so stop.sh
#   can end them all.
LAUNCHER='import importlib.metadata as m, os, sys
_v = m.version
m.version = lambda n: _v("vllm-cpu") + "+cpu" if n == "vllm" else _v(n)
if __name__ == "__main__":
    try:
        os.setsid()
    except OSError:
        pass
    from vllm.entrypoints.cli.main import main
    sys.argv = ["vllm"] + sys.argv[1:]
    sys.exit(main())'

# Scheduler settings are given explicitly (they equal vLLM 0.32's CPU defaults for the
# API server, except prefix caching, which is off so that repeated identical prompts are
# prefilled every time) so that they show in the log's "non-default args" line.
# --kv-cache-memory-bytes fixes the KV block count and skips the CPU memory-fraction
# check (--gpu-memory-utilization, which reads one NUMA node's memory and fails here
# at its default 0.92).
ARGS=(serve "$ENGINE_MODEL_DIR"
  --host 127.0.0.1 --port "$PORT"
  --served-model-name "$ENGINE_MODEL_NAME"
  --load-format dummy --enforce-eager
  --kv-cache-memory-bytes "$KV_BYTES"
  --block-size 128
  --max-num-seqs 128
  --max-num-batched-tokens 2048
  --enable-chunked-prefill
  --no-enable-prefix-caching
  --seed 0
  "$@")

t0=$(date +%s)
: > "$LOG"
echo "[engine-start] $PY -c <launcher> ${ARGS[*]}" | tee -a "$LOG"
nohup "$PY" -c "$LAUNCHER" "${ARGS[@]}" >>"$LOG" 2>&1 </dev/null &
PID=$!
echo "$PID" > "$PID_FILE"

fail() {
  echo "[engine-start] $1; server log ($LOG):" >&2
  cat "$LOG" >&2
  if kill -0 "$PID" 2>/dev/null; then
    bash "$ROOT/.ci/engine/stop.sh" >&2 || true
  fi
  rm -f "$PID_FILE"
  exit 1
}

while :; do
  if ! kill -0 "$PID" 2>/dev/null; then
    fail "the server (pid $PID) exited during startup"
  fi
  if get "$URL/v1/models" >/dev/null; then
    break
  fi
  if [ $(( $(date +%s) - t0 )) -ge "$TIMEOUT" ]; then
    fail "no answer from $URL/v1/models after $TIMEOUT s"
  fi
  sleep 1
done

echo "[engine-start] ready after $(( $(date +%s) - t0 )) s: pid $PID, $URL, model $ENGINE_MODEL_NAME ($ENGINE_MODEL_DIR)"
# What a simulator must copy, as the server reports it.
grep -o "non-default args: .*" "$LOG" | head -1 | sed 's/^/[engine-start] /' || true
grep -o "CPU KV cache size: .*" "$LOG" | head -1 | sed 's/^/[engine-start] /' || true
grep -o "core ids=.*\|reserved_cpus=.*\|Reducing Torch threads.*" "$LOG" | sed 's/^/[engine-start] /' || true
CACHE="$(get "$URL/metrics" | grep '^vllm:cache_config_info' \
  | grep -oE '[{,](block_size|num_gpu_blocks|enable_prefix_caching|kv_cache_size_tokens)="[^"]*"' \
  | tr -d '{,' | tr '\n' ' ' || true)"
echo "[engine-start] cache (from /metrics): $CACHE"
