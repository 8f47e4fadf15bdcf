"""Requests to serve: open-loop arrival processes, a closed loop at fixed concurrency, traces.

A `Workload` is a set of requests as parallel arrays, sorted by arrival time. A `ClosedLoop`
holds request sizes only: it keeps `concurrency` requests outstanding and sends the next one
when one finishes, as benchmark clients do. Randomness comes from the numpy Generator passed in.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokensim.errors import TokensimError, bad_value, require

NO_PREFIX = -1

# Trace fields of the LLMServingSim / vLLM request records (shared/data/serving/traces).
_JSONL_REQUIRED = ("input_toks", "output_toks", "arrival_time")
_JSONL_OPTIONAL = ("request_id", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts",
                   "prefix_id", "prefix_toks",
                   # what `tokensim bench --save` adds (endpoints/results.py): the client's own measurements
                   "end_ts", "itl", "output_toks_received", "server_prompt_toks", "status", "error")
_CSV_REQUIRED = ("arrival_s", "input_tokens", "output_tokens")
_CSV_OPTIONAL = ("prefix_id", "prefix_tokens")


def _int_array(name: str, values, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim == 0 and n is not None:
        arr = np.full(n, arr)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)) \
                or np.any(arr != np.round(arr)):
            bad = arr.flat[0] if arr.size else arr
            raise bad_value(name, bad, "whole numbers of tokens")
    return arr.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests as arrays, sorted by arrival; `prefix_id` -1 means no shared prefix."""
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrival = np.asarray(self.arrival_s, dtype=np.float64)
        n = arrival.size
        require(arrival.ndim == 1, "arrival_s", arrival.shape, "a 1-D array of times")
        inputs = _int_array("input_tokens", self.input_tokens, n)
        outputs = _int_array("output_tokens", self.output_tokens, n)
        pid = _int_array("prefix_id", NO_PREFIX if self.prefix_id is None else self.prefix_id, n)
        ptok = _int_array("prefix_tokens", 0 if self.prefix_tokens is None else self.prefix_tokens, n)
        for name, arr in (("input_tokens", inputs), ("output_tokens", outputs),
                          ("prefix_id", pid), ("prefix_tokens", ptok)):
            require(arr.shape == (n,), name, arr.shape, f"one value per request ({n})")
        if n:
            _check_times("arrival_s", arrival)
            _first_bad("input_tokens", inputs, inputs < 1, "at least 1 token")
            _first_bad("output_tokens", outputs, outputs < 1, "at least 1 token")
            _first_bad("prefix_id", pid, pid < NO_PREFIX, "-1 (none) or an id >= 0")
            _first_bad("prefix_tokens", ptok, (ptok < 0) | (ptok > inputs),
                       "between 0 and the request's input tokens")
            _first_bad("prefix_tokens", ptok, (pid == NO_PREFIX) & (ptok > 0),
                       "0 for a request without a prefix_id")
        for name, arr in (("arrival_s", arrival), ("input_tokens", inputs), ("output_tokens", outputs),
                          ("prefix_id", pid), ("prefix_tokens", ptok)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def check_context(self, max_context_tokens: int) -> None:
        """Refuse any request whose input + output tokens exceed `max_context_tokens`."""
        total = self.input_tokens + self.output_tokens
        _first_bad("input_tokens + output_tokens", total, total > max_context_tokens,
                   f"at most the context limit {max_context_tokens}")


def _first_bad(name: str, values: np.ndarray, mask: np.ndarray, expected: str) -> None:
    if np.any(mask):
        i = int(np.argmax(mask))
        raise TokensimError(f"{name} = {values[i].item()!r} (request {i}): expected {expected}")


def _check_times(name: str, times: np.ndarray) -> None:
    _first_bad(name, times, ~np.isfinite(times), "a finite time in seconds")
    _first_bad(name, times, times < 0, "a time >= 0 s")
    if times.size > 1:
        _first_bad(name, times[1:], times[1:] < times[:-1], "times sorted in arrival order")


@dataclass(frozen=True)
class ClosedLoop:
    """`concurrency` clients, each sending its next request when its last one finishes.

    Request sizes come from `requests` in order (their arrival times are ignored). The clients start together, or
    evenly spread over `start_spread_s`; `think_s` > 0: each waits an exponentially distributed time of that mean
    between a response and its next request (the simulation's seeded generator draws it).
    """
    concurrency: int
    requests: Workload
    start_spread_s: float = 0.0
    think_s: float = 0.0

    def __post_init__(self) -> None:
        require(isinstance(self.concurrency, int) and self.concurrency >= 1, "concurrency",
                self.concurrency, "a whole number of clients >= 1")
        for name in ("start_spread_s", "think_s"):
            v = getattr(self, name)
            require(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, name, v, "a finite time >= 0 s")

    def __len__(self) -> int:
        return len(self.requests)


def _rate(rate_per_s: float) -> float:
    ok = isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0
    require(ok, "rate_per_s", rate_per_s, "a finite request rate > 0 per second")
    return float(rate_per_s)


def poisson_arrivals(rate_per_s: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process (exponential gaps), the first at its first gap."""
    rate = _rate(rate_per_s)
    require(isinstance(n, int) and n >= 0, "n", n, "a whole number of requests >= 0")
    return np.cumsum(rng.exponential(1.0 / rate, n))


def gamma_arrivals(rate_per_s: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times with gamma-distributed gaps of mean 1/rate and coefficient of variation cv
    (cv 1 is Poisson; above 1 bursty, below 1 regular)."""
    rate = _rate(rate_per_s)
    ok = isinstance(cv, (int, float)) and math.isfinite(cv) and cv > 0
    require(ok, "cv", cv, "a finite coefficient of variation > 0")
    require(isinstance(n, int) and n >= 0, "n", n, "a whole number of requests >= 0")
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), n))


