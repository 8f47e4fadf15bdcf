"""Engine releases whose kernels change a step's physics (data/engines/<engine>.toml `releases`), checked by hand.

TensorRT-LLM before 0.8 decoded grouped-query attention with its masked multi-head kernel, one query head per
pass, so a GQA model's KV cache was read once per query head; the XQA kernel (0.8) reads it once per KV head
(NVIDIA's XQA blog, docs/source/blogs/XQA-kernel.md: Llama-70B on one H200 at 128/2048 went 1,227 -> 2,941 output
tok/s per GPU)."""
import json

import pytest
from typer.testing import CliRunner

import tokensim
from tokensim.cli import app
from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.engines import release_traits, version_in_text
from tokensim.perf.layers import Batch, attention_ops, decode_kv_reads
from tokensim.specs.model.spec import Attention
from tokensim.validate.rules import build_case
from tokensim.validate.run import evaluate_row, shipped_measurements
from tokensim.validate.table import read_rows


@pytest.mark.parametrize("text,engine,version", [
    ("TensorRT-LLM v0.6.1 (NVIDIA)", "trtllm", "0.6.1"),
    ("TensorRT-LLM v1.0 (PyTorch backend, trtllm-bench)", "trtllm", "1.0"),
    ("TRT-LLM 0.8a", "trtllm", "0.8a"),
    ("SGLang v0.5.15 (cookbook)", "sglang", "0.5.15"),
    ("vLLM V1 (VLLM_USE_V1=1, ~v0.8.5-dev, April 2025)", "vllm", None),   # 'V1' is the engine generation
    ("MLPerf Inference v6.0 (NVIDIA submission)", "trtllm", None),       # a version, but not the engine's
])
def test_the_release_is_the_number_written_after_the_engines_name(text, engine, version):
    assert version_in_text(text, engine) == version


@pytest.mark.parametrize("engine,version,per_head", [
    ("trtllm", "0.5", True), ("trtllm", "0.6.1", True), ("trtllm", "0.7.1", True),
    ("trtllm", "0.8a0", False),       # the blog's own build, with XQA: a pre-release of 0.8 is not '< 0.8'
    ("trtllm", "0.8.0", False), ("trtllm", "1.2.0rc3", False), ("trtllm", None, False),
    ("vllm", "0.2.0", False),         # no release entry says anything about vLLM's kernels
])
def test_trtllm_before_0_8_reads_gqa_kv_once_per_query_head(engine, version, per_head):
    assert release_traits(engine, version).get("gqa_kv_read_per_query_head", False) is per_head


def _attention(model):
    return next(layer.mixer for layer in model.layers if isinstance(layer.mixer, Attention))


def test_per_query_head_reads_multiply_the_decode_kv_bytes_by_the_group():
    """Llama-2-70B (64 query heads, 8 KV heads, head width 128) on two H100s, FP8 KV: 32 query heads and 4 KV heads
    per chip. A decode step of 64 sequences at context 3,072 reads 64 x 3,072 x 2 (K, V) x 4 x 128 elements x
    1.000244 B (FP8 with one fp32 scale per 16,384 elements) = 201.4 MB of KV per layer per chip once per KV head;
    once per query head, 8 times that: 7 x 201.4 MB = 1.410 GB more.
    Prefill is unchanged (its flash kernel reads each KV head once)."""
    m, hw = tokensim.load_model("llama-2-70b"), tokensim.load_hardware("h100-sxm")
    k = for_hardware(hw, "trtllm")
    att = _attention(m)
    assert (att.n_heads, att.n_kv_heads, att.head_dim) == (64, 8, 128)
    old = make_context(m, hw, Deployment(tp=2, kv="fp8", engine="trtllm", engine_version="0.6.1"), k)
    new = make_context(m, hw, Deployment(tp=2, kv="fp8", engine="trtllm", engine_version="0.9.0"), k)

    def core(ctx, batch):
        return next(o for o in attention_ops(ctx, att, batch) if o.name == "attn.core")

    decode = Batch.decode(64, 3072)
    kv_once = 64 * 3072 * 2 * 4 * 128 * (1 + 32 / 8 / 16384)
    assert kv_once == pytest.approx(201.4e6, rel=1e-3)
    assert core(old, decode).bytes - core(new, decode).bytes == pytest.approx(7 * kv_once, rel=1e-9)
    prefill = Batch.prefill(1, 2048)
    assert core(old, prefill).bytes == pytest.approx(core(new, prefill).bytes, rel=1e-12)


