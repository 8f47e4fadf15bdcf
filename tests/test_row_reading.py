"""Reading the free-text cells of a measurement row: each rule on the phrasings sources use."""
import csv
from dataclasses import replace

import pytest

from tokensim.errors import TokensimError
from tokensim.validate.names import match_hardware, match_model, strip_variant
from tokensim.validate.parse import (Skip, count, kv_cell, layout, per_chip_batch, precision_word, spec_cell, unstated,
                                     weights_cell)
from tokensim.validate.rules import build_case, parallel_from_text, spec_rule
from tokensim.validate.run import shipped_measurements
from tokensim.validate.table import COLUMNS, read_rows

NOT_STATED = ["", "n/s", "N/S", "unstated", "not disclosed", "unknown", "?", "-", "\u2014", "n/a", "N/A", "none stated",
              "not reported", "not stated", "Not stated in excerpt", "undisclosed"]


@pytest.mark.parametrize("text", NOT_STATED)
def test_every_spelling_of_not_stated_is_understood(text):
    """A cell that says in words that the source does not state the fact reads as not stated."""
    assert unstated(text)
    assert count(text, "input_tokens").value is None
    assert kv_cell(text)[0] is None
    assert not spec_cell(text).stated
    w = weights_cell(text)
    assert (w.everything, w.experts) == (None, None)


@pytest.mark.parametrize("text", ["none", "FP8", "8", "bf16 (default)"])
def test_a_stated_value_is_not_read_as_unstated(text):
    """'none' in the speculative-decoding column is a statement (no speculation), not a missing fact."""
    assert not unstated(text)


@pytest.mark.parametrize("text, tokens, value, approximate", [
    ("~2k", True, 2048, True), ("2k", True, 2048, False), ("2,048", True, 2048, False), ("1.5k", True, 1536, False),
    ("8K", True, 8192, False), ("128k", True, 131072, False), ("2k", False, 2000, False), ("~1088", False, 1088, True),
    ("5-10", False, 8, True), ("64 users", False, 64, False), ("0", False, None, False),
])
def test_counts_read_k_suffixes_commas_ranges_and_approximations(text, tokens, value, approximate):
    """k is 1024 in a token length (an 8K context is 8,192 tokens) and 1000 elsewhere; '~' marks an approximation."""
    got = count(text, "field", tokens=tokens)
    assert (got.value, got.approximate) == (value, approximate)
    if text.lower().endswith("k"):
        assert "read as" in got.note


def test_a_count_cell_without_a_number_names_the_field():
    with pytest.raises(TokensimError, match=r"row r9: batch = 'fast'"):
        count("fast", "batch", "r9")


@pytest.mark.parametrize("text, name", [
    ("FP8 (E4M3)", "fp8"), ("fp8_e4m3", "fp8"), ("fp8_block", "fp8"), ("W4A16", "int4"), ("AWQ", "int4"),
    ("GPTQ int4", "int4"), ("GPTQ-Int8", "int8"), ("Q4_K_M", "q4_k_m"), ("Q4_K_M GGUF (16.8 GB file)", "q4_k_m"),
    ("Q8_0", "int8"), ("Q4_0", "int4-g32"), ("MXFP4", "mxfp4"), ("NVFP4", "nvfp4"), ("BF16/FP16", "bf16"),
    ("16-bit", "bf16"), ("8-bit", "fp8"), ("FP4", "fp4"), ("int4 weight-only (g=32)", "int4-g32"), ("128-bit bus", None),
])
def test_precision_words(text, name):
    assert precision_word(text) == name


def test_weight_cells_split_experts_from_the_rest_and_flag_guesses():
    """Segments naming experts set the expert precision; a cell that says its value is a guess says so."""
    w = weights_cell("FP4 experts / FP8 other (official ckpt)")
    assert (w.everything, w.experts) == ("fp8", "fp4")
    w = weights_cell("FP8 MoE (BF16 attention)")
    assert (w.everything, w.experts) == ("bf16", "fp8")
    w = weights_cell("BF16 (default; not stated)")
    assert w.everything == "bf16" and "did not state" in w.note
    with pytest.raises(Skip, match="names no precision"):
        weights_cell("secret sauce")


@pytest.mark.parametrize("text, kv", [("FP8", "fp8"), ("fp8_e4m3", "fp8"), ("auto (bf16)", "bf16"),
                                      ("bf16 (default)", "bf16"), ("FP16", "bf16"), ("auto", None)])
