"""Measured serving runs, read into typed rows with catalog names; nothing is predicted here.

Two files (shared/data/serving/README.md says what each column means):
- silicon_dev.csv: rows of aiconfigurator's silicon_sample.csv (github.com/ai-dynamo/aiconfigurator, Apache-2.0),
  one end-to-end run at a fixed concurrency each -> `SiliconRun`.
- serving_dev.csv: engine benchmark pages, papers' validation runs, vendor posts -> `ServingRow`.

A row that cannot be read becomes an `Unresolved` whose reason names the fact it does not state (or the catalog
entry it needs); every reading that took interpretation is kept in the row's `assumptions`.
"""
from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tokensim.errors import TokensimError
from tokensim.specs.model import catalog as model_catalog
from tokensim.validate.harness import harness_of
from tokensim.validate.names import match_hardware, match_model
from tokensim.validate.parse import Skip, count, kv_cell, layout, precision_word, unstated, weights_cell

__all__ = ["Pool", "SiliconRun", "ServingRow", "Unresolved", "SILICON_COLUMNS", "SERVING_COLUMNS",
           "silicon_run", "serving_row", "read_silicon", "read_serving", "job_budgets"]

SILICON_COLUMNS = (
    "id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
    "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
    "moe_ep_size", "prefill_batch_size", "prefill_num_workers", "prefill_tp_size", "prefill_pp_size",
    "prefill_attention_dp_size", "prefill_moe_tp_size", "prefill_moe_ep_size", "decode_batch_size", "decode_num_workers",
    "decode_tp_size", "decode_pp_size", "decode_attention_dp_size", "decode_moe_tp_size", "decode_moe_ep_size",
    "silicon_ttft_ms", "silicon_tpot_ms",
)
SERVING_COLUMNS = (
    "id", "source_url", "source_date", "engine", "engine_version", "model", "hardware", "n_chips", "tp", "pp", "ep",
    "weight_precision", "kv_precision", "dataset", "mean_input_tokens", "mean_output_tokens", "arrival",
    "rate_or_concurrency", "metric", "value", "notes",
)
ENGINES = (("trtllm", r"tensorrt[-_ ]?llm|trt[-_ ]?llm"), ("sglang", r"sglang"), ("vllm", r"vllm"),
           ("tgi", r"\btgi\b|text-generation-inference"), ("llama.cpp", r"llama\.cpp"), ("lmdeploy", r"lmdeploy"))


