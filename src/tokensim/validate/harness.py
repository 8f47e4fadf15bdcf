"""What a measured run's benchmark harness did that its row does not say: speculative decoding, the client's request
lengths, and SGLang's, TensorRT-LLM's and vLLM's launch flags (data/serving/harness.toml holds the launch settings,
with their sources).

1,541 of silicon_dev.csv's runs (source_file 2026-03-25.csv and 2026-04-06.csv, images written `nvcr.io#nvidia/...`)
come from SemiAnalysis InferenceX (github.com/SemiAnalysisAI/InferenceX), whose `.github/configs/nvidia-master.yaml`
names one container image per benchmark configuration. In every version of that file from 2025-10 to 2026-04 the
image `nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3` belongs only to `dsr1-fp4-b200-trt-mtp` and
`dsr1-fp8-b200-trt-mtp` (the configurations without MTP ran `...:1.2.0rc6.post2`; commit 66d6a351abec, 2026-02-07,
lines 1227-1385). Their launch scripts (benchmarks/dsr1_fp4_b200_trt_mtp.sh, dsr1_fp8_b200_trt_mtp.sh at that
commit) set `speculative_config: {decoding_type: MTP, num_nextn_predict_layers: MTP}` with MTP = 3, or 1 under
attention data parallelism. A run in that image is therefore a DeepSeek-R1 run with MTP drafts, though its row
states no speculative decoding.

`...:1.1.0rc2.post2` ran both the MTP and the plain configurations, and its rows tell them apart by the day they
were measured. InferenceX runs a configuration when a commit's perf-changelog.yaml entry names it (since 9c0fcc9af,
2025-12-15: "performance changelog triggered runs (as opposed to nightly)"), and its exports date each run at the
triggering commit. The MTP configurations arrived in bf3456727 (PR #392, committed 2026-01-14 22:26:18 UTC), whose
entry names only `dsr1-fp4-b200-trt-mtp`, `dsr1-fp8-b200-trt-mtp` and `dsr1-fp8-h200-trt-mtp`; the only other
commits of that UTC day are AMD's (cc35702b3 and 2be3de60f, ATOM on MI355X) and a [skip-sweep] revert. The 73
runs in that image measured on 2026-01-14 (20 of them stamped 22:26:21Z, three seconds after the commit) are MTP
runs: H200 1k/1k runs at 128 and 256 clients exist only in the MTP configuration (the plain one stops at 64), and
at 4 clients they take 8.6 ms a token where the plain configuration measured 13.8 ms on 2025-12-15 (db-dump
config 181). Their launch scripts (benchmarks/dsr1_fp8_h200_trt_mtp_slurm.sh and the B200 twins at bf3456727) set
MTP = 3, or 1 under attention DP, and MAX_BATCH_SIZE = CONC / TP under attention DP (the later scripts, CONC / 4).
Left as stated (no drafts): the runs of that image measured on other days (2025-12-15, before any MTP
configuration existed; 2026-01-28, e28c038f8's full sweep of both kinds, which the row cannot tell apart).

SGLang's MTP runs are told apart the same way where they can be: dsr1-fp8-b200-sglang and dsr1-fp8-b200-sglang-mtp
ran in one image (lmsysorg/sglang:v0.5.9-cu130) on one day (2026-03-25, 12ba0ae07), and the 26 rows of that image
and day beyond the plain configuration's search space (TP 8 at more than 64 clients, or more than 4 at 8k/1k) are
MTP runs: EAGLE on the MTP layer with two drafts a step and that script's caps (harness.toml [[sglang_mtp]],
`sglang_mtp`). Their TPOT shows it: at 1k/1k it rises 28.7 -> 42.6 -> 68.8 ms from 128 to 512 clients, where the
plain script's --max-running-requests 128 would hold it flat and queue the rest for whole requests (measured TTFT
1.4 -> 3.1 s). Within the shared search space the rows cannot be told apart and stand as stated. Their drafts are
not simulated (each run's assumptions say so): the same day's plain and MTP runs of one load differ by 1.10-1.50x in
TPOT, where the shipped acceptance makes the simulator's two drafts worth 1.8-2.0x on those pairs (1.6-1.7x on the 26
runs, 41 % too fast, 17 % as plain runs), so the drafts' acceptance on these prompts, or SGLang's cost of verifying
them, is not known. Simulated, the pairs' speedups are met by about 0.46 per draft position (median log error of the
speedup -7 % at 0.4, +4 % at 0.5).

The acceptance of each draft is not published for these runs (random-token prompts in the chat template,
utils/bench_serving/benchmark_serving.py). They get the shipped MTP default, constants.toml [speculative]
mtp_acceptance (0.85, 0.72, 0.60 per chained position: the first is the low end of DeepSeek-V3's published 85-90 %,
arXiv:2412.19437 section 5.4.3; the deeper ones are assumed, as that file says). InferenceX later notes that raw
random tokens lower acceptance (.claude/commands/add-model-hardware.md), so the runs' true rate may be lower: an
assumption each case records.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from tokensim.deploy.deployment import SpecDecode
from tokensim.prediction.kv_pool import release_tuple

INFERENCEX = "inferencex"
AICONFIGURATOR = "aiconfigurator"

# Off in validation and in the fit: InferenceX's client (lengths drawn in [0.8 L, L]) and, with it, its scripts' SGLang,
# TensorRT-LLM and vLLM launch settings (harness.toml). Modelled, they made the out-of-sample errors worse after a
# full refit (`tokensim fit`): with the client and SGLang's flags (2026-12-04) simulated TTFT 31.8 -> 33.1 %, steady
# TPOT 11.8 -> 12.9 %, published rows 15.9 -> 16.3 % leaving each source out; with every engine's launch as well
# (2026-12-04, second refit) simulated TTFT 32.0 -> 33.2 %, steady TPOT 11.8 -> 12.7 %, published rows 15.9 -> 16.1 %.
# The launches help where the scripts are known (TTFT leaving the pair out: b200 / trtllm 41 -> 33 %, h200 / trtllm
# 41 -> 30 %, h200 / sglang 37 -> 19 %) and vLLM's runs fall apart (b200 / vllm 23 -> 31 %, h100-sxm / vllm 30 ->
# 47 %, its TPOT 8 -> 17 %): clients spread by their draws meet running decodes, and the simulator's vLLM prefill
# beside them is too cheap, which the lockstep of equal requests had hidden. A third refit (2026-12-05) that also
# fitted TTFT at every load, not only light load, gave simulated TTFT 32.0 -> 32.5 %, steady TPOT 11.8 -> 12.3 %,
# published rows 15.9 -> 14.7 %: the same split, vLLM's H100 and B200 runs no longer transferring to each other
# (docs/model.md 5.2). A fourth (2026-12-06) fitted the Blackwell prefill clock beside it (0.90): TTFT 31.7 -> 29.3 %,
# published rows 14.5 -> 13.0 %, but simulated TPOT 12.3 -> 13.2 % and steady TPOT 11.75 -> 13.7 %, the prefills
# that TensorRT-LLM and SGLang run whole stalling the spread clients' decodes more than measured. A fifth (2026-12-06),
# with SGLang's ignore-EOS admission and a third fit sweep: TTFT 31.7 -> 28.3 %, but published rows 14.5 -> 15.9 %,
# simulated TPOT 12.3 -> 12.7 %, steady TPOT 11.75 -> 13.3 %. A sixth (2026-12-06), with the fit's estimates
# following the spread clients (validate/serving.py ServingCase.spread_arrivals): TTFT 31.7 -> 29.0 %, but published
# rows 14.5 -> 15.6 %, simulated TPOT 12.3 -> 12.7 %, steady TPOT 11.75 -> 13.9 %. A seventh (2026-12-07), on the
# routing-skew model: TTFT 30.6 -> 28.9 %, published rows 14.5 -> 14.0 %, but simulated TPOT 11.3 -> 12.7 %, steady
# TPOT 11.4 -> 13.1 %; vLLM's InferenceX runs measure first tokens 1.5-1.8x later than the spread clients give, which
# the refit put into vLLM's request path, costing aiconfigurator's H100 vLLM runs 17 -> 54 % in TTFT (docs/model.md
# 5.2). An eighth (2026-12-07, stop 52) repeated the seventh's figures to the tenth of a point. A ninth (2026-12-07,
# stop 54) refitted only the prefill-side constants (prefill shares, the Blackwell prefill clock, eager-layer and
# request times), warm-started from the shipped ones: TTFT 31.0 -> 28.6 % (light load 29.8 -> 26.7 %), but simulated
# TPOT 10.9 -> 11.5 %, steady TPOT 11.4 -> 11.9 %, published rows 13.6 -> 14.1 %: the slower prefills it fits (vLLM's
# share 0.89 -> 0.66, the Blackwell prefill clock 0.98 -> 0.79) stall the spread clients' decodes. At the shipped
# constants, without a refit, the client alone gives TTFT 31.0 -> 34.4 % with simulated TPOT unchanged (10.9 %):
# every pair improves but B200 vLLM (21 -> 47 %, its first tokens 0.4-0.65x the measured; docs/model.md 7). A tenth
# and an eleventh (stop 57) added a request path per prompt token outside the steps:
# refitting the request path alone, TTFT 31.0 -> 28.1 % but simulated TPOT 10.9 -> 11.4 % and published rows 13.6 ->
# 14.7 %; refitting everything, TTFT -> 27.3 %, published rows -> 13.9 %, but simulated TPOT -> 11.8 % and steady TPOT
# 11.4 -> 12.3 %, the fit choosing slower prefills over the per-token path (docs/model.md 5.2). Until
# those stalls are priced, the rows' stated lengths and the generator's scheduler rule stand; the functions below
# are what to switch on with it.
SIMULATE_INFERENCEX_CLIENT = False

# Off in validation and in the fit: the kernel fusions of InferenceX's launches (harness.toml [[fusions]], `launch_fusions`).
# Switching this on applies those alone. Refitted with them and, beside them, TensorRT-LLM's all-reduce + RMSNorm fusion
# on every TensorRT-LLM run at TP > 1 (then an engine default in data/engines/trtllm.toml, removed after this refit)
# (2026-12-07, stop 54), against a refit without them on the same footing (stop 53's, drain weights): simulated TPOT
# leaving each pair out 10.4 -> 11.2 %, simulated TTFT 30.7 -> 31.3 %, steady TPOT 10.7 -> 11.3 %, published rows
# leaving each source out 14.3 -> 15.6 %. B200 SGLang's DeepSeek runs went too fast (9.7 -> 11.3 %) and the shared
# SGLang constants took H100 SGLang's runs from 15.2 to 25.5 %; H200 and H100 TensorRT-LLM improved (12.3 -> 11.4 %,
# 10.2 -> 9.9 %). The counts in perf/layers.py KERNELS are vLLM's and SGLang's approximate ones (no KV-cache write,
# sampling or quantize kernel), and the fitted kernel gap stands for all of it; taking out only the launches an engine
# fuses undercounts. The scripts' facts are kept, to switch on with per-engine counts.
APPLY_LAUNCH_FUSIONS = False

@dataclass(frozen=True)
class MtpRuns:
    """InferenceX TensorRT-LLM runs that ran MTP drafts: those in `image`, measured on `measured` (a UTC day; None:
    any day). `batch_divisor`: the scripts' MAX_BATCH_SIZE = CONC / divisor under attention DP (None: the attention
    ranks, their CONC / TP)."""
    image: str
    measured: str | None
    batch_divisor: int | None
    why: str


MTP_RUNS = (
    MtpRuns("tensorrt-llm/release:1.2.0rc6.post3", None, 4,
            "image ran only InferenceX's MTP configurations (nvidia-master.yaml at 66d6a351abec)"),
    MtpRuns("tensorrt-llm/release:1.1.0rc2.post2", "2026-01-14", None,
            "measured on the day InferenceX's perf changelog ran only the new -mtp configurations of this image "
            "(bf3456727, PR #392)"),
)
MTP_DRAFTS = 3                       # num_nextn_predict_layers in the InferenceX MTP scripts ...
MTP_DRAFTS_ATTENTION_DP = 1          # ... and under attention data parallelism


def mtp_runs(image: str | None, engine: str, measured: str | None = None) -> MtpRuns | None:
    """The MTP_RUNS entry a TensorRT-LLM run of `image` measured on day `measured` (YYYY-MM-DD) belongs to, if any."""
    if not image or engine != "trtllm":
        return None
    normalized = image.replace("#", "/")
    return next((e for e in MTP_RUNS if normalized.endswith(e.image) and e.measured in (None, measured)), None)


def _nextn(attn_dp: int) -> int:
    return MTP_DRAFTS_ATTENTION_DP if attn_dp > 1 else MTP_DRAFTS


def mtp_drafts(image: str | None, engine: str, attn_dp: int, measured: str | None = None) -> int | None:
    """Draft tokens per step of an InferenceX MTP run (the scripts' num_nextn_predict_layers); None for any other
    run."""
    return None if mtp_runs(image, engine, measured) is None else _nextn(attn_dp)


def harness_speculation(image: str | None, engine: str, attn_dp: int,
                        measured: str | None = None) -> tuple[SpecDecode, str] | None:
    """The speculative decoding a run's image and day imply, with the assumption it records (None: none implied)."""
    found = mtp_runs(image, engine, measured)
    if found is None:
        return None
    drafts = _nextn(attn_dp)
    from tokensim.validate.rules import speculative_defaults

    rates = tuple(float(a) for a in speculative_defaults()["mtp_acceptance"][:drafts])
    spec = SpecDecode(method="mtp", draft_tokens=drafts, acceptance=rates)
    note = (f"speculative decoding: image {image}, {found.why} (nextn {drafts}); "
            f"acceptance {rates} per draft, the MTP default in constants.toml, not stated by the run (rule)")
    return spec, note


def harness_limits(image: str | None, engine: str, attn_dp: int, concurrency: int, isl: int,
                   measured: str | None = None) -> tuple[int, int] | None:
    """(max_batch_size, max_num_tokens) per attention rank that the InferenceX MTP scripts launch TensorRT-LLM with,
    for an MTP run; None otherwise. The scripts (benchmarks/dsr1_fp4_b200_trt_mtp.sh at commit 66d6a351abec)
    set MAX_BATCH_SIZE = CONC (CONC / 4 under attention DP, CONC itself below 4; at bf3456727, CONC / TP) and
    MAX_NUM_TOKENS = ((MTP + 1) MAX_BATCH_SIZE + ISL + 64), rounded up to 64: one prompt per step, with no 8,192
    floor (the plain scripts keep one)."""
    found = mtp_runs(image, engine, measured)
    if found is None:
        return None
    drafts = _nextn(attn_dp)
    divisor = found.batch_divisor or attn_dp
    batch = concurrency if attn_dp <= 1 or concurrency < divisor else concurrency // divisor
    tokens = -(-((drafts + 1) * batch + isl + 64) // 64) * 64
    return batch, tokens


def harness_of(source: str) -> str | None:
    """The harness behind a silicon_dev.csv row, from its silicon_data_source: `source_file=<date>.csv` (InferenceX's
    exports) and `db-dump/<date>` (InferenceX's database) are InferenceX; `source_file=<a path>` is aiconfigurator's
    own sample (data/serving/harness.toml says how each was told apart); None for anything else."""
    head = source.split(";")[0].strip()
    if re.fullmatch(r"source_file=\d{4}-\d{2}-\d{2}\.csv", head) or head.startswith("db-dump/"):
        return INFERENCEX
    if head.startswith("source_file="):
        return AICONFIGURATOR
    return None


def multinode_disaggregated(harness: str | None, system: str, model: str, gpus: int) -> str | None:
    """Why an InferenceX row written as agg on `gpus` GPUs cannot be laid out, where InferenceX ran that model on that
    system only as multi-node disaggregated deployments (harness.toml [[multinode_disagg]]); None otherwise."""
    if harness != INFERENCEX:
        return None
    for e in _harness_data().get("multinode_disagg", []):
        if system == e["system"] and model in e["models"] and gpus > int(e["gpus_per_node"]):
            return (f"written as agg on {gpus} GPUs, but InferenceX ran {model} on {system} only as multi-node "
                    f"disaggregated deployments ({e['source']}): tp counts the GPUs of its prefill and decode workers "
                    f"together, and the row states neither the decode workers' layout and count (the load on one) "
                    f"nor whether MTP drafts ran (harness)")
    return None


@lru_cache(maxsize=1)
def _harness_data() -> dict:
    path = resources.files("tokensim") / "data" / "serving" / "harness.toml"
    return tomllib.loads(path.read_text(encoding="utf-8"))


def client_lengths(harness: str | None, isl: int, osl: int, n: int, seed: int = 0,
                   inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Input and output tokens of `n` requests as the run's client sent them, and the note that says so (None: the
    row's lengths as stated). InferenceX's client draws each uniformly from [int(0.8 L), L] (harness.toml [client]);
    the draw is seeded, so a run simulates the same way every time. `inferencex_client` False: every row's lengths
    as stated (SIMULATE_INFERENCEX_CLIENT says why that is the default)."""
    note = lengths_note(harness, isl, osl, inferencex_client)
    if note is None:
        return np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64), None
    from tokensim.sim import drawn_lengths

    ratio = float(_harness_data()["client"]["range_ratio"])
    inputs, outputs = drawn_lengths(isl, osl, ratio, n, np.random.default_rng(seed))
    return inputs, outputs, note


def lengths_note(harness: str | None, isl: int, osl: int,
                 inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT) -> str | None:
    """The assumption `client_lengths` records for a run's lengths; None where they are the row's as stated."""
    if harness != INFERENCEX or not inferencex_client:
        return None
    ratio = float(_harness_data()["client"]["range_ratio"])
    mean_in, mean_out = mean_lengths(harness, isl, osl, inferencex_client)
    return (f"request lengths: InferenceX's client draws input and output tokens uniformly from [{ratio:g} L, L] "
            f"(random-range-ratio {ratio:g}): {int(isl * ratio)}-{isl} in, {int(osl * ratio)}-{osl} out, "
            f"mean {mean_in} in, {mean_out} out (harness)")


def mean_lengths(harness: str | None, isl: int, osl: int,
                 inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT) -> tuple[int, int]:
    """The mean input and output tokens of the requests `client_lengths` draws (the row's own where it draws none):
    the mean of uniform integers in [a, L] is (a + L) / 2, rounded."""
    if harness != INFERENCEX or not inferencex_client:
        return isl, osl
    ratio = float(_harness_data()["client"]["range_ratio"])
    def mean(n: int) -> int:
        return int(round((max(1, int(n * ratio)) + n) / 2))
    return mean(isl), mean(osl)


TRTLLM_DEFAULT_MAX_BATCH_SIZE = 2048       # trtllm-serve --max_batch_size default (BuildConfig.max_batch_size)


@dataclass(frozen=True)
class Launch:
    """An engine's scheduler settings from a run's launch script, for the whole simulated engine (per-rank values
    times the attention ranks), the KV cache's memory fraction where the script sets it, and the note that says
    where they come from."""
    settings: dict
    memory_fraction: float | None
    note: str


def _entry_matches(e: dict, model: str, system: str, weights: str | None, measured: str | None, tp: int,
                   isl: int, osl: int, clients: int) -> bool:
    if model not in e["models"] or system not in e.get("systems", [e.get("system")]):
        return False
    if "weights" in e and weights != e["weights"] or "weights_in" in e and weights not in e["weights_in"]:
        return False
    if "when_tp" in e and tp != e["when_tp"]:
        return False
    if "measured_from" in e and (measured is None or measured < e["measured_from"]):
        return False
    if "measured_until" in e and (measured is None or measured >= e["measured_until"]):
        return False
    if "when_lengths" in e and [isl, osl] != list(e["when_lengths"]):
        return False
    if "when_min_clients" in e and clients < e["when_min_clients"]:
        return False
    return not ("when_tp_below" in e and tp >= e["when_tp_below"])


def _inferencex_entry(section: str, harness: str | None, inferencex_client: bool, model: str, system: str,
                      weights: str | None, measured: str | None, tp: int, isl: int, osl: int,
                      clients: int) -> dict | None:
    """The first harness.toml [[section]] entry that matches an InferenceX run (None for any other run, or with
    InferenceX's client off: its launches go with its client)."""
    if harness != INFERENCEX or not inferencex_client:
        return None
    return next((e for e in _harness_data()[section]
                 if _entry_matches(e, model, system, weights, measured, tp, isl, osl, clients)), None)


def launch_fusions(harness: str | None, engine: str, model: str, system: str, weights: str | None,
                   measured: str | None, tp: int, attn_dp: int, isl: int, osl: int, clients: int,
                   apply: bool = True) -> tuple[tuple[str, ...], str] | None:
    """The kernel fusions (perf.engines.FUSIONS) an InferenceX single-node script launched the run with, and the note
    that says so (harness.toml [[fusions]], the first entry that matches); None where no entry does, or with `apply`
    False (validation passes APPLY_LAUNCH_FUSIONS, which says why it is off). Step physics, not a scheduler setting:
    they do not depend on whether InferenceX's client is simulated."""
    if harness != INFERENCEX or not apply:
        return None
    for e in _harness_data().get("fusions", []):
        if e["engine"] != engine or "when_attn_dp" in e and bool(e["when_attn_dp"]) != (attn_dp > 1):
            continue
        if _entry_matches(e, model, system, weights, measured, tp, isl, osl, clients):
            fused = tuple(e["fusions"])
            return fused, (f"kernel fusions: InferenceX {e['config']}: {', '.join(fused) or 'none'} "
                           f"({e['scripts']}) (harness)")
    return None


def trtllm_launch(harness: str | None, model: str, system: str, weights: str | None, measured: str | None, tp: int,
                  attn_dp: int, isl: int, osl: int, clients: int,
                  inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT) -> Launch | None:
    """The TensorRT-LLM settings an InferenceX single-node script launched the run with (data/serving/harness.toml
    [[trtllm]], the first entry that matches), for the engine that holds all `attn_dp` ranks; None for any other run,
    or with InferenceX's client off (its launch goes with its client, as SGLang's does). A run measured on no stated
    day matches no dated entry."""
    e = _inferencex_entry("trtllm", harness, inferencex_client, model, system, weights, measured, tp, isl, osl, clients)
    if e is None:
        return None
    ranks = max(1, attn_dp)
    if "max_num_tokens" in e:
        tokens = int(e["max_num_tokens"])
    else:
        m = int(e["max_num_tokens_multiple"])
        tokens = max(-(-(clients + isl + int(e["max_num_tokens_plus"])) // m) * m, int(e.get("max_num_tokens_floor", 0)))
    batch = e.get("max_batch_size", TRTLLM_DEFAULT_MAX_BATCH_SIZE)
    batch = clients if batch == "clients" else int(batch)
    settings: dict = {"max_num_tokens": tokens * ranks, "max_batch_size": batch * ranks, "attention_dp_ranks": ranks}
    if ranks > 1 and e.get("attention_dp_balance"):
        settings["attention_dp_balance"] = True
        for key in ("attention_dp_timeout_iters", "attention_dp_batching_wait_iters"):
            if key in e:
                settings[key] = int(e[key])
    if ranks == 1 and "batch_wait_timeout_iters" in e:
        settings["batch_wait_timeout_iters"] = int(e["batch_wait_timeout_iters"])
        settings["batch_wait_max_tokens_ratio"] = float(e["batch_wait_max_tokens_ratio"])
    fraction = e.get("free_gpu_memory_fraction", e.get("free_gpu_memory_fraction_by_system", {}).get(system))
    kv = f", free_gpu_memory_fraction {fraction}" if fraction is not None else ""
    return Launch(settings, None if fraction is None else float(fraction),
                  f"TensorRT-LLM launch: InferenceX {e['config']}: {_told(settings)}{kv} ({e['scripts']}) (harness)")


def _told(settings: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items())


VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # `vllm serve` on >= 70 GiB GPUs (EngineArgs.get_batch_defaults)
VLLM_DEFAULT_MAX_NUM_SEQS = 1024


def vllm_launch(harness: str | None, model: str, system: str, weights: str | None, measured: str | None, tp: int,
                attn_dp: int, isl: int, osl: int, clients: int,
                inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT) -> Launch | None:
    """The VllmScheduler settings an InferenceX single-node script launched the run with (harness.toml [[vllm]], the
    first entry that matches), for the engine that holds all `attn_dp` engine cores; None for any other run or with
    InferenceX's client off."""
    e = _inferencex_entry("vllm", harness, inferencex_client, model, system, weights, measured, tp, isl, osl, clients)
    if e is None:
        return None
    ranks = max(1, attn_dp)
    tokens = (isl * int(e["max_num_batched_tokens_isl_times"]) if "max_num_batched_tokens_isl_times" in e
              else int(e.get("max_num_batched_tokens", VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS)))
    seqs = e.get("max_num_seqs", VLLM_DEFAULT_MAX_NUM_SEQS)
    seqs = clients if seqs == "clients" else int(seqs)
    settings = {"max_num_batched_tokens": max(tokens, seqs) * ranks, "max_num_seqs": seqs * ranks}
    return Launch(settings, None, f"vLLM launch: InferenceX {e['config']}: {_told(settings)} ({e['scripts']}) (harness)")


def sglang_mtp(harness: str | None, image: str | None, model: str, system: str, weights: str | None,
               measured: str | None, tp: int, isl: int, osl: int, clients: int) -> dict | None:
    """The harness.toml [[sglang_mtp]] entry of an InferenceX SGLang run that can only be its MTP configuration's: one
    of the entry's image and day, with more clients than the plain configuration that shared them ever ran at its
    lengths (None for any other run, which stands as stated)."""
    if harness != INFERENCEX or not image:
        return None
    for e in _harness_data().get("sglang_mtp", []):
        if image.endswith(e["image"]) and measured == e["measured"] and _entry_matches(
                e, model, system, weights, None, tp, isl, osl, clients):
            plain = next((int(c) for i, o, c in e["plain_max_clients"] if (int(i), int(o)) == (isl, osl)), None)
            if plain is not None and clients > plain:
                return e
    return None


def sglang_mtp_note(entry: dict) -> str:
    """What an SGLang MTP run (`sglang_mtp`'s entry) is simulated as, and why without its drafts."""
    return (f"harness: InferenceX {entry['config']} (image {entry['image']}, measured {entry['measured']}, more clients "
            f"than the plain configuration of that image and day ran): EAGLE on the MTP layer, "
            f"{entry['draft_tokens']} drafts a step ({entry['scripts']}). Simulated without its drafts: their "
            f"acceptance on these prompts is not known, and the same day's plain and MTP runs of one load differ by "
            f"1.10-1.50x in TPOT where the shipped MTP acceptance gives 1.8-2.0x (docs/model.md 5.2); its launch caps "
            f"apply with InferenceX's client (harness)")


def sglang_launch(harness: str | None, model: str, system: str, weights: str | None, version: str | None, tp: int,
                  isl: int, osl: int, clients: int,
                  inferencex_client: bool = SIMULATE_INFERENCEX_CLIENT, image: str | None = None,
                  measured: str | None = None) -> tuple[dict, str] | None:
    """SglangScheduler settings the run's launch script gave SGLang, with the note that says where they come from;
    None when the harness's launch is not known (the generator's rule stands). InferenceX's flags go with its client
    (`inferencex_client`): without mixed chunks, clients sending equal requests stay in lockstep and wait far longer
    than its measured runs, whose drawn lengths spread them. A run of an MTP configuration (`sglang_mtp`, from its
    `image` and `measured` day) takes that configuration's script."""
    data = _harness_data()
    if harness == INFERENCEX:
        e = _inferencex_entry("sglang", harness, inferencex_client, model, system, weights, None, tp, isl, osl,
                              clients)
        if e is not None:
            e = sglang_mtp(harness, image, model, system, weights, measured, tp, isl, osl, clients) or e
        if e is None:
            return None
        settings: dict = {"enable_mixed_chunk": False}
        if data["client"].get("ignore_eos") and e.get("disable_radix_cache"):
            settings["ignore_eos"] = True         # the client's --ignore-eos beside --disable-radix-cache
        if "max_running_requests" in e:
            cap = e["max_running_requests"]
            settings["max_running_requests"] = clients if cap == "clients" else int(cap)
        for key in ("chunked_prefill_size", "max_prefill_tokens"):
            if key in e:
                settings[key] = int(e[key])
        if "scheduler_recv_interval" in e:
            low = clients < e.get("low_clients", 0)
            key = "scheduler_recv_interval_low" if low else "scheduler_recv_interval"
            settings["scheduler_recv_interval"] = int(e[key])
        return settings, f"SGLang launch: InferenceX {e['config']}: {_told(settings)} ({e['scripts']}) (harness)"
    if harness == AICONFIGURATOR:
        start = release_tuple(data["aiconfigurator"]["sglang_mixed_chunk_from"])
        found = release_tuple(version)
        if found is not None and start is not None and found < start:
            return {"enable_mixed_chunk": False}, (
                f"SGLang launch: aiconfigurator's generator wrote no --enable-mixed-chunk before 2026-01-19; SGLang "
                f"{version} is older than the first release templated after it "
                f"({data['aiconfigurator']['sglang_mixed_chunk_from']}), so its run is taken to predate the flag (harness)")
    return None
