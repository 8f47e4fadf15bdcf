"""General rules that turn a measurement row into a scenario; every rule used is named in the row's output.

No rule looks at a row's id or value. Free text is read by aliases and precision words, so a new
file with the same columns needs no code change.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tokensim.catalog import first_match
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.errors import TokensimError
from tokensim.specs.hardware import catalog as hw_catalog
from tokensim.specs.model import catalog as model_catalog
from tokensim.specs.model.spec import ModelSpec
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
BATCH_CAP_PER_ATTENTION_RANK = 256  # rule: wide-EP decode (DeepEP low-latency dispatch sized for 128 tokens per rank, two micro-batches)
FRONTIER_NODE_CHIPS = 8         # rule: "best available config" dashboards report one 8-GPU node


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


class Skip(Exception):
    """A row the rules cannot turn into a scenario; the message is the reason."""


PRECISION_WORDS = (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("q4_k_m", "q4_k_m"), ("g=32", "int4-g32"),
                   ("int4", "int4"), ("4-bit", "int4"), ("fp4", "fp4"), ("int8", "int8"), ("fp8", "fp8"),
                   ("8-bit", "fp8"), ("bf16", "bf16"), ("fp16", "bf16"), ("16-bit", "bf16"))


def precision_word(text: str) -> str | None:
    t = text.lower()
    for word, name in PRECISION_WORDS:
        if word in t:
            return name
    return None


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


def match_model(text: str) -> str:
    if not text:
        raise Skip("model not stated")
    tries = [text, re.sub(r"\(.*?\)", "", text), re.sub(r"\(.*$", "", text)]
    for t in list(tries):
        tries.append(re.sub(r"[-\s](instruct|chat|base|it|\d{4})$", "", t.strip(), flags=re.I))
    name = first_match(tries, model_catalog.find_name)
    if name is None:
        raise Skip(f"model {text!r} not in the catalog")
    return name


def match_hardware(text: str) -> str:
    if not text:
        raise Skip("hardware not stated")
    if re.search(r"undisclosed|not disclosed", text, re.I):
        raise Skip(f"hardware {text!r} not disclosed")
    tries = [text, re.sub(r"\s*x\s*\d+\s*$", "", text), re.sub(r"\(.*?\)", "", text), re.sub(r"\(.*$", "", text)]
    name = first_match(tries, hw_catalog.find_name)
    if name is None:
        raise Skip(f"hardware {text!r} not in the catalog")
    return name


def engine_class(text: str) -> str:
    """"basic" for llama.cpp-class engines (no CUDA graphs, their own GEMV kernels), else "default".
    TensorRT-LLM, SGLang and vLLM share one class: a separate fitted bandwidth for them ran against the
    evidence (it came out lower than the default's), so they are not told apart."""
    if re.search(r"llama\.cpp|ollama|gguf", text.lower()):
        return "basic"
    return "default"


def weight_rule(text: str, model: ModelSpec) -> tuple[str | None, str | None, str]:
    """(weights for every linear group, weights for routed experts, assumption line)."""
    if not text.strip():
        return None, None, "weights: not stated; the checkpoint's own precision (config quantization block)"
    everything = experts = None
    for seg in re.split(r"[;/(]", text):
        word = precision_word(seg)
        if not word:
            continue
        if word == "fp4":   # generic FP4: the checkpoint's own 4-bit float format, else NVFP4
            own = model.weights.routed_experts
            word = own if own in ("mxfp4", "nvfp4") else "nvfp4"
        s = seg.lower()
        if re.search(r"expert|moe", s) and "dense" not in s:
            experts = experts or word
        elif everything is None:
            everything = word
    if everything is None and experts is None:
        raise Skip(f"weight precision {text!r} not understood")
    return everything, experts, f"weights: {text!r} read as all={everything or 'checkpoint'}, experts={experts or everything or 'checkpoint'}"


def kv_rule(row: Row, weights: str | None, engine: str) -> tuple[str, str]:
    word = precision_word(row.kv_precision) if row.kv_precision else None
    if word:
        return ("bf16" if word == "bf16" else "fp8"), f"KV: {row.kv_precision!r}"
    if "kv" in row.weight_precision.lower() and "fp8" in row.weight_precision.lower():
        return "fp8", "KV: FP8 (FP8-KV checkpoint named in the weight column)"
    if re.search(r"tensorrt|mlperf", row.provider_or_engine, re.I) and weights in ("fp8", "nvfp4", "fp4", "mxfp4"):
        return "fp8", "KV: not stated; FP8, as TensorRT-LLM and MLPerf submissions pair FP8/FP4 weights with an FP8 KV cache (rule)"
    return "bf16", "KV: not stated; bf16 (rule)"


def spec_rule(text: str, model: ModelSpec) -> tuple[SpecDecode | None, str]:
    t = text.lower().strip()
    if not t or t == "none":
        return None, "speculative decoding: none" if t else "speculative decoding: not stated; none (rule)"
    if "best available" in t:
        return None, "speculative decoding: 'best available config' may include it; modelled without (rule)"
    d = speculative_defaults()
    m = re.search(r"(?:k\s*=\s*|steps\s+|\()(\d+)", t)
    k = int(m.group(1)) if m else 1
    if "eagle-3" in t or "eagle3" in t:
        method, rates = "eagle", d["eagle3_acceptance"]
    elif "mtp" in t:
        method, rates = "mtp", d["mtp_acceptance"]
    elif "eagle" in t:
        method, rates = "eagle", d["eagle_acceptance"]
    else:
        raise Skip(f"speculative decoding {text!r} not understood")
    rates = tuple(rates[:k]) if len(rates) > 1 else tuple(rates)
    if len(rates) not in (1, k):
        rates = (rates[-1],)
    return SpecDecode(method=method, draft_tokens=k, acceptance=rates), f"speculative decoding: {method} k={k}, acceptance {rates} (defaults in constants.toml)"


def parallel_from_text(text: str, chips: int, is_moe: bool) -> tuple[int, int, int] | None:
    """(tp, attention dp, ep) from 'TP=8, EP=1', 'TP8 attention, TP4xEP2 MoE', '--tp 4 --dp 4 --enable-dp-attention', ..."""
    t = text.lower()
    tp = re.search(r"(?:--tp|tp\s*=|\btp)\s*(\d+)", t)
    if not tp:
        return None
    tp_n = int(tp.group(1))
    dp_n = 1
    dpm = re.search(r"--dp\s+(\d+)", t)
    if dpm and "dp-attention" in t:      # SGLang: --tp N --dp D --enable-dp-attention = N chips, attention DP D
        dp_n = int(dpm.group(1))
        tp_n = max(1, tp_n // dp_n)
    ep_n = 1
    epm = re.search(r"(?:--ep|ep\s*=|\bep)\s*(\d+)", t)
    if epm:
        ep_n = int(epm.group(1))
    elif is_moe and re.search(r"deepep|a2a|megamoe", t):
        ep_n = tp_n * dp_n
    if tp_n * dp_n != chips:
        return None
    return tp_n, dp_n, ep_n if (tp_n * dp_n) % ep_n == 0 else 1


def lowest_native_float(hw) -> str:
    return "nvfp4" if hw.supports("fp4") else "fp8" if hw.supports("fp8") else "bf16"


def redundant(model: ModelSpec, ep: int) -> int:
    """Expert slots to add so that EP divides them (DeepSeek's decode adds 32 redundant experts at EP144)."""
    experts = next((l.ffn.n_experts for l in model.layers if hasattr(l.ffn, "n_experts")), 0)
    return (-experts) % ep if experts else 0


def target_interactivity(notes: str) -> float | None:
    m = re.search(r"(\d+(?:\.\d+)?)\s*tok/s/user", notes)
    return float(m.group(1)) if m else None


def build_case(row: Row) -> Case:
    name = match_model(row.model)
    hw_name = match_hardware(row.hardware)
    model = model_catalog.catalog_model(name)
    hw = hw_catalog.catalog()[hw_name]
    notes: list[str] = [f"model: {row.model!r} -> {name}", f"hardware: {row.hardware!r} -> {hw_name}"]
    engine = engine_class(row.provider_or_engine + " " + row.weight_precision)
    notes.append(f"engine class: {engine} (from {row.provider_or_engine!r})")
    weights, experts, line = weight_rule(row.weight_precision, model)
    if not row.weight_precision.strip() and re.search(r"mlperf", row.provider_or_engine, re.I):
        weights = experts = lowest_native_float(hw)
        line = (f"weights: not stated; {weights}, the lowest float format {hw.name} runs natively "
                f"(rule: MLPerf submissions quantize as far as the 99 % accuracy target allows)")
    notes.append(line)
    kv, line = kv_rule(row, weights or experts, row.provider_or_engine)
    notes.append(line)
    spec, line = spec_rule(row.spec_decode, model)
    if spec is None and not row.spec_decode.strip() and vendor_speculates(row):
        d = speculative_defaults()
        spec = SpecDecode("eagle", 3, tuple(d["eagle3_acceptance"][:3]))
        line = ("speculative decoding: not stated; on (EAGLE-style, k=3), as Cerebras Inference has used it since its "
                "Oct-2024 release ('This release also implements speculative decoding', https://hn.masterscheme.cn/item?id=41942822) (rule)")
    notes.append(line)
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
    base = Deployment(weights=weights, expert_weights=experts, kv=kv, input_tokens=inp, output_tokens=out,
                      engine=engine, spec=spec)
    target = target_interactivity(row.notes) if row.metric.startswith("throughput") else None
    text = f"{row.provider_or_engine} {row.notes}"
    mode = {"output_tps_per_user": "per_user", "ttft_s": "ttft"}.get(row.metric, "offline_throughput")
    if mode == "ttft":
        offline = re.search(r"gptSessionBenchmark|benchmark_latency|trtllm-bench|offline", f"{row.provider_or_engine} {row.notes}", re.I)
        mode = "ttft" if offline else "ttft_online"
        notes.append("TTFT: in-process benchmark, prefill only (rule)" if offline else
                     "TTFT: served over HTTP/API, prefill plus request handling (request_overhead_s) (rule)")
    if mode == "offline_throughput" and re.search(r"\bprefill\b", row.notes, re.I) and re.search(r"\binput\b", row.notes, re.I) \
            and not re.search(r"\bdecode\b|\boutput tok", row.notes, re.I):
        mode = "prefill_throughput"
        notes.append("throughput: input (prefill) tokens/s, as the source's notes say (rule)")
    elif mode == "offline_throughput" and re.search(r"disagg|decode", row.notes, re.I):
        mode = "decode_throughput"
        notes.append("throughput: the decode pool of a prefill/decode split, decode only (rule)")
    if target is not None and row.batch_approximate or (target is not None and row.batch is None):
        chips = row.n_chips or min(FRONTIER_NODE_CHIPS, hw.chips_per_system or FRONTIER_NODE_CHIPS) or FRONTIER_NODE_CHIPS
        if row.batch is not None:
            notes.append(f"operating point: the stated concurrency {row.batch} on the server layout (TP 1-8, or DP-attention "
                         f"+ EP for MoE) whose per-user speed is closest to the stated {target} tok/s/user (rule)")
        else:
            notes.append(f"operating point: best layout on {chips} chips at >= {target} tok/s/user (frontier rule)")
        if re.search(r"inferencex", row.provider_or_engine, re.I) and not re.search(r"output tput", row.notes, re.I):
            notes.append("throughput: InferenceX plots input + output tokens per GPU (InferenceX process_result.py), "
                         "so the prediction is counted the same way (rule)")
        return Case(row, name, hw_name, replace(base, tp=1, dp=chips), "frontier", "frontier", target, tuple(notes))
    if row.batch is not None:
        batch = row.batch
        notes.append(f"batch: {batch}{' (approximate)' if row.batch_approximate else ''}")
    elif mode in ("per_user", "ttft", "ttft_online"):
        batch = 1
        notes.append("batch: not stated; 1 for a per-user speed (rule)")
    else:
        batch = 0   # filled in below: the largest that fits
    if row.n_chips is not None:
        par = parallel_from_text(text, row.n_chips, model.is_moe)
        if par:
            tp, adp, ep = par
            dep = replace(base, tp=tp, attn_dp=adp, ep=ep, redundant_experts=redundant(model, ep), batch=max(batch, 1))
            notes.append(f"layout: tp {tp} x attention DP {adp}, ep {ep} (from the source's text)")
        elif model.is_moe and row.n_chips > 8 and hw.kind == "gpu" and (
                mode.endswith("throughput") or re.search(r"\bEP\b|expert parallel|wide-EP|large EP|DeepEP", text)):
            n, replicas = row.n_chips, 1
            up = hw.link("scale_up")
            domain = up.domain_chips if up and up.domain_chips else n
            if domain < n and n % domain == 0:
                from tokensim.deploy.layout import fit_error
                one = replace(base, tp=1, attn_dp=domain, ep=domain, redundant_experts=redundant(model, domain), batch=domain)
                if fit_error(model, hw, one) is None:       # the expert all-to-all stays on the scale-up links
                    n, replicas = domain, row.n_chips // domain
            dep = replace(base, tp=1, attn_dp=n, ep=n, dp=replicas, redundant_experts=redundant(model, n), overlap_comm=True,
                          batch=max(batch, n * replicas))
            notes.append(f"layout: {row.n_chips} chips as {replicas} x (attention DP x wide EP {n}) with overlapped "
                         f"all-to-all and {dep.redundant_experts} redundant experts (rule for wide-EP deployments: EP "
                         f"inside one scale-up domain when it holds the model, replicas beyond)")
        else:
            from tokensim.deploy.layout import fewest_chips, layout_for_chips
            up = hw.link("scale_up")
            domain = up.domain_chips if up and up.domain_chips else row.n_chips
            try:
                if row.n_chips > domain or (mode.endswith("throughput") and not model.is_moe):
                    replica = fewest_chips(model, hw, replace(base, batch=1))
                    dp = max(1, row.n_chips // replica.chips)
                    dep = replace(replica, dp=dp, batch=max(batch, dp))
                    notes.append(f"layout: {row.n_chips} chips as {dp} replicas of tp {replica.tp} x pp {replica.pp} "
                                 f"(rule: throughput runs, and chips beyond one scale-up domain, replicate the fewest chips that fit)")
                else:
                    dep = layout_for_chips(model, hw, row.n_chips, replace(base, batch=max(batch, 1)))
                    notes.append(f"layout: {row.n_chips} chips as tp {dep.tp} x pp {dep.pp} (rule: TP inside the scale-up domain)")
            except TokensimError as exc:
                raise Skip(f"no layout on {row.n_chips} x {hw.name}: {exc}") from None
        chips_rule = "given"
        if not row.weight_precision.strip():
            from tokensim.deploy.layout import fit_error
            for narrower in ("fp8", "int4"):
                if fit_error(model, hw, replace(dep, batch=1)) is None:
                    break
                dep = replace(dep, weights=narrower, expert_weights=None)
                notes.append(f"weights: the checkpoint does not fit {row.n_chips} x {hw.name}; {narrower} (rule: "
                             f"unstated precision narrows until the stated chips hold the weights)")
    else:
        if mode not in ("per_user", "ttft", "ttft_online"):
            raise Skip("whole-system throughput with no chip count")
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
        except TokensimError as exc:
            raise Skip(str(exc)) from None
        chips_rule = "fewest"
    if batch == 0:
        from tokensim.perf.constants import for_hardware
        from tokensim.perf.context import make_context
        from tokensim.perf.memory import max_batch
        ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine))
        fit = max_batch(ctx, inp + out)
        if fit < 1:
            raise Skip("weights do not fit the stated chips")
        cap = dep.dp * (BATCH_CAP_PER_ATTENTION_RANK * dep.attn_dp if dep.attn_dp > 1 else BATCH_CAP_PER_REPLICA)
        dep = replace(dep, batch=min(fit, cap))
        notes.append(f"batch: not stated; largest that fits ({fit}), capped at {cap} (rule)")
    return Case(row, name, hw_name, dep, mode, chips_rule, target, tuple(notes))