def test_kv_cells(text, kv):
    assert kv_cell(text)[0] == kv


@pytest.mark.parametrize("text, tp, dp, ep, pp, chips", [
    ("TP8 x EP8", 8, None, 8, None, 8), ("TP=8,EP=8", 8, None, 8, None, 8), ("tp8ep8", 8, None, 8, None, 8),
    ("DP8+EP8", None, 8, 8, None, 8), ("PP2 TP4", 4, None, None, 2, 8), ("DEP8", None, 8, 8, None, 8),
    ("TEP16", 16, None, 16, None, 16), ("--tp 4 --dp 4 --enable-dp-attention", 4, 4, None, None, 4),
    ("TP8 attention, TP4xEP2 MoE", 8, None, 2, None, 8), ("2 (DP2 + enable_expert_parallel)", None, 2, 2, None, 2),
])
def test_layouts(text, tp, dp, ep, pp, chips):
    lay = layout(text)
    assert (lay.tp, lay.dp, lay.ep, lay.pp, lay.layout_chips) == (tp, dp, ep, pp, chips)


@pytest.mark.parametrize("text", ["EAGLE/MTP steps 3, topk 1", "MTP 3 layers", "8xH100", "ISL=1024", "1.53x GB200"])
def test_words_that_are_not_layouts(text):
    assert layout(text) is None


def test_layouts_become_deployments_only_when_they_add_up_to_the_stated_chips():
    """SGLang's '--tp 4 --dp 4 --enable-dp-attention' is 4 chips with attention DP 4; a dense model's DP is replicas."""
    assert parallel_from_text("--tp 4 --dp 4 --enable-dp-attention --moe-a2a-backend deepep", 4, True) == (1, 4, 4, 1, 1)
    assert parallel_from_text("TP8 x EP8", 8, True) == (8, 1, 8, 1, 1)
    assert parallel_from_text("DP8+EP8", 8, False) == (1, 1, 1, 1, 8)
    assert parallel_from_text("PP2 TP4", 8, False) == (4, 1, 1, 2, 1)
    assert parallel_from_text("TP8 x EP8", 16, True) is None


@pytest.mark.parametrize("text, method, k, stated", [
    ("MTP", "mtp", None, True), ("EAGLE-3 (k=3)", "eagle3", 3, True), ("n-gram", "ngram", None, True),
    ("not stated", None, None, False), ("none", None, None, True),
    ("EAGLE/MTP steps 3, topk 1, draft tokens 4 (acceptance not stated)", "mtp", 3, True),
    ("EAGLE-1 (yuhuili/EAGLE-LLaMA3.1-Instruct-8B), K=2", "eagle", 2, True),
])
def test_speculative_decoding_cells(text, method, k, stated):
    s = spec_cell(text)
    assert (s.method, s.draft_tokens, s.stated) == (method, k, stated)


def test_n_gram_speculation_is_modelled_without_and_says_why(shipped_row):
    spec, note = spec_rule(replace(shipped_row, spec_decode="n-gram", provider_or_engine="vLLM"))
    assert spec is None and "n-gram" in note


def test_a_per_chip_batch_in_the_notes():
    assert per_chip_batch("40 req/GPU decode batch at DEP8") == 40
    assert per_chip_batch("64 requests per GPU") == 64
    assert per_chip_batch("batch 64") is None


