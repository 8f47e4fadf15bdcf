"""Wafer pipelines, speculative decoding, disaggregation, scenarios and claims: arithmetic written out."""
import json
import math
import subprocess
import sys

import pytest

import tokensim
from tokensim.scenarios.claims import all_claims
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.prediction.disagg import LinkSpec, predict_afd
from tokensim.errors import TokensimError
from tokensim.scenarios.scenario import load_scenario, run_scenario, shipped_scenarios

CS3 = tokensim.load_hardware("cs-3")


def test_four_stage_pipeline_time_per_token_and_fill():
    """Llama-3.1-70B bf16 on 4 CS-3 wafers (20 layers each), batch 1.
    Per-user interval = sum of the 4 stage times + 3 hops + host time.
    Fill (TTFT): the prompt is cut into 4 chunks that follow each other through the stages:
    TTFT = sum of stage times (one chunk) + 3 hops + host + 3 x the slowest stage (one chunk)."""
    from tokensim.perf.constants import for_hardware
    from tokensim.perf.context import make_context
    from tokensim.perf.layers import Batch
    from tokensim.perf.step import step_cost

    m = tokensim.load_model("llama-3.1-70b")
    p = tokensim.predict(m, CS3, pp=4, batch=1, input_tokens=1024, output_tokens=256)
    k = for_hardware(CS3)
    decode = step_cost(make_context(m, CS3, p.deployment, k), Batch.decode(1, 1024 + 128))
    assert len(decode.stage_s) == 4
    assert p.time_per_output_token_s == pytest.approx(sum(decode.stage_s) + 3 * decode.hop_s + decode.host_s, rel=1e-12)
    link = CS3.link("scale_out")                      # hop: stage latency + link latency + 8192 x 2 bytes over the link
    assert decode.hop_s == pytest.approx(k.stage_hop_latency_s + link.latency_s
                                         + 8192 * 2 / (k.link_bandwidth_fraction * link.bandwidth_bytes_per_s))
    chunk = step_cost(make_context(m, CS3, p.deployment, k), Batch.prefill(1, 256, position=512))   # mean position 1024 / 2
    assert p.ttft_s == pytest.approx(sum(chunk.stage_s) + 3 * chunk.hop_s + chunk.host_s + 3 * max(chunk.stage_s), rel=1e-12)


def test_wafer_speed_is_bounded_by_layer_floor_and_hops_not_sram_bandwidth():
    """A 70B dense model on CS-3: 141 GB over 5 wafers read at 21 PB/s takes ~7 us per token, which would
    allow >100,000 tokens/s. tokensim's answer is set by 80 per-layer floors and 4 hops instead."""
    p = tokensim.predict("llama-3.1-70b", CS3, batch=1)
    sram_only = 2 * 70.55e9 / 21e15                              # seconds per token from bandwidth alone
    assert 1 / sram_only > 100_000
    assert p.tokens_per_s_per_user < 3_000
    ops = {o.name: o for o in p.breakdown}
    fixed = ops["layer.floor"].time_s + ops["pp.hop"].time_s
    assert fixed / p.time_per_output_token_s > 0.9


def test_speculative_expectation_and_large_batch_limit():
    """E = (1 - a^(k+1)) / (1 - a): a = 0.8, k = 4 -> 3.3616. At large batch a verify step costs
    about (k+1) plain steps (compute-bound), so the speed-up falls toward E / (k+1) < 1."""
    s = SpecDecode("eagle", 4, (0.8,))
    assert s.expected_tokens_per_step == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert SpecDecode("mtp", 2, (0.9, 0.5)).expected_tokens_per_step == pytest.approx(1 + 0.9 + 0.9 * 0.5)
    speedups = []
    for batch in (1, 64, 256, 1024):
        base = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=batch, input_tokens=32, output_tokens=32)
        spec = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=batch, input_tokens=32, output_tokens=32, spec=s)
        speedups.append(spec.tokens_per_s_per_user / base.tokens_per_s_per_user)
    assert speedups[0] > 1.5                       # memory-bound at batch 1: verifying 5 tokens costs ~1 step
    assert speedups == sorted(speedups, reverse=True)
    assert speedups[-1] < 1.0                      # compute-bound: about E / (k+1) = 0.67, less the draft cost


def test_wafer_count_for_3t_params_at_4_and_8_bits():
    """3.08T parameters (the Sol estimate) at int4 (4.125 bits) = 1.59 TB and at fp8 = 3.08 TB, over
    44 GB x 0.85 usable = 37.4 GB per wafer: at least 43 and 83 wafers (embeddings and LM head in bf16 add a few)."""
    s = load_scenario(shipped_scenarios()["sol-cs3"])
    total = s.model.total_params
    usable = 44e9 * tokensim.perf.constants.for_hardware(CS3).usable_memory_fraction
    p4 = run_scenario(s)
    assert p4.min_chips >= math.ceil(total * 4.125 / 8 / usable)
    assert p4.min_chips <= math.ceil(total * 4.125 / 8 / usable) + 4
    fp8 = dict(s.alternatives())["fp8-two-wafers-per-layer"]
    p8 = run_scenario(fp8)
    assert math.ceil(total * 1.0 / usable) <= p8.min_chips <= math.ceil(total * 1.0 / usable) + 6


