"""General rules that turn a measurement row into a scenario; every rule used is named in the row's output.

No rule looks at a row's id or value. Free-text cells are read by validate.parse (counts, precisions, layouts,
speculative decoding, 'not stated' in its spellings) and validate.names (catalog names and their variants), so a
new file with the same columns needs no code change. A row is skipped only for a fact it does not state, and the
skip names that fact.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.errors import TokensimError
from tokensim.perf.engines import find_engine, release_traits, version_in_text
from tokensim.specs.hardware import catalog as hw_catalog
from tokensim.specs.model import catalog as model_catalog
from tokensim.specs.model.spec import Attention, ModelSpec, MoE
from tokensim.specs.precision import get_precision
from tokensim.validate.names import ModelMatch, match_hardware, match_model
from tokensim.validate.parse import Skip, kv_cell, layout, per_chip_batch, spec_cell, unstated, weights_cell
from tokensim.validate.table import Row

# rule: unstated lengths take Artificial Analysis' default workload, "approximately 1,000 input tokens,
# 1,000 output tokens" (https://artificialanalysis.ai/methodology/performance-benchmarking)
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000
# rule: MLPerf rows without lengths take the benchmark's reference mean output and half its maximum input
# (no mean input is published); github.com/mlcommons/inference language/*/README.md (docs/workload-lengths.md)
MLPERF_WORKLOADS = {
    "llama-2-70b": (512, 294, "llama2-70b: OpenOrca, input <= 1024, mean output 294.45"),
    "llama-3.1-405b": (10000, 685, "llama3.1-405b: long-context inputs up to ~20k, mean output 684.68"),
    "deepseek-r1": (1568, 4043, "deepseek-r1: input <= 3136, mean output 4043.45"),
    "deepseek-v3": (1568, 4043, "deepseek-r1 benchmark: input <= 3136, mean output 4043.45"),
    "gpt-oss-120b": (DEFAULT_INPUT_TOKENS, 1278, "gpt-oss-120b: mean output 1278.20"),
}
BATCH_CAP_PER_REPLICA = 1024    # rule: engines cap running sequences (vLLM max_num_seqs 256-1024, TRT-LLM max_batch_size <= 2048)
# a throughput of the decode pool of a prefill/decode split: the words that name that pool, not any "decode"
# ("spec decode (MTP) not stated" names speculative decoding, not a pool)
DECODE_POOL = (r"disagg|\bdecode (?:pool|worker|instance|node|gpu|side|only|output)s?\b|\bdecode-only\b|\b\d*P/?\d*D\b"
               r"|prefill/decode|GPUs?\) decode\b")
# a prefill/decode split's per-GPU figure counts the decode pool only where the source says the figure is decode's
# ("decode output tok/s per GPU", "output tok/s per node ... decode", "per decode GPU")
DECODE_FIGURE = r"\bdecode\b[^;.]{0,20}\b(?:tok|output|throughput)|(?:output|tok/s)[^;]{0,40}\bdecode\b|per decode"
PER_CHIP_METRIC = "throughput_tps_per_chip"
# rule: wide-EP decode (DeepEP low-latency dispatch sized for 128 tokens per rank, two micro-batches)
BATCH_CAP_PER_ATTENTION_RANK = 256
FRONTIER_NODE_CHIPS = 8         # rule: "best available config" dashboards report one 8-GPU node
PER_REPLICA_METRICS = ("output_tps_per_user", "ttft_s", "throughput_tps_per_chip")   # need one replica's chips, not the system's


@dataclass(frozen=True)
class Case:
    row: Row
    model: str
    hardware: str
    deployment: Deployment
    mode: str                       # "per_user", "ttft", "decode_throughput", "offline_throughput", "frontier"
    chips_rule: str                 # "given", "fewest", "frontier"
    target_tps_user: float | None
    assumptions: tuple[str, ...]


@lru_cache(maxsize=1)
def speculative_defaults() -> dict:
    path = Path(str(resources.files("tokensim") / "data" / "constants.toml"))
    return tomllib.loads(path.read_text(encoding="utf-8"))["speculative"]


SPECULATION_SINCE = {"cerebras": "2024-10"}     # vendor -> first month its public service used speculative decoding


def vendor_speculates(row: Row) -> bool:
    """A row from a vendor's public service dated after it announced speculative decoding (undated rows count
    as later: the undated rows are newer models)."""
    for vendor, since in SPECULATION_SINCE.items():
        if vendor in row.provider_or_engine.lower():
            return not row.source_date or row.source_date[:7] >= since
    return False


def engine_class(text: str) -> str:
    """The engine profile a row names (vLLM, SGLang, TensorRT-LLM, llama.cpp: data/engines), found in its provider
    or engine text; 'default' when it names none (an API, a vendor stack, an unnamed engine)."""
    return find_engine(text) or "default"


def lowest_native_float(hw) -> str:
    return "nvfp4" if hw.supports("fp4") else "fp8" if hw.supports("fp8") else "bf16"


def _own_fp4(word: str | None, model: ModelSpec) -> str | None:
    """Generic 'FP4': the checkpoint's own 4-bit float format, else NVFP4."""
    if word != "fp4":
        return word
    own = model.weights.routed_experts
    return own if own in ("mxfp4", "nvfp4") else "nvfp4"