@pytest.mark.parametrize("model,tp,reads", [
    ("llama-2-70b", 1, 8.0),     # 64 / 8
    ("llama-2-70b", 8, 8.0),     # 8 query heads and 1 KV head per chip
    ("llama-2-70b", 16, 4.0),    # KV heads replicated: 4 query heads per chip share one
    ("llama-2-7b", 1, 1.0),      # multi-head attention: one query head per KV head
])
def test_reads_per_kv_entry_are_query_heads_per_kv_head_on_a_chip(model, tp, reads):
    m, hw = tokensim.load_model(model), tokensim.load_hardware("h100-sxm")
    ctx = make_context(m, hw, Deployment(tp=tp, engine="trtllm", engine_version="0.6.1"), for_hardware(hw))
    assert decode_kv_reads(ctx, _attention(m)) == pytest.approx(reads)


def test_mla_and_current_releases_read_once():
    m, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("h200")
    ctx = make_context(m, hw, Deployment(tp=8, weights="fp8", engine="trtllm", engine_version="0.6.1"), for_hardware(hw))
    assert decode_kv_reads(ctx, _attention(m)) == 1.0
    m = tokensim.load_model("llama-3.1-70b")
    for dep in (Deployment(tp=8, engine="trtllm"), Deployment(tp=8, engine="vllm", engine_version="0.2.0")):
        assert decode_kv_reads(make_context(m, hw, dep, for_hardware(hw)), _attention(m)) == 1.0


def test_a_row_naming_an_old_release_says_so_and_predicts_its_published_throughput():
    """TensorRT-LLM v0.6.1's performance table (measurements.csv x004): Llama-2-70B FP8 on two H100s, static batch 64
    at 2,048 in / 2,048 out, 547 output tok/s per GPU. Reading KV once per KV head predicted 1,103 (+102 %); the
    release's kernel brings it within 25 % (the factor 8 ignores what L2 catches, so it errs slow)."""
    row = next(r for r in read_rows(shipped_measurements()) if r.id == "x004")
    case = build_case(row)
    assert case.deployment.engine_version == "0.6.1"
    assert any(a.startswith("engine release: trtllm 0.6.1") for a in case.assumptions)
    result = evaluate_row(row)
    assert row.value == pytest.approx(547)
    assert result.error is not None and -0.25 < result.error < 0.0


def test_a_bad_engine_version_is_one_line_naming_the_field():
    with pytest.raises(TokensimError, match="engine_version = 'x.y': expected a release number"):
        Deployment(engine="trtllm", engine_version="x.y")
    r = CliRunner().invoke(app, ["predict", "--engine", "trtllm", "--engine-version", "banana"])
    assert r.exit_code == 2
    assert "engine_version = 'banana'" in r.output and "Traceback" not in r.output


def test_predict_takes_the_release_and_reports_it():
    args = ["predict", "-m", "llama-2-70b", "-H", "h100-sxm", "--tp", "2", "--batch", "64", "--input-tokens", "2048",
            "--output-tokens", "2048", "--weights", "fp8", "--kv", "fp8", "--engine", "trtllm", "--json"]
    old = json.loads(CliRunner().invoke(app, [*args, "--engine-version", "0.6.1"]).output)
    new = json.loads(CliRunner().invoke(app, args).output)
    assert old["deployment"]["engine_version"] == "0.6.1"
    assert old["tokens_per_s_per_user"] < new["tokens_per_s_per_user"]


def test_a_scenario_names_the_release_in_its_deployment(tmp_path):
    from tokensim.scenarios.scenario import load_scenario, run_scenario
    text = ('model = "llama-2-70b"\nhardware = "h100-sxm"\n[deployment]\ntp = 2\nweights = "fp8"\nkv = "fp8"\n'
            'batch = 64\nengine = "trtllm"\n')
    new, old = tmp_path / "new.toml", tmp_path / "old.toml"
    new.write_text(text, encoding="utf-8")
    old.write_text(text + 'engine_version = "0.6.1"\n', encoding="utf-8")
    p_old, p_new = run_scenario(load_scenario(old)), run_scenario(load_scenario(new))
    assert p_old.deployment.engine_version == "0.6.1"
    assert p_old.tokens_per_s_per_user < p_new.tokens_per_s_per_user


def test_simulate_takes_the_release():
    """The serving simulator prices every step with the release's kernels: at 64 clients of 2,048 / 512 tokens the
    old TensorRT-LLM's time per output token is longer (its decode reads Llama-2-70B's KV 8 times), and a bad
    release is one line and exit 2."""
    args = ["simulate", "-m", "llama-2-70b", "-H", "h100-sxm", "--tp", "2", "--kv", "fp8", "--weights", "fp8",
            "--engine", "trtllm", "--concurrency", "64", "--input-tokens", "2048", "--output-tokens", "512",
            "--requests", "128", "--json"]
    old = json.loads(CliRunner().invoke(app, [*args, "--engine-version", "0.6.1"]).output)
    new = json.loads(CliRunner().invoke(app, args).output)
    assert old["tpot_s"]["mean"] > 1.3 * new["tpot_s"]["mean"]
    r = CliRunner().invoke(app, ["simulate", "--engine-version", "nope", "--concurrency", "2"])
    assert r.exit_code == 2 and "engine_version = 'nope'" in r.output
