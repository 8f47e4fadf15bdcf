#!/usr/bin/env bash
# The real-engine stage: vLLM's CPU build on 127.0.0.1 measured by `tokensim bench` at three request rates and one
# fixed concurrency, this machine probed into a hardware file, the engine's constants calibrated on two of the runs
# (rate 1 and 4 clients), and every run simulated beside its measurement. Prints the comparison and writes
# $ENGINE_DIR/stage/ (traces, hardware file, calibrated profile, report.json). It reports, it does not gate: a failed
# install or start is printed and the stage ends with exit 0 (issue 13 makes the 25 % check a gate once it holds).
#
#   bash .ci/engine/stage.sh            # about 5 minutes from a cold install on 2 cores
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export PORT="${PORT:-8011}" ENGINE_DIR="${ENGINE_DIR:-$ROOT/.engine}"
OUT="$ENGINE_DIR/stage"
mkdir -p "$OUT"
say() { echo "[engine-stage] $*"; }
bash .ci/engine/install.sh || { say "install failed: stage skipped"; exit 0; }
bash .ci/engine/start.sh || { say "start failed: stage skipped"; exit 0; }
trap 'bash "$ROOT/.ci/engine/stop.sh" >/dev/null 2>&1' EXIT   # absolute: the stage cd's into its output folder
MODEL_CFG="$ENGINE_DIR/model/config.json"
URL="http://127.0.0.1:$PORT"
cd "$OUT"
rm -rf rate0.5 rate1 rate2 conc4
say "load average before: $(cat /proc/loadavg)"
tokensim hardware probe -o this-machine.toml > probe.txt || { say "probe failed"; exit 0; }
for r in 0.5 1 2; do
  tokensim bench "$URL" --model tiny-llama --rate "$r" --requests 30 --input-tokens 256 --output-tokens 64 \
    --max-duration 240 --save "rate$r" --json > "bench-rate$r.json" || say "bench at rate $r incomplete"
done
tokensim bench "$URL" --model tiny-llama --concurrency 4 --requests 24 --input-tokens 256 --output-tokens 64 \
  --max-duration 240 --save conc4 --json > bench-conc4.json || say "bench at concurrency 4 incomplete"
say "load average after the benchmarks: $(cat /proc/loadavg)"
KV=$(grep -oE 'kv_cache_size_tokens="[0-9]+"' "$ENGINE_DIR/server.log" 2>/dev/null | head -1 | grep -oE '[0-9]+' || echo 46592)
tokensim calibrate rate1 conc4 --model "$MODEL_CFG" --hardware this-machine.toml --kv-cache-tokens "${KV:-46592}" \
  -o calibrated.toml || { say "calibration failed"; exit 0; }
TOKENSIM_FITTED=calibrated.toml python - "$MODEL_CFG" "${KV:-46592}" <<'PY'
import json, sys
from pathlib import Path
import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import default_table
from tokensim.validate.calibrate import read_trace, simulated

model, kv = tokensim.load_model(sys.argv[1]), int(sys.argv[2])
hw = tokensim.load_hardware("this-machine.toml")
table = default_table()                     # calibrated.toml over the base file, through $TOKENSIM_FITTED
rows = []
for name in ("rate0.5", "rate1", "rate2", "conc4"):
    t = read_trace(name)
    ttft, tpot = simulated(t, model, hw, Deployment(engine="vllm"), table, kv)
    rows.append({"run": name, "fitted_on": name in ("rate1", "conc4"), "measured_ttft_s": t.ttft_s,
                 "simulated_ttft_s": ttft, "ttft_error": ttft / t.ttft_s - 1, "measured_tpot_s": t.tpot_s,
                 "simulated_tpot_s": tpot, "tpot_error": tpot / t.tpot_s - 1})
print(f"{'run':9} {'fitted':6} {'TTFT meas':>10} {'sim':>8} {'err':>6}   {'TPOT meas':>10} {'sim':>8} {'err':>6}")
for r in rows:
    print(f"{r['run']:9} {'yes' if r['fitted_on'] else 'no':6} {r['measured_ttft_s'] * 1e3:8.0f}ms {r['simulated_ttft_s'] * 1e3:6.0f}ms "
          f"{r['ttft_error']:+6.0%}   {r['measured_tpot_s'] * 1e3:8.1f}ms {r['simulated_tpot_s'] * 1e3:6.1f}ms {r['tpot_error']:+6.0%}")
held = [r for r in rows if not r["fitted_on"]]
worst = max(max(abs(r["ttft_error"]), abs(r["tpot_error"])) for r in held)
print(f"held-out runs: worst error {worst:.0%} (the issue's bar: 25 %)")
Path("report.json").write_text(json.dumps(rows, indent=1))
PY
exit 0