def weight_rule(row: Row, found: ModelMatch, model: ModelSpec, hw) -> tuple[str | None, str | None, str]:
    """(weights for every linear group, weights for routed experts, assumption line).

    The weight column wins; when it does not state the precision, the model name's ('-FP8', '(NVFP4)'), then
    the MLPerf rule, then the checkpoint's own."""
    cell = weights_cell(row.weight_precision)
    everything, experts, line = cell.everything, cell.experts, cell.note
    if everything is None and experts is None:
        if found.precision:
            everything = found.precision
            line = f"weights: not stated in the weight column; {everything}, as the model name {row.model!r} says (rule)"
        elif re.search(r"mlperf", row.provider_or_engine, re.I):
            everything = experts = lowest_native_float(hw)
            line = (f"weights: not stated; {everything}, the lowest float format {hw.name} runs natively "
                    f"(rule: MLPerf submissions quantize as far as the 99 % accuracy target allows)")
        else:
            line = "weights: not stated; the checkpoint's own precision (config quantization block)"
    elif found.precision and found.precision != (everything or experts):
        line += f"; the model name says {found.precision}, the weight column wins"
    return _own_fp4(everything, model), _own_fp4(experts, model), line


def kv_rule(row: Row, weights: str | None) -> tuple[str, str]:
    kv, line = kv_cell(row.kv_precision)
    if kv:
        return kv, line
    if "kv" in row.weight_precision.lower() and "fp8" in row.weight_precision.lower():
        return "fp8", "KV: FP8 (FP8-KV checkpoint named in the weight column)"
    if re.search(r"tensorrt|mlperf", row.provider_or_engine, re.I) and weights in ("fp8", "nvfp4", "fp4", "mxfp4"):
        return "fp8", ("KV: not stated; FP8, as TensorRT-LLM and MLPerf submissions pair FP8/FP4 weights with an FP8 KV "
                       "cache (rule)")
    return "bf16", "KV: not stated; bf16 (rule)"


