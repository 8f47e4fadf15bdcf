"""Every prediction's calibrated range holds its own central estimate (issue 10), over the whole catalog and
random deployments."""
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tokensim
from tokensim.errors import TokensimError
from tokensim.specs.model.catalog import entries

MODELS = sorted(entries())
HARDWARE = ["h100-sxm", "h200", "b200", "mi300x", "cs-3", "groq-lpu", "a100-sxm", "rtx-pro-6000"]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), hw=st.sampled_from(HARDWARE), batch=st.sampled_from([1, 4, 32, 256]),
       engine=st.sampled_from(["default", "vllm", "sglang", "trtllm"]))
def test_estimate_inside_its_range(model, hw, batch, engine):
    try:
        p = tokensim.predict(model, hw, batch=batch, engine=engine, input_tokens=1000, output_tokens=200)
    except TokensimError:
        assume(False)                            # refused (does not fit): hypothesis counts it and looks further
        return
    lo, hi = p.tokens_per_s_per_user_range
    assert lo <= p.tokens_per_s_per_user_estimate <= hi
    t_lo, t_hi = p.ttft_s_range
    assert t_lo <= p.ttft_s_estimate <= t_hi
    assert 0 < lo < hi and 0 < t_lo < t_hi


def test_every_catalog_model_on_its_fewest_h200s():
    for model in MODELS:
        try:
            p = tokensim.predict(model, "h200")
        except TokensimError:
            continue
        lo, hi = p.tokens_per_s_per_user_range
        assert lo <= p.tokens_per_s_per_user_estimate <= hi, model
