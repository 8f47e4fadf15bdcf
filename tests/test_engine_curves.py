"""Every engine profile's curves obey physics (issue 11): over the whole hardware catalog and every engine, no op
runs faster than the datasheet allows (FLOP/s under the peak of the formats in use, bytes/s under the memory tier's
bandwidth, link bytes/s under the link's), every achieved fraction of a peak is at most 1, and step time never falls
when the work grows (more sequences, longer contexts, longer prompts, more GEMM rows)."""
import math

from hypothesis import assume, given, settings, strategies as st

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.perf.constants import SHARES, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.engines import engine_profiles
from tokensim.perf.layers import Batch, gemm_efficiency
from tokensim.perf.step import step_cost
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import load_model

ENGINES = sorted(engine_profiles())            # vllm, sglang, trtllm, llamacpp, default
CHIPS = sorted(catalog())
MODELS = ["llama-3.1-8b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b", "gpt-oss-20b"]
FRACTIONS = SHARES                              # every achieved share of a peak the constants hold
REL = 1e-9                                      # floating-point slack only


def _context(model: str, chip: str, engine: str, tp: int):
    hw = catalog()[chip]
    dep = Deployment(tp=tp, engine=engine)
    try:
        return make_context(load_model(model), hw, dep, for_hardware(hw, engine))
    except TokensimError:
        assume(False)


def _step(ctx, batch):
    try:
        return step_cost(ctx, batch)
    except TokensimError:               # a chip with no link cannot run a collective: not an example
        assume(False)


def test_every_achieved_fraction_is_at_most_one():
    """For every chip in the catalog and every engine, the shipped (and fitted) achieved fractions of a datasheet peak
    lie in (0, 1], and prefill attention's rate (prefill fraction x its ratio) too."""
    for chip, hw in catalog().items():
        for engine in ENGINES:
            k = for_hardware(hw, engine)
            for name in FRACTIONS:
                assert 0 < getattr(k, name) <= 1, (chip, engine, name, getattr(k, name))
            assert 0 < k.prefill_flops_fraction * k.attention_prefill_rate_ratio <= 1, (chip, engine)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(CHIPS), st.sampled_from(ENGINES), st.sampled_from([1, 2, 8]),
       st.floats(1, 512), st.floats(16, 32768), st.floats(0, 4), st.floats(16, 8192))
def test_no_op_beats_the_datasheet(model, chip, engine, tp, seqs, context, prompts, prompt_tokens):
    """A mixed step (decode sequences and prompt chunks): each op's FLOP/s, memory bytes/s and link bytes/s are at
    most the chip's peak for the formats in use, its memory tier's bandwidth and its fastest link's bandwidth."""
    ctx = _context(model, chip, engine, tp)
    hw = ctx.hw
    peak = max(hw.peak_flops(r.compute) for r in ctx.rates.values())
    bandwidth = max(t.bandwidth_bytes_per_s for t in hw.memory)
    links = [b for link in hw.links for b in (link.bandwidth_bytes_per_s, link.peer_bandwidth_bytes_per_s or 0.0)]
    batch = Batch(decode_seqs=seqs, decode_context=context, prefill_seqs=prompts, prefill_tokens=prompt_tokens,
                  prefill_position=prompt_tokens / 2)
    for op, _ in _step(ctx, batch).ops:
        if op.t_compute_s > 0:
            assert op.flops / op.t_compute_s <= peak * (1 + REL), (op.name, op.flops / op.t_compute_s, peak)
        if op.t_memory_s > 0:
            assert op.bytes / op.t_memory_s <= bandwidth * (1 + REL), (op.name, op.bytes / op.t_memory_s, bandwidth)
        if op.t_comm_s > 0 and op.comm_bytes > 0:
            assert links and op.comm_bytes / op.t_comm_s <= max(links) * (1 + REL), op.name


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(CHIPS), st.sampled_from(ENGINES), st.sampled_from([1, 2, 8]),
       st.floats(1, 256), st.floats(1.0, 4.0), st.floats(16, 16384), st.floats(1.0, 4.0))
def test_step_time_never_falls_as_the_work_grows(model, chip, engine, tp, seqs, more, context, longer):
    """Decode: more sequences, or longer contexts, never make a step faster; prefill: a longer prompt never does."""
    ctx = _context(model, chip, engine, tp)

    def decode(n, c):
        return _step(ctx, Batch.decode(n, c)).latency_s

    def prefill(n):
        return _step(ctx, Batch.prefill(1, n, position=n / 2)).latency_s
    base = decode(seqs, context)
    assert decode(seqs * more, context) >= base * (1 - REL)
    assert decode(seqs, context * longer) >= base * (1 - REL)
    assert prefill(context * longer) >= prefill(context) * (1 - REL)


def test_gemm_curves_rise_with_rows_and_inner_dimension_and_stay_under_the_peak():
    """The achieved GEMM rate, peak x fraction x rows / (rows + gemm_half_rows) x K / (K + gemm_half_inner), for decode
    and for prefill, for every chip and engine: non-decreasing in rows from 1 to 65,536 and in the inner dimension K
    from 16 to 65,536, and at most the peak (it reaches peak x fraction only as both grow without bound)."""
    sizes = [2.0 ** i for i in range(17)]
    for chip, hw in catalog().items():
        for engine in ENGINES:
            k = for_hardware(hw, engine)
            ctx = make_context(load_model("llama-3.1-8b"), hw, Deployment(engine=engine), k)
            peak = max(f for _, f in hw.flops_per_s)
            for fraction in (k.gemm_flops_fraction, k.prefill_flops_fraction):
                for curve in ([peak * fraction * gemm_efficiency(ctx, r, ((1.0, 4096.0),)) for r in sizes],
                              [peak * fraction * gemm_efficiency(ctx, 4096.0, ((1.0, n + 16),)) for n in sizes]):
                    assert all(b >= a * (1 - REL) for a, b in zip(curve, curve[1:])), (chip, engine)
                    assert all(math.isfinite(v) and 0 < v <= peak for v in curve), (chip, engine)