def spec_rule(row: Row) -> tuple[SpecDecode | None, str]:
    text = row.spec_decode
    if "best available" in text.lower():
        return None, "speculative decoding: 'best available config' may include it; modelled without (rule)"
    read = spec_cell(text)
    if not read.stated:
        if vendor_speculates(row):
            d = speculative_defaults()
            return SpecDecode("eagle", 3, tuple(d["eagle3_acceptance"][:3])), (
                "speculative decoding: not stated; on (EAGLE-style, k=3), as Cerebras Inference has used it since its "
                "Oct-2024 release ('This release also implements speculative decoding', "
                "https://hn.masterscheme.cn/item?id=41942822) (rule)")
        return None, "speculative decoding: not stated; none (rule)"
    if read.method is None:
        return None, "speculative decoding: none"
    if read.method == "ngram":
        return None, (f"speculative decoding: {text!r} (n-gram / prompt lookup) modelled without: its acceptance depends "
                      f"on how much of the output repeats the prompt, and constants.toml has no default for it (rule)")
    d = speculative_defaults()
    method, rates = {"eagle3": ("eagle", d["eagle3_acceptance"]), "eagle": ("eagle", d["eagle_acceptance"]),
                     "mtp": ("mtp", d["mtp_acceptance"])}[read.method]
    k = read.draft_tokens or 1
    rates = tuple(rates[:k]) if len(rates) > 1 else tuple(rates)
    if len(rates) not in (1, k):
        rates = (rates[-1],)
    k_note = "" if read.draft_tokens else " (k not written; 1)"
    return (SpecDecode(method=method, draft_tokens=k, acceptance=rates),
            f"speculative decoding: {text!r} read as {read.method} k={k}{k_note}, acceptance {rates} "
            f"(defaults in constants.toml)")


