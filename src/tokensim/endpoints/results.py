"""What a bench run measured: one record per request, the summary in the simulator's layout, the trace.

Summary keys, as `tokensim.sim`'s results name them: `requests` (sent), `completed`, `rejected`
({total, reasons}: failed requests counted by reason), `in_flight` (cut by the time bound or an
abort), `not_arrived` (never sent), `duration_s`, `ttft_s`, `tpot_s`, `itl_s`, `e2e_s` (each
{mean, p50, p90, p99}, null without data), `throughput_tokens_per_s` (output tokens of completed
requests per second of the run), `requests_per_s`, `goodput_requests_per_s` (completed within every
SLO in `slo`), `output_tokens`, `input_tokens`; the bench adds `incomplete`, `error`, `conditions`,
`output_length_mismatches` and `prompt_tokens_ratio` (server-counted / requested prompt tokens).
TPOT of a request = (last token time - first token time) / (output tokens - 1), for 2 or more
tokens; a one-token request meets any TPOT SLO, as in the simulator.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokensim.errors import TokensimError


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it; times in seconds since the run started."""
    index: int
    input_tokens: int
    output_tokens_requested: int
    send_s: float
    status: str                                  # "ok", "failed" or "in_flight"
    first_token_s: float | None = None
    last_token_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    itl_s: tuple[float, ...] = ()
    server_prompt_tokens: int | None = None
    error_kind: str | None = None                # the counted reason: "http 429", "timeout", ...
    error: str | None = None                     # the whole one-line message

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.send_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.send_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.last_token_s is None or self.output_tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)


def distribution(values: list[float]) -> dict[str, float | None]:
    """Mean and linear-interpolated p50/p90/p99; nulls when there is no value."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(np.asarray(values, dtype=float), [50, 90, 99])
    return {"mean": float(np.mean(values)), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, r: RequestRecord) -> bool:
        return all(limit is None or value is None or value <= limit
                   for limit, value in ((self.ttft_s, r.ttft_s), (self.tpot_s, r.tpot_s), (self.e2e_s, r.e2e_s)))


def summarize(records: list[RequestRecord], planned: int, duration_s: float, slo: Slo) -> dict:
    ok = [r for r in records if r.status == "ok"]
    failed = [r for r in records if r.status == "failed"]
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: None)
    reported = [r for r in records if r.server_prompt_tokens is not None]
    asked = sum(r.input_tokens for r in reported)
    return {
        "requests": len(records),
        "completed": len(ok),
        "rejected": {"total": len(failed), "reasons": dict(Counter(r.error_kind for r in failed))},
        "in_flight": sum(r.status == "in_flight" for r in records),
        "not_arrived": planned - len(records),
        "duration_s": duration_s,
        "ttft_s": distribution([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_s": distribution([r.tpot_s for r in ok if r.tpot_s is not None]),
        "itl_s": distribution([gap for r in ok for gap in r.itl_s]),
        "e2e_s": distribution([r.e2e_s for r in ok if r.e2e_s is not None]),
        "throughput_tokens_per_s": per_s(sum(r.output_tokens for r in ok)),
        "requests_per_s": per_s(len(ok)),
        "goodput_requests_per_s": per_s(sum(slo.met_by(r) for r in ok)),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s},
        "output_tokens": sum(r.output_tokens for r in ok),
        "input_tokens": sum(r.input_tokens for r in ok),
        "output_length_mismatches": sum(r.output_tokens != r.output_tokens_requested for r in ok),
        "prompt_tokens_ratio": sum(r.server_prompt_tokens or 0 for r in reported) / asked if asked else None,
    }


@dataclass(frozen=True)
class BenchResult:
    """A finished (or cut) run: `summary` in the simulator's layout, with `conditions` inside it."""
    summary: dict
    records: tuple[RequestRecord, ...] = field(repr=False)

    @property
    def incomplete(self) -> bool:
        return bool(self.summary["incomplete"])

    def to_json(self) -> str:
        return json.dumps(_json_safe(self.summary), indent=2)

    def save_trace(self, path: str | Path) -> Path:
        """A folder the simulator can replay: requests.jsonl (one request a line) and meta.json."""
        folder = Path(path)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / "requests.jsonl", "w", encoding="utf-8") as out:
                for r in self.records:
                    out.write(json.dumps(_trace_line(r)) + "\n")
            meta = {"schema_version": 1, "source": "tokensim bench", **self.summary["conditions"],
                    "summary": {k: v for k, v in self.summary.items() if k != "conditions"}}
            (folder / "meta.json").write_text(json.dumps(_json_safe(meta), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise TokensimError(f"trace folder {folder}: cannot write ({exc.strerror or exc})") from None
        return folder


def _trace_line(r: RequestRecord) -> dict:
    """The traces' layout (input_toks, output_toks, arrival_time, first/last_token_ts) plus the client's extras."""
    def t(x: float | None) -> float | None:
        return None if x is None else round(x, 6)
    return {"request_id": f"bench-{r.index}", "input_toks": r.input_tokens, "output_toks": r.output_tokens_requested,
            "arrival_time": t(r.send_s), "first_token_ts": t(r.first_token_s), "last_token_ts": t(r.last_token_s),
            "end_ts": t(r.end_s), "itl": [round(g, 6) for g in r.itl_s], "output_toks_received": r.output_tokens,
            "server_prompt_toks": r.server_prompt_tokens, "status": r.status, "error": r.error}


def _json_safe(value: object) -> object:
    """Strict JSON: infinities and NaN become strings ("inf"), never bare Infinity/NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