def test_afd_transfer_bytes_per_layer():
    """Attention on 8 x H200, experts on 20 wafers, batch 32, one micro-batch: every layer sends
    32 tokens x 7168 x 2 bytes = 458,752 bytes each way; per sending chip 57,344 bytes."""
    m = tokensim.load_model("deepseek-v3")
    p = predict_afd(m, tokensim.load_hardware("h200"), Deployment(tp=8, batch=32), CS3,
                    Deployment(pp=20, expert_weights="fp8"), LinkSpec(150e9, 5e-6), micro_batches=1)
    t = {o.name: o for o in p.breakdown}["afd.transfer"]
    assert t.comm_bytes == pytest.approx(2 * 61 * 32 * 7168 * 2 / 8)
    assert t.time_s == pytest.approx(2 * 61 * (5e-6 + 32 * 7168 * 2 / 8 / 150e9))


def test_claims_table_has_every_public_claim_and_required_fields():
    results = all_claims()
    ids = {r.id for r in results}
    assert {"c01", "c03", "c04", "c05", "c06", "c08", "c10-wafer", "c11-gpu", "c12-wafer", "c13-gpu", "c14-ratio", "c15"} <= ids
    for r in results:
        d = r.to_dict()
        assert {"id", "claim_value", "predicted_value", "unit", "ratio", "verdict", "verdict_kind", "conditions",
                "assumptions"} <= set(d)
        lo, hi = d["predicted_range"]
        assert lo <= d["predicted_value"] <= hi                      # the estimate lies in its own range
        # the kind follows from where the claim lies against the base range (min_chips: a floor), nothing else
        if d["quantity"] == "min_chips":
            expected = "consistent" if d["claim_value"] >= lo else "claim_below_range"
        else:
            expected = ("consistent" if lo <= d["claim_value"] <= hi else
                        "claim_above_range" if d["claim_value"] > hi else "claim_below_range")
        assert d["verdict_kind"] == expected, d["id"]
        assert d["verdict"].startswith("consistent:" if expected == "consistent" else "inconsistent:")


def test_c03_is_judged_under_its_stated_conditions():
    """The claim's record says speculative decoding: the base case runs with it, and an alternative without it is
    marked as breaking that condition."""
    c03 = next(r for r in all_claims() if r.id == "c03")
    assert "speculative decoding" in c03.conditions
    s = load_scenario(shipped_scenarios()["kimi-k2.6-cs3"])
    assert s.deployment.spec is not None and s.deployment.spec.draft_tokens == 3
    off = [a for a in c03.alternatives if "no speculative decoding" in a["label"]]
    assert off and off[0]["breaks"] == ["speculative decoding"]


def test_claims_use_the_same_path_as_run():
    """The claim's predicted speed is exactly the calibrated estimate `tokensim run` prints for its scenario."""
    c03 = next(r for r in all_claims() if r.id == "c03")
    p = run_scenario(load_scenario(shipped_scenarios()["kimi-k2.6-cs3"]))
    assert c03.predicted_value == p.tokens_per_s_per_user_estimate
    assert c03.predicted_range == p.tokens_per_s_per_user_range


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tokensim.cli", *args], capture_output=True, text=True, timeout=300)


def test_claims_json_and_run_json():
    d = json.loads(_cli("claims", "--json").stdout)
    assert len(d) >= 15
    r = json.loads(_cli("run", "kimi-k2.6-cs3", "--json").stdout)
    assert r["scenario"] == "kimi-k2.6-cs3" and r["chips"] == 20


BASE = '''
name = "bad"
model = "llama-3.1-8b"
hardware = "cs-3"
[deployment]
{deployment}
{extra}
'''


@pytest.mark.parametrize("deployment, extra, needle", [
    ('stages = ["0-10", "12-31"]', "", "layer 11 is mapped to no stage"),
    ('stages = ["0-31"]\nweights = "bf16"\nbatch = 2\ninput_tokens = 130000', "", "does not fit"),
    ('stages = ["0-31"]\ninput_tokens = 400000', "", "at most the model's 131,072-token context"),
    ("pp = 2", "[speculative]\nmethod = \"eagle\"\ndraft_tokens = 2\nacceptance = [1.2]", "speculative.acceptance[0] = 1.2"),
])
def test_bad_scenarios_exit_2_naming_the_field(tmp_path, deployment, extra, needle):
    f = tmp_path / "bad.toml"
    f.write_text(BASE.format(deployment=deployment, extra=extra))
    proc = _cli("run", str(f))
    assert proc.returncode == 2, proc.stdout
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_stage_that_does_not_fit_is_named():
    s = BASE.format(deployment='stages = ["0-1", "2-79"]\nweights = "bf16"', extra="").replace("llama-3.1-8b", "llama-3.1-70b")
    import tomllib
    from pathlib import Path
    from tokensim.scenarios.scenario import scenario_from_dict
    with pytest.raises(TokensimError, match=r"pipeline stage 1 \(layers 2-79\)"):
        run_scenario(scenario_from_dict(tomllib.loads(s), Path(".")))


def test_claim_alternatives_pair_each_scenario_with_its_own_table():
    """The non-study alternatives of sol-cs3 come back with the raw table they were built from (same name), and
    the three KV-design study tables are left out."""
    from tokensim.scenarios.claims import _alternatives
    from tokensim.scenarios.scenario import find_scenario, load_scenario

    s = load_scenario(find_scenario("sol-cs3"))
    got = _alternatives(s)
    tables = s.raw["alternatives"]
    assert len(got) == len([t for t in tables if not t.get("study")]) == len(tables) - 3
    for name, _, raw in got:
        assert raw.get("name") == name and not raw.get("study")