def parallel_from_text(text: str, chips: int, is_moe: bool) -> tuple[int, int, int, int, int] | None:
    """(tp, attention dp, ep, pp, replicas) from the layout written in the text ('TP=8, EP=1', 'DEP8', 'PP2 TP4',
    '--tp 4 --dp 4 --enable-dp-attention', ...), or None when none is written or it does not add up to `chips`."""
    lay = layout(text)
    if lay is None or (lay.tp is None and lay.dp is None):
        return None
    tp, dp, pp = lay.tp or 1, lay.dp or 1, lay.pp or 1
    if lay.dp_inside_tp:                 # SGLang: --tp N --dp D --enable-dp-attention is N chips, attention DP D
        tp = max(1, tp // dp)
    adp, replicas = (dp, 1) if is_moe and lay.dp_attention else (1, dp)
    ep = lay.ep or (tp * adp if is_moe and re.search(r"deepep|a2a|megamoe", text, re.I) else 1)
    if not is_moe or (tp * adp) % ep:
        ep = 1
    if tp * adp * pp * replicas != chips:
        return None
    return tp, adp, ep, pp, replicas


def redundant(model: ModelSpec, ep: int) -> int:
    """Expert slots to add so that EP divides them (DeepSeek's decode adds 32 redundant experts at EP144)."""
    experts = next((layer.ffn.n_experts for layer in model.layers if isinstance(layer.ffn, MoE)), 0)
    return (-experts) % ep if experts else 0


def target_interactivity(notes: str) -> float | None:
    m = re.search(r"(\d+(?:\.\d+)?)\s*tok/s/user", notes)
    return float(m.group(1)) if m else None


def lengths_rule(row: Row, name: str, notes: list[str]) -> tuple[int, int]:
    default_in, default_out, why = DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS, "Artificial Analysis' default workload"
    if re.search(r"mlperf", row.provider_or_engine, re.I) and name in MLPERF_WORKLOADS:
        default_in, default_out, why = MLPERF_WORKLOADS[name]
    inp = row.input_tokens or default_in
    out = row.output_tokens or default_out
    if row.input_tokens is None:
        notes.append(f"input tokens: not stated; {default_in} ({why}) (rule)")
    if row.output_tokens is None:
        notes.append(f"output tokens: not stated; {default_out} ({why}) (rule)")
    if re.search(r"bench_serving", row.notes) and "random-input-len" in row.notes and "random-range-ratio" not in row.notes:
        inp, out = max(1, inp // 2), max(1, out // 2)
        notes.append(f"lengths: sglang bench_serving's random dataset draws lengths uniformly from 1 to the stated "
                     f"length by default (--random-range-ratio 0), so the means are {inp} in / {out} out (rule)")
    return inp, out


def mode_rule(row: Row, notes: list[str]) -> str:
    mode = {"output_tps_per_user": "per_user", "ttft_s": "ttft"}.get(row.metric, "offline_throughput")
    if mode == "ttft":
        offline = re.search(r"gptSessionBenchmark|benchmark_latency|trtllm-bench|offline",
                            f"{row.provider_or_engine} {row.notes}", re.I)
        mode = "ttft" if offline else "ttft_online"
        notes.append("TTFT: in-process benchmark, prefill only (rule)" if offline else
                     "TTFT: served over HTTP/API, prefill plus request handling (request_overhead_s) (rule)")
    if mode == "offline_throughput" and re.search(r"\bprefill\b", row.notes, re.I) and re.search(r"\binput\b", row.notes, re.I) \
            and not re.search(r"\bdecode\b|\boutput tok", row.notes, re.I):
        mode = "prefill_throughput"
        notes.append("throughput: input (prefill) tokens/s, as the source's notes say (rule)")
    elif mode == "offline_throughput" and re.search(DECODE_POOL, row.notes, re.I):
        if row.metric == PER_CHIP_METRIC and not re.search(DECODE_FIGURE, row.notes, re.I):
            raise Skip("a per-GPU throughput of a prefill/decode split that does not say it counts the decode GPUs "
                       "only, nor how many prefill GPUs it counts: the prefill pool's size is not stated")
        mode = "decode_throughput"
        notes.append("throughput: the decode pool of a prefill/decode split, decode only (rule)")
    return mode


def chips_rule(row: Row, named: int | None, text: str, notes: list[str]) -> int | None:
    """The stated chip count; else one written with the chip ('8xH100'); else, for a metric of one replica, the
    chips the written layout adds up to ('DEP8' = 8)."""
    if row.n_chips is not None:
        return row.n_chips
    if named:
        notes.append(f"chips: not stated in the chip column; {named}, as the hardware cell {row.hardware!r} says (rule)")
        return named
    lay = layout(text)
    if lay and lay.layout_chips and row.metric in PER_REPLICA_METRICS:
        notes.append(f"chips: not stated; {lay.layout_chips}, the layout the source writes ({lay.describe()}) (rule)")
        return lay.layout_chips
    return None


def build_case(row: Row) -> Case:
    found = match_model(row.model)
    hw_found = match_hardware(row.hardware)
    name, hw_name = found.name, hw_found.name
    model = model_catalog.catalog_model(name)
    hw = hw_catalog.catalog()[hw_name]
    notes: list[str] = [*row.readings, found.note, hw_found.note]
    engine = engine_class(row.provider_or_engine + " " + row.weight_precision)
    notes.append(f"engine class: {engine} (from {row.provider_or_engine!r})")
    version = version_in_text(row.provider_or_engine, engine)
    if release_traits(engine, version).get("gqa_kv_read_per_query_head") and any(
            isinstance(m := layer.mixer, Attention) and m.kind == "gqa" and m.n_heads > m.n_kv_heads
            for layer in model.layer_kinds[0]):
        notes.append(f"engine release: {engine} {version} decodes grouped-query attention one query head at a time, "
                     "reading the KV cache once per query head (data/engines releases) (rule)")
    weights, experts, line = weight_rule(row, found, model, hw)
    notes.append(line)
    kv, line = kv_rule(row, weights or experts)
    notes.append(line)
    spec, line = spec_rule(row)
    notes.append(line)
    inp, out = lengths_rule(row, name, notes)
    base = Deployment(weights=weights, expert_weights=experts, kv=kv, input_tokens=inp, output_tokens=out,
                      engine=engine, engine_version=version, spec=spec)
    target = target_interactivity(row.notes) if row.metric.startswith("throughput") else None
    text = f"{row.provider_or_engine} {row.notes}"
    mode = mode_rule(row, notes)
    chips = chips_rule(row, hw_found.chips, text, notes)
    if target is not None and row.batch_approximate or (target is not None and row.batch is None):
        chips = chips or min(FRONTIER_NODE_CHIPS, hw.chips_per_system or FRONTIER_NODE_CHIPS) or FRONTIER_NODE_CHIPS
        if row.batch is not None:
            notes.append(f"operating point: the stated concurrency {row.batch} on the server layout (TP 1-8, or DP-attention "
                         f"+ EP for MoE) whose per-user speed is closest to the stated {target} tok/s/user (rule)")
        else:
            notes.append(f"operating point: best layout on {chips} chips at >= {target} tok/s/user (frontier rule)")
        if re.search(r"inferencex", row.provider_or_engine, re.I) and not re.search(r"output tput", row.notes, re.I):
            notes.append("throughput: InferenceX plots input + output tokens per GPU (InferenceX process_result.py), "
                         "so the prediction is counted the same way (rule)")
        return Case(row, name, hw_name, replace(base, tp=1, dp=chips), "frontier", "frontier", target, tuple(notes))
    batch = batch_rule(row, mode, chips, notes)
    if chips is not None:
        dep = stated_chips_layout(row, model, hw, base, chips, batch, mode, text, notes)
        dep = narrow_unstated(row, found, model, hw, dep, chips, notes)
        rule = "given"
    else:
        if mode not in ("per_user", "ttft", "ttft_online"):
            raise Skip(f"chip count not stated (a {row.metric} figure needs the chips it was measured on)")
        dep = fewest_chips_layout(model, hw, base, batch, notes)
        rule = "fewest"
    if batch == 0:
        dep = largest_batch(model, hw, dep, inp + out, notes)
    return Case(row, name, hw_name, dep, mode, rule, target, tuple(notes))


def batch_rule(row: Row, mode: str, chips: int | None, notes: list[str]) -> int:
    """The stated batch; else one written per chip in the notes ('40 req/GPU'); else 1 for a per-user speed;
    else 0, which `largest_batch` fills in."""
    if row.batch is not None:
        notes.append(f"batch: {row.batch}{' (approximate)' if row.batch_approximate else ''}")
        return row.batch
    per_chip = per_chip_batch(row.notes)
    if per_chip and chips:
        notes.append(f"batch: not stated in the batch column; {per_chip} per chip x {chips} chips, as the notes say (rule)")
        return per_chip * chips
    if mode in ("per_user", "ttft", "ttft_online"):
        notes.append("batch: not stated; 1 for a per-user speed (rule)")
        return 1
    return 0


def stated_chips_layout(row: Row, model: ModelSpec, hw, base: Deployment, chips: int, batch: int, mode: str, text: str,
                        notes: list[str]) -> Deployment:
    par = parallel_from_text(text, chips, model.is_moe)
    if par:
        tp, adp, ep, pp, replicas = par
        notes.append(f"layout: tp {tp} x attention DP {adp} x pp {pp} x replicas {replicas}, ep {ep} (from the source's text)")
        return replace(base, tp=tp, attn_dp=adp, ep=ep, pp=pp, dp=replicas, redundant_experts=redundant(model, ep),
                       batch=max(batch, replicas, 1))
    if model.is_moe and chips > 8 and hw.kind == "gpu" and (
            mode.endswith("throughput") or re.search(r"\bEP\b|expert parallel|wide-EP|large EP|DeepEP", text)):
        n, replicas = chips, 1
        up = hw.link("scale_up")
        domain = up.domain_chips if up and up.domain_chips else n
        if domain < n and n % domain == 0:
            from tokensim.deploy.layout import fit_error
            one = replace(base, tp=1, attn_dp=domain, ep=domain, redundant_experts=redundant(model, domain), batch=domain)
            if fit_error(model, hw, one) is None:       # the expert all-to-all stays on the scale-up links
                n, replicas = domain, chips // domain
        dep = replace(base, tp=1, attn_dp=n, ep=n, dp=replicas, redundant_experts=redundant(model, n), overlap_comm=True,
                      batch=max(batch, n * replicas))
        notes.append(f"layout: {chips} chips as {replicas} x (attention DP x wide EP {n}) with overlapped "
                     f"all-to-all and {dep.redundant_experts} redundant experts (rule for wide-EP deployments: EP "
                     f"inside one scale-up domain when it holds the model, replicas beyond)")
        return dep
    from tokensim.deploy.layout import fewest_chips, layout_for_chips
    up = hw.link("scale_up")
    domain = up.domain_chips if up and up.domain_chips else chips
    try:
        if chips > domain or (mode.endswith("throughput") and not model.is_moe):
            replica = fewest_chips(model, hw, replace(base, batch=1))
            dp = max(1, chips // replica.chips)
            notes.append(f"layout: {chips} chips as {dp} replicas of tp {replica.tp} x pp {replica.pp} "
                         f"(rule: throughput runs, and chips beyond one scale-up domain, replicate the fewest chips that fit)")
            return replace(replica, dp=dp, batch=max(batch, dp))
        dep = layout_for_chips(model, hw, chips, replace(base, batch=max(batch, 1)))
        notes.append(f"layout: {chips} chips as tp {dep.tp} x pp {dep.pp} (rule: TP inside the scale-up domain)")
        return dep
    except TokensimError as exc:
        raise Skip(f"no layout on {chips} x {hw.name}: {exc}") from None


def narrow_unstated(row: Row, found: ModelMatch, model: ModelSpec, hw, dep: Deployment, chips: int,
                    notes: list[str]) -> Deployment:
    """Unstated precisions narrow until the stated chips hold the weights and the stated batch: the KV cache to
    FP8 first, then the weights to FP8, then to INT4 (rule: a measured run fitted its chips)."""
    from tokensim.deploy.layout import fit_error
    stated_batch = dep if row.batch else replace(dep, batch=1)
    if row.batch and unstated(row.kv_precision) and dep.kv == "bf16" and fit_error(model, hw, stated_batch) is not None:
        dep, stated_batch = replace(dep, kv="fp8"), replace(stated_batch, kv="fp8")
        notes.append(f"KV: not stated; FP8, as the stated batch {row.batch} does not fit {chips} x {hw.name} at bf16 (rule)")
    if unstated(row.weight_precision) and not found.precision:
        w = model.weights
        widest = max(get_precision(dep.weights or g).bytes_per_element
                     for g in (w.attention, w.dense_ffn, w.shared_experts, w.routed_experts))
        for narrower in ("fp8", "int4"):
            if fit_error(model, hw, stated_batch) is None:
                break
            if get_precision(narrower).bytes_per_element >= widest:
                continue                 # the weights are already stored this narrow
            dep, stated_batch = (replace(d, weights=narrower, expert_weights=None) for d in (dep, stated_batch))
            notes.append(f"weights: the checkpoint does not fit {chips} x {hw.name}"
                         f"{f' with the stated batch {row.batch}' if row.batch else ''}; {narrower} (rule: "
                         f"unstated precision narrows until the stated chips hold the weights)")
    return dep


def fewest_chips_layout(model: ModelSpec, hw, base: Deployment, batch: int, notes: list[str]) -> Deployment:
    from tokensim.deploy.layout import fewest_chips, layout_for_chips
    try:
        dep = fewest_chips(model, hw, replace(base, batch=max(batch, 1)))
        system = hw.chips_per_system
        if dep.chips < system <= 16:
            dep = layout_for_chips(model, hw, system, dep)
            notes.append(f"layout: chips not stated; one {system}-chip system, the vendor's unit of deployment "
                         f"(tp {dep.tp} x pp {dep.pp}) (rule)")
        else:
            notes.append(f"layout: chips not stated; fewest that fit: {dep.chips} (tp {dep.tp} x pp {dep.pp}) (rule)")
        return dep
    except TokensimError as exc:
        raise Skip(str(exc)) from None


def largest_batch(model: ModelSpec, hw, dep: Deployment, tokens: int, notes: list[str]) -> Deployment:
    from tokensim.perf.constants import for_hardware
    from tokensim.perf.context import make_context
    from tokensim.perf.memory import max_batch
    ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine))
    fit = max_batch(ctx, tokens)
    if fit < 1:
        raise Skip("weights do not fit the stated chips")
    cap = dep.dp * (BATCH_CAP_PER_ATTENTION_RANK * dep.attn_dp if dep.attn_dp > 1 else BATCH_CAP_PER_REPLICA)
    notes.append(f"batch: not stated; largest that fits ({fit}), capped at {cap} (rule)")
    return replace(dep, batch=min(fit, cap))