def check_range_ratio(value, field: str = "range_ratio") -> float:
    """A length range ratio (`range_lengths`): a finite fraction in (0, 1]; else an error naming `field`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1
    require(ok, field, value, "a fraction in (0, 1]")
    return float(value)


def range_lengths(length: int, range_ratio: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` token counts drawn uniformly from the integers in [max(1, int(range_ratio x length)), length], as the
    random datasets of the common benchmark clients draw each request's input and output lengths (vLLM's and
    InferenceX's benchmark_serving.py, sample_random_requests: np.random.randint(int(L x r), L + 1); SGLang's
    bench_serving --random-range-ratio); range_ratio 1 gives every request exactly `length` and draws nothing."""
    require(isinstance(length, (int, np.integer)) and length >= 1, "length", length, "a whole number of tokens >= 1")
    check_range_ratio(range_ratio)
    if range_ratio == 1:
        return np.full(n, int(length), dtype=np.int64)
    return rng.integers(max(1, int(length * range_ratio)), int(length) + 1, n).astype(np.int64)


def drawn_lengths(input_tokens: int, output_tokens: int, range_ratio: float, n: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The input and output tokens of `n` requests (`range_lengths`), inputs drawn first and outputs next from the
    one generator: the order the simulator, `tokensim bench` and validation share, so that one seed gives each of
    them the same requests."""
    return (range_lengths(input_tokens, range_ratio, n, rng), range_lengths(output_tokens, range_ratio, n, rng))


def synthetic(n: int, rng: np.random.Generator, *, rate_per_s: float | None = None, cv: float = 1.0,
              input_tokens=1000, output_tokens=200, n_prefixes: int = 0,
              prefix_tokens: int = 0) -> Workload:
    """`n` requests arriving at `rate_per_s` (Poisson, or gamma when cv != 1; all at 0 when no
    rate is given). Lengths are ints (all the same) or arrays of one value per request. With
    `n_prefixes` > 0, each request shares one of that many prefixes of `prefix_tokens` tokens."""
    if rate_per_s is None:
        arrival = np.zeros(n)
    elif cv == 1.0:
        arrival = poisson_arrivals(rate_per_s, n, rng)
    else:
        arrival = gamma_arrivals(rate_per_s, cv, n, rng)
    inputs = _int_array("input_tokens", input_tokens, n)
    if n_prefixes:
        require(isinstance(n_prefixes, int) and n_prefixes > 0, "n_prefixes", n_prefixes, "a count >= 0")
        pid = rng.integers(0, n_prefixes, n)
        ptok = np.minimum(prefix_tokens, inputs)
    else:
        pid, ptok = None, None
    return Workload(arrival, inputs, _int_array("output_tokens", output_tokens, n), pid, ptok)


def load_trace(path: str | Path) -> Workload:
    """A trace file: JSONL request records (`input_toks`, `output_toks`, `arrival_time`, as in the
    vLLM traces of shared/data/serving/traces) or a CSV with a header
    `arrival_s,input_tokens,output_tokens[,prefix_id,prefix_tokens]`. JSONL times are made
    relative to the first arrival; CSV times are taken as they are."""
    path = Path(path)
    if not path.is_file():
        raise bad_value("trace", str(path), "an existing .jsonl or .csv file")
    if path.suffix == ".csv":
        return _load_csv(path)
    if path.suffix in (".jsonl", ".json"):
        return _load_jsonl(path)
    raise bad_value("trace", str(path), "a file ending in .jsonl or .csv")


def _load_jsonl(path: Path) -> Workload:
    rows = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TokensimError(f"{path.name} line {line_no}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise bad_value(f"{path.name} line {line_no}", rec, "a JSON object per line")
            unknown = sorted(set(rec) - set(_JSONL_REQUIRED) - set(_JSONL_OPTIONAL))
            if unknown:
                raise bad_value(f"{path.name} line {line_no} field", unknown[0],
                                f"one of {', '.join(_JSONL_REQUIRED + _JSONL_OPTIONAL)}")
            for key in _JSONL_REQUIRED:
                if key not in rec:
                    raise bad_value(f"{path.name} line {line_no} field {key}", None, "present")
                if not isinstance(rec[key], (int, float)) or isinstance(rec[key], bool):
                    raise bad_value(f"{path.name} line {line_no} {key}", rec[key], "a number")
            rows.append(rec)
    arrival = np.array([r["arrival_time"] for r in rows], dtype=np.float64)
    if arrival.size:
        _check_times("arrival_time", arrival)
        arrival = arrival - arrival[0]
    pid = [r.get("prefix_id", NO_PREFIX) for r in rows]
    ptok = [r.get("prefix_toks", 0) for r in rows]
    return Workload(arrival, np.array([r["input_toks"] for r in rows]), np.array([r["output_toks"] for r in rows]),
                    np.array(pid, dtype=np.int64), np.array(ptok, dtype=np.int64))


def _load_csv(path: Path) -> Workload:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return Workload(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        header = [h.strip() for h in header]
        allowed = _CSV_REQUIRED + _CSV_OPTIONAL
        for h in header:
            if h not in allowed:
                raise bad_value(f"{path.name} column", h, f"one of {', '.join(allowed)}")
        for h in _CSV_REQUIRED:
            if h not in header:
                raise bad_value(f"{path.name} column {h}", None, "present in the header")
        columns: dict[str, list[float]] = {h: [] for h in header}
        for line_no, row in enumerate(reader, 2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise bad_value(f"{path.name} line {line_no}", ",".join(row),
                                f"{len(header)} values ({','.join(header)})")
            for h, cell in zip(header, row, strict=True):
                try:
                    columns[h].append(float(cell))
                except ValueError:
                    raise bad_value(f"{path.name} line {line_no} {h}", cell, "a number") from None
    arrival = np.array(columns["arrival_s"], dtype=np.float64)
    _check_times("arrival_s", arrival)
    return Workload(arrival, np.array(columns["input_tokens"]), np.array(columns["output_tokens"]),
                    np.array(columns["prefix_id"]) if "prefix_id" in columns else None,
                    np.array(columns["prefix_tokens"]) if "prefix_tokens" in columns else None)


def load_trace_measurements(path: str | Path) -> dict[str, np.ndarray]:
    """What was measured per request in a JSONL trace, in seconds: `ttft_s` (first token - queued), `e2e_s`
    (last token - queued), `tpot_s` ((last - first) / (output - 1), NaN for one-token outputs), `queue_s`
    (scheduled - queued). The start is the engine's `queued_ts`, or the client's `arrival_time` where a trace has no
    engine clock (`tokensim bench`); `engine_clock` says which, per request (an engine stamps a request when its loop
    takes it in, between steps: compare with a simulation's `engine_ttft_s`, not its TTFT from arrival). A failed
    request (no token times) and a missing `scheduled_ts` give NaN."""
    path = Path(path)
    col: dict[str, list[float]] = {k: [] for k in ("start", "scheduled_ts", "first_token_ts", "last_token_ts",
                                                  "output_toks", "engine_clock")}

    def number(x: Any) -> float:
        return float("nan") if x is None else float(x)

    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            values = (number(r["queued_ts"] if "queued_ts" in r else r["arrival_time"]),
                      number(r.get("scheduled_ts")), number(r["first_token_ts"]), number(r["last_token_ts"]),
                      number(r["output_toks"]), float("queued_ts" in r))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise bad_value(f"{path.name} line {n}", line[:80], "a request record with arrival_time (or queued_ts), "
                            "first_token_ts, last_token_ts and output_toks") from None
        for k, v in zip(col, values, strict=True):
            col[k].append(v)
    a = {k: np.array(v, dtype=np.float64) for k, v in col.items()}
    decode = a["output_toks"] - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(decode > 0, (a["last_token_ts"] - a["first_token_ts"]) / decode, np.nan)
    return {"ttft_s": a["first_token_ts"] - a["start"],
            "e2e_s": a["last_token_ts"] - a["start"],
            "tpot_s": tpot,
            "queue_s": a["scheduled_ts"] - a["start"],
            "engine_clock": a["engine_clock"] > 0}