@pytest.mark.parametrize("text, name, precision", [
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b", None),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", "fp8"),
    ("Kimi-K2-Instruct-0905", "kimi-k2", None),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", None),
    ("Llama-3.1-8B-Chat", "llama-3.1-8b", None),
    ("Llama-3.1-8B-Base", "llama-3.1-8b", None),
    ("DeepSeek-V3-20250324", "deepseek-v3", None),
    ("nvidia/DeepSeek-R1-NVFP4", "deepseek-r1", "nvfp4"),
    ("nvidia/DeepSeek-V3.1-NVFP4", "deepseek-v3.1", "nvfp4"),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b", "int4"),
    ("Qwen/Qwen3-32B-GPTQ-Int4", "qwen3-32b", "int4"),
    ("Qwen3-32B-Q4_K_M.gguf", "qwen3-32b", "q4_k_m"),
    ("Qwen3-32B-Q8_0", "qwen3-32b", "int8"),
    ("gpt-oss-20b (GGUF Q4_K_M)", "gpt-oss-20b", "q4_k_m"),
    ("Llama 3.1 8B (nvidia/Llama-3.1-8B-Instruct-FP8)", "llama-3.1-8b", "fp8"),
    ("DeepSeek (V3/R1 architecture)", "deepseek-v3", None),
    ("MiniMax-M2.5-NVFP4", "minimax-m2.5-nvfp4", "nvfp4"),      # a catalog entry of its own wins over the variant rule
    ("Kimi-K2-Thinking", "kimi-k2-thinking", None),
])
def test_model_variants_resolve_to_the_architecture_they_share(text, name, precision):
    m = match_model(text)
    assert (m.name, m.precision) == (name, precision)
    assert m.note.startswith(f"model: {text!r} -> {name}")


def test_variant_tags_are_dropped_from_the_end_only():
    assert strip_variant("Llama-3.1-8B-Instruct-FP8") == ("llama-3.1-8b", ("FP8",))
    # the 2507 Thinking release shares the Instruct release's architecture; its date tag is dropped with "Thinking"
    assert strip_variant("Qwen3-30B-A3B-Thinking-2507") == ("qwen3-30b-a3b", ("Thinking", "2507"))
    assert strip_variant("Qwen2.5-72B-Instruct") == (None, ())     # no Qwen2.5-72B architecture in the catalog


@pytest.mark.parametrize("text, reason", [
    ("", "model not stated"), ("n/s", "model not stated"),
    ("DeepSeek (variant not stated in excerpt)", "model variant not stated"),
    ("Qwen/Qwen2.5-72B-Instruct", "not in the catalog"),
])
def test_a_model_that_cannot_be_matched_says_why(text, reason):
    with pytest.raises(Skip, match=reason):
        match_model(text)


@pytest.mark.parametrize("text, name, chips", [
    ("8xH100", "h100-sxm", 8), ("8xH100 node (H100, 4 used)", "h100-sxm", 8), ("GB200 192GB (NVL72)", "gb200-nvl72", None),
    ("NVIDIA RTX PRO 6000 (Blackwell)", "rtx-pro-6000", None), ("b200_sxm", "b200", None), ("gb200", "gb200-nvl72", None),
    ("NVIDIA A100 (variant not stated)", "a100-sxm", None), ("NVIDIA Blackwell Ultra (system size not in excerpt)", "b300", None),
    ("L40S", "l40s", None), ("NVIDIA L4", "l4", None), ("A10G", "a10g", None), ("MI250X", "mi250x", None),
    ("Intel Gaudi 3", "gaudi-3", None), ("AWS Trainium2", "trainium-2", None),
])
def test_hardware_cells(text, name, chips):
    m = match_hardware(text)
    assert (m.name, m.chips) == (name, chips)


@pytest.mark.parametrize("text, reason", [("", "hardware not stated"), ("unknown", "hardware not stated"),
                                          ("NVIDIA GPU (undisclosed)", "hardware not disclosed")])
def test_undisclosed_hardware_is_a_missing_fact(text, reason):
    with pytest.raises(Skip, match=reason):
        match_hardware(text)


# ---------------------------------------------------------------- whole rows


@pytest.fixture(scope="module")
def shipped_row():
    return next(r for r in read_rows(shipped_measurements()) if r.id.startswith("x"))


def _write(tmp_path, rows):
    path = tmp_path / "m.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})
    return path


