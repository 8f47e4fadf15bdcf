"""What a run measured, summarized the way serving benchmarks report it.

TTFT = first token - arrival; E2E = last token - arrival; TPOT per request =
(last token - first token) / (output tokens - 1), as vLLM's benchmark defines it (requests of
one output token have none); ITL = the gaps between a request's consecutive tokens, over all
tokens. Throughputs are over the run's duration: from the first arrival to the last event
(the last completion, or the end of a bounded run).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from tokensim.sim.request import COMPLETED, IN_FLIGHT, REJECT_REASONS, REJECTED


def stats(values: np.ndarray) -> dict:
    """mean, p50, p90, p99 (numpy's linear interpolation, as vLLM's benchmark); None if empty."""
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def weighted_stats(values: np.ndarray, weights: np.ndarray) -> dict:
    """The same for values seen `weights` times each (percentiles: the inverted CDF)."""
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    total = cum[-1]
    out = {"mean": float((v * w).sum() / total)}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        out[name] = float(v[min(int(np.searchsorted(cum, q * total, side="left")), v.size - 1)])
    return out


@dataclass(frozen=True)
class SimulationResult:
    """`summary` is JSON-ready; `requests` holds per-request columns (NaN where unknown)."""
    summary: dict
    requests: dict

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.summary, sort_keys=True, **kwargs)

    def engine_clock_summary(self) -> dict:
        """`summary` with TTFT and end-to-end latency restated from the engine's first scheduling pass that took each
        request in (`seen_s`) instead of its arrival: what an engine's own stats (vLLM's queued_ts) report."""
        r = self.requests
        done = r["status"] == COMPLETED
        out = dict(self.summary)
        for key, end in (("ttft_s", "first_token_s"), ("e2e_s", "last_token_s")):
            x = (r[end] - r["seen_s"])[done]
            out[key] = stats(x[np.isfinite(x)])
        return out

    def per_request(self) -> dict[str, np.ndarray]:
        """Latencies by request id, NaN where a request has none: `ttft_s`, `tpot_s` (NaN for
        one-token outputs), `e2e_s`, `queue_s` (first scheduled - arrival), and `engine_ttft_s`:
        the TTFT an engine's own clock records, from the first scheduling pass that took the request
        in (`seen_s`: a request that arrives during a step waits for that step's end unseen; vLLM
        stamps it QUEUED then), as vLLM's RequestStateStats (queued_ts) do."""
        r = self.requests
        decode = r["tokens"] - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(decode > 0, (r["last_token_s"] - r["first_token_s"]) / np.maximum(decode, 1), np.nan)
        done = r["status"] == COMPLETED
        return {"ttft_s": r["first_token_s"] - r["arrival_s"],
                "tpot_s": np.where(done, tpot, np.nan),
                "e2e_s": np.where(done, r["last_token_s"] - r["arrival_s"], np.nan),
                "queue_s": r["first_scheduled_s"] - r["arrival_s"],
                "engine_ttft_s": r["first_token_s"] - r["seen_s"]}


def summarize(sim, *, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> SimulationResult:
    log = sim.log
    status = log.column("status")
    arrival = log.column("arrival_s")
    first = log.column("first_token_s")
    last = log.column("last_token_s")
    sched = log.column("first_scheduled_s")
    tokens = log.column("tokens")
    outputs = log.column("output_tokens")
    done = status == COMPLETED
    ttft = (first - arrival)[done]
    e2e = (last - arrival)[done]
    decode_tokens = tokens[done] - 1
    multi = decode_tokens > 0
    tpot_all = np.full(done.sum(), np.nan)
    tpot_all[multi] = ((last - first)[done])[multi] / decode_tokens[multi]
    tpot = tpot_all[multi]
    itl_values, itl_weights = sim.itl.arrays()

    start = sim.first_arrival_s if math.isfinite(sim.first_arrival_s) else 0.0
    duration = max(sim.now - start, 0.0)
    n_done = int(done.sum())
    out_tokens = int(tokens[done].sum())
    good = np.ones(n_done, dtype=bool)
    if slo_ttft_s is not None:
        good &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        good &= np.nan_to_num(tpot_all, nan=0.0) <= slo_tpot_s
    reasons = log.column("reason")[status == REJECTED]
    per_second = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    engines = []
    for e in sim.engines:
        engines.append({
            "name": e.name, "steps": e.steps, "prefill_tokens": e.prefill_tokens,
            "decode_tokens": e.decode_tokens, "preemptions": e.preemptions,
            "busy_s": e.busy_s, "kv_blocks": e.kv.num_blocks, "block_size": e.block_size,
            "kv_evicted_blocks": e.kv.evicted_blocks,
        })
    summary = {
        "requests": int(log.n),
        "completed": n_done,
        "rejected": {"total": int((status == REJECTED).sum()),
                     "reasons": {REJECT_REASONS[i]: int((reasons == i).sum())
                                 for i in range(len(REJECT_REASONS)) if (reasons == i).any()}},
        "in_flight": int((status == IN_FLIGHT).sum()),
        "not_arrived": int(sim.not_arrived),
        "duration_s": duration,
        "ttft_s": stats(ttft),
        "tpot_s": stats(tpot),
        "itl_s": weighted_stats(itl_values, itl_weights),
        "e2e_s": stats(e2e),
        "throughput_tokens_per_s": per_second(out_tokens),
        "requests_per_s": per_second(n_done),
        "goodput_requests_per_s": per_second(int(good.sum())),
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s},
        "output_tokens": out_tokens,
        "input_tokens": int(log.column("input_tokens")[done].sum()),
        "preemptions": int(log.column("preemptions").sum()),
        "prefix_hit_tokens": int(log.column("prefix_hit_tokens").sum()),
        "engines": engines,
        "series": {e.name: e.series.to_dict() for e in sim.engines},
    }

    def nan_where_unset(x):
        return np.where(x < 0, np.nan, x)

    requests = {
        "arrival_s": arrival, "first_scheduled_s": nan_where_unset(sched),
        "seen_s": nan_where_unset(log.column("seen_s")),
        "first_token_s": nan_where_unset(first), "last_token_s": nan_where_unset(last),
        "input_tokens": log.column("input_tokens"), "output_tokens": outputs, "tokens": tokens,
        "status": status, "preemptions": log.column("preemptions"),
        "prefix_hit_tokens": log.column("prefix_hit_tokens"),
    }
    return SimulationResult(summary, requests)
