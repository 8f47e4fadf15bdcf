"""Properties that must hold for any deployment (hypothesis)."""
from dataclasses import replace

from hypothesis import assume, given, settings, strategies as st

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.deploy.layout import fit_error
from tokensim.specs.model.catalog import load_model
from tokensim.prediction.predictor import predict_deployment

MODELS = ["llama-3.1-8b", "qwen3-32b", "mixtral-8x7b", "gpt-oss-20b", "qwen3-next-80b"]
HARDWARE = ["h100-sxm", "h200", "b200", "mi300x", "a100-sxm"]

layouts = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS),
    "hardware": st.sampled_from(HARDWARE),
    "tp": st.sampled_from([1, 2, 4]),
    "pp": st.sampled_from([1, 1, 2, 4]),
    "batch": st.integers(1, 256),
    "input_tokens": st.integers(16, 8192),
    "output_tokens": st.integers(1, 2048),
    "weights": st.sampled_from([None, "fp8", "int4"]),
})


def _predict(c, hw=None, **overrides):
    m = load_model(c["model"])
    h = hw or load_hardware(c["hardware"])
    dep = Deployment(tp=c["tp"], pp=c["pp"], batch=c["batch"], input_tokens=c["input_tokens"],
                     output_tokens=c["output_tokens"], weights=c["weights"])
    dep = replace(dep, **overrides)
    # a layout that does not fit (or is refused) is not an example: hypothesis is told, and draws another, so no
    # example passes without asserting anything
    assume(fit_error(m, h, dep) is None)
    try:
        return predict_deployment(m, h, dep)
    except TokensimError:
        assume(False)


@settings(max_examples=40, deadline=None)
@given(layouts, st.floats(1.01, 4.0))
def test_more_bandwidth_never_slows_a_step(c, factor):
    hw = load_hardware(c["hardware"])
    tier = hw.memory[0]
    faster = replace(hw, memory=(replace(tier, bandwidth_bytes_per_s=tier.bandwidth_bytes_per_s * factor),) + hw.memory[1:])
    a, b = _predict(c, hw), _predict(c, faster)
    assert b.tokens_per_s_per_user >= a.tokens_per_s_per_user * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(layouts, st.integers(1, 128))
def test_per_user_speed_never_rises_with_batch(c, extra):
    a, b = _predict(c), _predict(c, batch=c["batch"] + extra)
    assert b.tokens_per_s_per_user <= a.tokens_per_s_per_user * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(layouts, st.integers(1, 128))
def test_throughput_never_falls_with_batch_while_it_fits(c, extra):
    a, b = _predict(c), _predict(c, batch=c["batch"] + extra)
    assert b.throughput_tokens_per_s >= a.throughput_tokens_per_s * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(layouts)
def test_no_prediction_beats_its_roofline_bound(c):
    p = _predict(c)
    assert p.tokens_per_s_per_user <= p.roofline_bound_tokens_per_s_per_user
    assert p.tokens_per_s_per_user <= p.bandwidth_bound_tokens_per_s_per_user