BASE = {"provider_or_engine": "SGLang", "hardware": "8xH200", "model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        "metric": "output_tps_per_user", "value": "40", "source_url": "https://example.org/a"}


def test_a_row_in_free_text_becomes_a_scenario_with_every_reading_recorded(tmp_path):
    """Unstated words, '2k' lengths, a variant name with its precision, chips in the hardware cell and a written
    layout all turn into a scenario, and each reading appears in the assumptions."""
    row = {**BASE, "id": "t1", "n_chips": "n/s", "weight_precision": "n/s", "kv_precision": "fp8_e4m3",
           "batch_or_concurrency": "~8", "input_tokens": "2k", "output_tokens": "1.5k", "spec_decode": "none",
           "notes": "served with TP8 x EP8"}
    (r,) = read_rows(_write(tmp_path, [row]))
    assert (r.n_chips, r.batch, r.batch_approximate, r.input_tokens, r.output_tokens) == (None, 8, True, 2048, 1536)
    case = build_case(r)
    d = case.deployment
    assert (case.model, case.hardware, d.weights, d.kv, d.tp, d.ep, d.chips) == ("qwen3-235b-a22b", "h200", "fp8", "fp8", 8, 8, 8)
    text = "\n".join(case.assumptions)
    for needle in ("'2k' read as 2048", "variant tags", "as the model name", "8 chips named", "hardware cell",
                   "from the source's text", "KV: 'fp8_e4m3' read as fp8"):
        assert needle in text, needle


def test_a_skipped_row_names_the_missing_fact(tmp_path):
    rows = [{**BASE, "id": "a", "hardware": "N/A"},
            {**BASE, "id": "b", "model": "?"},
            {**BASE, "id": "c", "hardware": "H200", "metric": "throughput_tps_total"}]
    reasons = []
    for r in read_rows(_write(tmp_path, rows)):
        with pytest.raises(Skip) as exc:
            build_case(r)
        reasons.append(str(exc.value))
    assert reasons == ["hardware not stated", "model not stated",
                       "chip count not stated (a throughput_tps_total figure needs the chips it was measured on)"]


def test_decode_pool_rule_reads_pools_not_speculative_decoding():
    """'decode' alone does not name a prefill/decode split: 'spec decode (MTP) not stated' is about speculation."""
    import re

    from tokensim.validate.rules import DECODE_POOL
    assert not re.search(DECODE_POOL, "KV precision and spec decode (MTP) not stated", re.I)
    for text in ("Decode output tok/s per GPU; 12 of 14 trays (48 GPUs) decode, rest prefill", "disaggregated serving",
                 "decode workers 8", "1P/1D"):
        assert re.search(DECODE_POOL, text, re.I), text


def test_a_split_per_gpu_figure_counts_only_decode_where_the_source_says_so(tmp_path):
    """A per-GPU throughput of a prefill/decode split reads as the decode pool's when the source says the figure is
    decode's; otherwise the prefill GPUs behind it are a missing fact, and the skip says so."""
    said = {**BASE, "id": "d1", "metric": "throughput_tps_per_chip", "value": "2000", "n_chips": "8",
            "batch_or_concurrency": "64", "input_tokens": "1000", "output_tokens": "1000",
            "notes": "PD disaggregation; decode output tok/s per GPU"}
    unsaid = {**said, "id": "d2", "notes": "PD disagg; peak output TPS/GPU"}
    first, second = read_rows(_write(tmp_path, [said, unsaid]))
    assert build_case(first).mode == "decode_throughput"
    with pytest.raises(Skip, match="prefill pool's size is not stated"):
        build_case(second)


def test_a_stated_concurrency_the_memory_cannot_hold_runs_at_what_fits():
    """TensorRT-LLM's A100 row (x009): Llama-2-7B at batch 60, 128 in / 2,048 out, FP16 KV. By hand: KV per token
    32 layers x 2 x 4096 x 2 B = 524,288 B; 60 x 2,176 tokens = 68.5 GB, with 13.5 GB of weights over the 72 GB usable
    (0.9 x 80 GB). The largest batch that fits holds (72.0 - 13.5) GB / (2,176 x 524,288 B) = 51.3 -> 51 sequences;
    the row is predicted there, and says so."""
    from tokensim.deploy.layout import fit_error
    from tokensim.specs.hardware.catalog import catalog
    from tokensim.specs.model.catalog import catalog_model
    from tokensim.validate.evaluate import kv_limited, predict_case

    row = next(r for r in read_rows(shipped_measurements()) if r.id == "x009")
    case = build_case(row)
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    assert case.deployment.batch == 60 and fit_error(model, hw, case.deployment) is not None
    dep, note = kv_limited(model, hw, case.deployment)
    assert dep.batch == 51 and fit_error(model, hw, dep) is None
    assert fit_error(model, hw, replace(dep, batch=52)) is not None
    assert "the stated 60 sequences do not fit" in note and "holds 51 at once" in note
    value, notes = predict_case(case)
    assert value > 0 and notes[0] == note
    same, none = kv_limited(model, hw, dep)
    assert same == dep and none is None                 # a batch that fits is left alone