@dataclass(frozen=True)
class Pool:
    """Identical workers of one kind: the replica of an agg run, or the prefill or decode workers of a disagg run."""
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int | None          # None: not stated (0 or empty in the source)
    moe_ep: int | None
    workers: int | None         # None: not stated
    batch_size: int | None      # requests per attention-DP rank, where stated

    @property
    def chips_per_worker(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def chips(self) -> int | None:
        return None if self.workers is None else self.workers * self.chips_per_worker


@dataclass(frozen=True)
class SiliconRun:
    id: str
    engine: str                         # backend: "trtllm", "sglang", "vllm"
    engine_version: str | None
    image: str | None                   # container image, where the source names one
    model: str                          # model catalog name
    model_path: str
    system: str                         # hardware catalog name
    weights: str | None                 # stored precision (specs/precision.py names); None: the checkpoint's own
    gemm_weights: str | None
    moe_weights: str | None
    kv: str | None                      # not in silicon_sample's columns: None
    mode: str                           # "agg" or "disagg"
    isl: int
    osl: int
    concurrency: int
    agg: Pool | None
    prefill: Pool | None
    decode: Pool | None
    ttft_s: float
    tpot_s: float
    measured: str | None                # YYYY-MM-DD
    assumptions: tuple[str, ...] = ()
    harness: str | None = None          # the benchmark harness behind the row (validate.harness.harness_of)
    job: str | None = None              # the collecting job that ran it, where the source names one (gtl_job_id=)

    @property
    def chips(self) -> int | None:
        """Chips of the whole run (None for a disagg run whose worker counts are not stated)."""
        if self.agg is not None:
            return self.agg.chips
        assert self.prefill is not None and self.decode is not None      # a run without agg is disaggregated: both pools
        p, d = self.prefill.chips, self.decode.chips
        return None if p is None or d is None else p + d


@dataclass(frozen=True)
class ServingRow:
    id: str
    engine: str                         # "vllm", "trtllm", "sglang", "tgi", ... (the cell, lower-cased, if unknown)
    engine_version: str | None
    model: str                          # model catalog name
    hardware: str                       # hardware catalog name
    chips: int
    tp: int | None
    pp: int | None
    ep: int | None
    attention_dp: int | None
    weights: str | None                 # None: not stated (the checkpoint's own)
    kv: str | None
    dataset: str
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    arrival: str                        # "poisson", "fixed_concurrency" or "offline"
    request_rate_per_s: float | None    # poisson: None when the rate is the highest meeting the source's latency bounds
    concurrency: int | None
    metric: str                         # e.g. "ttft_s_mean", "throughput_tokens_per_s"
    scenario: str                       # the metric's qualifier, e.g. "Server" in "throughput_tokens_per_s (Server)"
    value: float                        # SI units: seconds, tokens/s, requests/s
    source_url: str
    source_date: str
    notes: str
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unresolved:
    id: str
    reason: str


# ---------------------------------------------------------------- silicon_dev.csv

def _source_fields(text: str) -> dict[str, str]:
    """'db-dump/2026-04-27; config_id=691; silicon_concurrency=256; ...; vllm/vllm-openai:v0.19.0-cu130' -> fields;
    a part without '=' that names a registry path with a tag is the image."""
    fields: dict[str, str] = {}
    for part in (p.strip() for p in text.split(";")):
        key, eq, value = part.partition("=")
        if eq:
            fields.setdefault(key.strip(), value.strip())
        elif re.fullmatch(r"[\w.\-/]+/[\w.\-]+:[\w.\-]+", part):
            fields.setdefault("image", part)
    return fields


def _positive(raw: Mapping[str, str], column: str, row_id: str) -> int | None:
    return count(raw.get(column) or "", column, row_id).value


def _required(raw: Mapping[str, str], column: str, row_id: str) -> int:
    value = _positive(raw, column, row_id)
    if value is None:
        raise Skip(f"{column} not stated")
    return value


def _pool(raw: Mapping[str, str], prefix: str, row_id: str, notes: list[str], is_moe: bool) -> Pool:
    tp = _required(raw, f"{prefix}tp_size", row_id)
    pp = _required(raw, f"{prefix}pp_size", row_id)
    adp = _positive(raw, f"{prefix}attention_dp_size", row_id)
    moe_tp = _positive(raw, f"{prefix}moe_tp_size", row_id)
    moe_ep = _positive(raw, f"{prefix}moe_ep_size", row_id)
    workers = 1 if not prefix else _positive(raw, f"{prefix}num_workers", row_id)
    pool = Pool(tp, pp, adp or 1, moe_tp, moe_ep, workers, _positive(raw, f"{prefix}batch_size", row_id))
    name = prefix.rstrip("_") or "agg"
    if adp is None:
        notes.append(f"{name}: attention_dp_size empty or 0, read as 1 (no attention data parallelism)")
    if workers is None:
        notes.append(f"{name}: worker count not stated")
    if is_moe:
        if moe_tp is None or moe_ep is None:
            notes.append(f"{name}: MoE layout not stated (moe_tp_size {moe_tp}, moe_ep_size {moe_ep})")
        elif moe_tp * moe_ep != tp * pool.attention_dp:
            notes.append(f"{name}: moe_tp x moe_ep = {moe_tp * moe_ep} differs from tp x attention_dp = {tp * pool.attention_dp}")
    return pool


def _silicon_precisions(raw: Mapping[str, str], name_precision: str | None, notes: list[str]) -> tuple[str | None, ...]:
    """(weights, gemm weights, moe weights): 'fp8' and 'fp8_block' -> fp8, 'nvfp4' -> nvfp4, 'fp4' -> the GEMM
    format when it says which FP4, '' -> the model name's precision, else the checkpoint's own (None)."""
    words = []
    for column in ("precision", "gemm_quant_mode", "moe_quant_mode"):
        cell = (raw.get(column) or "").strip()
        words.append(None if unstated(cell) else precision_word(cell))
        if not unstated(cell) and words[-1] is None:
            raise Skip(f"{column} {cell!r} names no precision this reader knows")
    if words[0] == "fp4" and words[1] in ("nvfp4", "mxfp4"):
        words[0] = words[1]
    if not any(words):
        words = [name_precision] * 3
        notes.append(f"precision: not stated; {name_precision}, as the model name says" if name_precision
                     else "precision: not stated; the checkpoint's own")
    elif name_precision and words[0] and name_precision != words[0]:
        notes.append(f"precision: the model name says {name_precision}, the precision column {words[0]}; the column wins")
    return tuple(words)


def _engine_version(raw: Mapping[str, str], fields: Mapping[str, str], notes: list[str]) -> str | None:
    version = (raw.get("backend_version") or "").strip() or None
    image = fields.get("image", "")
    if version and "ai-dynamo" in image and image.endswith(f":{version}"):
        notes.append(f"engine version: backend_version {version} is the tag of the Dynamo runtime image {image}; "
                     f"the {raw.get('backend')} version inside it is not stated")
    if version is None:
        notes.append("engine version: not stated")
    return version


def silicon_run(raw: Mapping[str, str]) -> SiliconRun:
    """One silicon_dev.csv row as a SiliconRun, or Skip naming the fact the row does not state."""
    row_id = (raw.get("id") or "").strip()
    fields = _source_fields(raw.get("silicon_data_source") or "")
    found = match_model((raw.get("model_path") or "").strip())
    system = match_hardware((raw.get("system") or "").strip())
    notes = [found.note, system.note]
    is_moe = model_catalog.catalog_model(found.name).is_moe
    mode = (raw.get("mode") or "").strip().lower()
    if mode not in ("agg", "disagg"):
        raise Skip(f"mode {raw.get('mode')!r} not stated as agg or disagg")
    isl, osl = _required(raw, "isl", row_id), _required(raw, "osl", row_id)
    if mode == "agg":
        agg, prefill, decode = _pool(raw, "", row_id, notes, is_moe), None, None
    else:
        agg, prefill, decode = None, _pool(raw, "prefill_", row_id, notes, is_moe), _pool(raw, "decode_", row_id, notes, is_moe)
    stated = count(fields.get("silicon_concurrency", ""), "silicon_concurrency", row_id).value
    if stated is None and agg is not None and agg.batch_size:
        stated = agg.batch_size * agg.attention_dp
        notes.append(f"concurrency: not in silicon_data_source; batch_size x attention_dp_size = {stated}")
    if stated is None:
        raise Skip("concurrency not stated (no silicon_concurrency= in silicon_data_source, and no agg batch_size)")
    if agg is not None:
        agg = _replicas(agg, stated, notes)
    times = {}
    for column in ("silicon_ttft_ms", "silicon_tpot_ms"):
        try:
            ms = float((raw.get(column) or "").strip())
        except ValueError:
            raise Skip(f"{column} not stated") from None
        if not ms > 0:
            raise Skip(f"{column} not stated (value {raw.get(column)!r})")
        times[column] = ms / 1000.0
    weights, gemm, moe = _silicon_precisions(raw, found.precision, notes)
    measured = re.match(r"\d{4}-\d{2}-\d{2}", fields.get("measured", ""))
    if not measured:
        notes.append("measurement date: not stated")
    harness = harness_of(raw.get("silicon_data_source") or "")
    return SiliconRun(
        id=row_id, engine=(raw.get("backend") or "").strip().lower(), engine_version=_engine_version(raw, fields, notes),
        image=fields.get("image"), model=found.name, model_path=(raw.get("model_path") or "").strip(), system=system.name,
        weights=weights, gemm_weights=gemm, moe_weights=moe, kv=None, mode=mode, isl=isl, osl=osl, concurrency=stated,
        agg=agg, prefill=prefill, decode=decode, ttft_s=times["silicon_ttft_ms"], tpot_s=times["silicon_tpot_ms"],
        measured=measured.group(0) if measured else None, assumptions=tuple(notes), harness=harness,
        job=fields.get("gtl_job_id") or None,
    )


def _replicas(pool: Pool, concurrency: int, notes: list[str]) -> Pool:
    """The agg pool with its replica count, as aiconfigurator's generator deploys it. Its benchmark rule
    (generator/rule_plugin/benchmark/trtllm.rule and sglang.rule, from 71bb3d00e, 2026-01-30) sets the benchmark's
    concurrency to agg_workers x max_batch_size, and the silicon sample's batch_size is that max_batch_size (per
    attention-DP rank). Rule: an agg run whose stated concurrency is exactly R >= 2 times batch_size x attention_dp
    ran R replicas behind the router, concurrency / R clients each; any other stays one replica."""
    per_replica = pool.batch_size * pool.attention_dp if pool.batch_size else 0
    if not per_replica or concurrency <= per_replica or concurrency % per_replica:
        notes.append("agg: one replica (the columns give no replica count; concurrency = batch_size x attention_dp "
                     "holds for 2,597 of 2,627 agg rows that state both)")
        return pool
    replicas = concurrency // per_replica
    notes.append(f"agg: {replicas} replicas of {pool.chips_per_worker} GPUs, {per_replica} clients each: concurrency "
                 f"{concurrency} = {replicas} x batch_size {pool.batch_size} x attention_dp {pool.attention_dp}, as "
                 f"aiconfigurator's generator sets it (agg_workers x max_batch_size) (rule)")
    return replace(pool, workers=replicas)


def job_budgets(runs: list[SiliconRun]) -> list[SiliconRun]:
    """Each agg run read as replicas whose job (gtl_job_id=) also ran disagg deployments that all hold the same G
    GPUs, with R replicas holding G as well, says so: two facts of the rows agree (jobs 23803065 and 23793564: 40 TP1
    prefill + 6 TP4 decode workers = 64 GPUs = 8 TP8 or 32 TP2 replicas)."""
    budget: dict[str, set[int]] = {}
    for r in runs:
        if r.job and r.agg is None and r.chips is not None:
            budget.setdefault(r.job, set()).add(r.chips)
    return [replace(r, assumptions=r.assumptions + (f"agg replicas: every disagg run of its job {r.job} holds the same "
                                                    f"{r.chips} GPUs",))
            if r.agg is not None and r.agg.workers != 1 and budget.get(r.job or "") == {r.chips} else r
            for r in runs]


# ---------------------------------------------------------------- serving_dev.csv

def _engine(text: str) -> str:
    return next((name for name, pattern in ENGINES if re.search(pattern, text, re.I)), text.strip().lower())


def _version(text: str, notes: list[str]) -> str | None:
    """'0.19.0', 'v1.0 docs', "docker 'latest' at run time (v0.5.4 per issue #8)" -> '0.19.0', '1.0', '0.5.4'."""
    m = re.search(r"(?<![\w.])v?(\d+\.\d+(?:[.+\-]?[a-z0-9]+)*)", text, re.I)
    if not m:
        notes.append(f"engine version: not stated ({text.strip()!r})" if text.strip() else "engine version: not stated")
        return None
    if m.group(1) != text.strip():
        notes.append(f"engine version: {text.strip()!r} read as {m.group(1)}")
    return m.group(1)


def _load(arrival_text: str, load_text: str, notes: list[str]) -> tuple[str, float | None, int | None]:
    """(arrival, request rate per s, concurrency) from the arrival and rate_or_concurrency cells."""
    a = arrival_text.lower()
    if re.search(r"poisson|loadgen server", a):
        arrival = "poisson"
        if "loadgen" in a and "poisson" not in a:
            notes.append("arrival: MLPerf LoadGen's server scenario issues queries as a Poisson process")
    elif "offline" in a:
        return "offline", None, None
    elif "concurrency" in a or "closed" in a:
        arrival = "fixed_concurrency"
    else:
        raise Skip(f"arrival process not stated ({arrival_text.strip()!r})")
    if re.search(r"max(?:imum)? rate", load_text, re.I):
        notes.append("rate: the highest the system sustains within the latency bounds the notes give (not a number)")
        return arrival, None, None
    try:
        load = float(load_text.strip())
    except ValueError:
        raise Skip(f"{'request rate' if arrival == 'poisson' else 'concurrency'} not stated ({load_text.strip()!r})") from None
    return (arrival, load, None) if arrival == "poisson" else (arrival, None, int(load))


def _metric(text: str, value: float) -> tuple[str, str, float]:
    """(metric, its qualifier, value in SI units): 'ttft_ms_p99' -> ('ttft_s_p99', '', value / 1000)."""
    m = re.fullmatch(r"\s*([\w]+)\s*(?:\((.*)\))?\s*", text)
    if not m:
        raise Skip(f"metric {text!r} not understood")
    metric, scenario = m.group(1).lower(), (m.group(2) or "").strip()
    if re.search(r"(?:^|_)ms(?:_|$)", metric):
        metric, value = re.sub(r"(^|_)ms(_|$)", r"\1s\2", metric), value / 1000.0
    return metric, scenario, value


def _mean_tokens(text: str, column: str, notes: list[str]) -> float | None:
    if unstated(text):
        notes.append(f"{column}: not stated")
        return None
    return float(text.replace(",", ""))


def serving_row(raw: Mapping[str, str]) -> ServingRow:
    """One serving_dev.csv row as a ServingRow, or Skip naming the fact the row does not state."""
    cell = {c: (raw.get(c) or "").strip() for c in SERVING_COLUMNS}
    row_id = cell["id"]
    found, hw = match_model(cell["model"]), match_hardware(cell["hardware"])
    notes = [found.note, hw.note]
    try:
        value = float(cell["value"].replace(",", ""))
    except ValueError:
        raise Skip(f"value not stated ({cell['value']!r})") from None
    metric, scenario, value = _metric(cell["metric"], value)
    chips = count(cell["n_chips"], "n_chips", row_id).value or hw.chips
    if chips is None:
        raise Skip("chip count not stated")
    lay = layout(cell["ep"])                 # '2 (DP2 + enable_expert_parallel)': EP 2 over 2 attention-DP ranks
    if lay and lay.ep:
        ep = lay.ep
    elif re.search(r"large|wide", cell["ep"], re.I):
        ep = None
        notes.append(f"ep: {cell['ep']!r}, degree not stated")
    else:
        ep = count(re.sub(r"\(.*", "", cell["ep"]), "ep", row_id).value
    attention_dp = lay.dp if lay and lay.dp_attention else None
    weights = weights_cell(cell["weight_precision"])
    kv, kv_note = kv_cell(cell["kv_precision"])
    notes += [weights.note, kv_note]
    stored = weights.everything or weights.experts or found.precision
    arrival, rate, concurrency = _load(cell["arrival"], cell["rate_or_concurrency"], notes)
    return ServingRow(
        id=row_id, engine=_engine(cell["engine"]), engine_version=_version(cell["engine_version"], notes),
        model=found.name, hardware=hw.name, chips=chips, tp=count(cell["tp"], "tp", row_id).value,
        pp=count(cell["pp"], "pp", row_id).value, ep=ep, attention_dp=attention_dp, weights=stored, kv=kv,
        dataset=cell["dataset"], mean_input_tokens=_mean_tokens(cell["mean_input_tokens"], "mean input tokens", notes),
        mean_output_tokens=_mean_tokens(cell["mean_output_tokens"], "mean output tokens", notes), arrival=arrival,
        request_rate_per_s=rate, concurrency=concurrency, metric=metric, scenario=scenario, value=value,
        source_url=cell["source_url"], source_date=cell["source_date"], notes=cell["notes"], assumptions=tuple(notes),
    )


# ---------------------------------------------------------------- files

def _read(path: str | Path, columns: tuple[str, ...], build) -> tuple[list, list[Unresolved]]:
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TokensimError(f"{path}: cannot read ({exc.strerror})") from None
    rows, unresolved = [], []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TokensimError(f"{path}: missing columns {', '.join(missing)}; expected the columns {', '.join(columns)}")
        for n, raw in enumerate(reader, start=2):
            try:
                rows.append(build(raw))
            except Skip as exc:
                unresolved.append(Unresolved((raw.get("id") or f"line {n}").strip(), str(exc)))
    return rows, unresolved


def read_silicon(path: str | Path) -> tuple[list[SiliconRun], list[Unresolved]]:
    """Every row of a silicon_sample-layout CSV: the runs read, and the rows that could not be (with reasons)."""
    runs, unresolved = _read(path, SILICON_COLUMNS, silicon_run)
    return job_budgets(runs), unresolved


def read_serving(path: str | Path) -> tuple[list[ServingRow], list[Unresolved]]:
    """Every row of a serving_dev-layout CSV: the rows read, and the rows that could not be (with reasons)."""
    return _read(path, SERVING_COLUMNS, serving_row)
