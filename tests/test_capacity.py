"""Capacity planning (issue 12): the cheapest deployment serving a rate within TTFT and TPOT objectives, decided by
the simulator near the knee."""
import pytest

import tokensim
from tokensim.errors import TokensimError
from tokensim.plan.capacity import CapacityRequest, capacity_plan


@pytest.fixture(scope="module")
def planned():
    req = CapacityRequest(tokensim.load_model("llama-3.1-8b"), (tokensim.load_hardware("h100-sxm"),), rate_per_s=6.0,
                          slo_ttft_s=1.0, slo_tpot_s=0.05, input_tokens=1000, output_tokens=200, max_chips_per_replica=2,
                          requests=600)
    return req, *capacity_plan(req)


def test_the_answer_meets_the_objectives_in_the_simulator(planned):
    req, best, checked = planned
    assert best is not None and best.simulated["meets"]
    assert best.simulated["ttft_p99_s"] <= req.slo_ttft_s and best.simulated["tpot_mean_s"] <= req.slo_tpot_s
    assert best.usd_per_hour == min(c.usd_per_hour for c in checked if c.simulated["meets"])


def test_one_replica_fewer_misses_the_objectives_or_the_answer_has_one(planned):
    """The knee: the answer's replica count is the least the simulator accepts (within the steps it tries)."""
    req, best, _ = planned
    if best.replicas > 1:
        fewer = [t for t in best.simulated["tried"] if t["replicas"] == best.replicas - 1]
        assert fewer and not fewer[0]["meets"]


def test_a_rate_far_beyond_reach_is_refused_with_the_reason():
    req = CapacityRequest(tokensim.load_model("llama-3.1-70b"), (tokensim.load_hardware("a100-sxm"),), rate_per_s=5.0,
                          slo_ttft_s=0.001, slo_tpot_s=0.001, max_chips_per_replica=8)
    with pytest.raises(TokensimError, match="even unloaded"):
        capacity_plan(req)


@pytest.mark.parametrize("field", ["rate_per_s", "slo_ttft_s", "slo_tpot_s"])
def test_bad_objectives_name_the_field(field):
    kw = dict(rate_per_s=1.0, slo_ttft_s=1.0, slo_tpot_s=0.05)
    kw[field] = float("nan")
    with pytest.raises(TokensimError, match=field):
        CapacityRequest(tokensim.load_model("llama-3.1-8b"), (tokensim.load_hardware("h100-sxm"),), **kw)


def test_a_rate_beyond_the_largest_simulated_fleet_is_refused_before_simulating():
    """1e12 requests/s of Llama-3.1-8B needs billions of H100 replicas: the plan used to build that fleet in the
    simulator and never returned; now it says how many replicas the rate needs against the 1,000 it simulates.
    A lower bound by hand: one H100 at most streams its 3.35 TB/s over 16 GB of weights ~ 210 steps/s, and even at a
    batch of 4,096 that is < 1e6 tokens/s, < 1e4 requests/s of 100 output tokens, so >= 1e8 replicas."""
    from tokensim.plan.capacity import MAX_REPLICAS
    req = CapacityRequest(tokensim.load_model("llama-3.1-8b"), (tokensim.load_hardware("h100-sxm"),), rate_per_s=1e12,
                          slo_ttft_s=2.0, slo_tpot_s=0.05, input_tokens=100, output_tokens=100, max_chips_per_replica=1)
    with pytest.raises(TokensimError, match="rate") as err:
        capacity_plan(req)
    fewest = int(str(err.value).split("is ")[-1].split(" ")[0].replace(",", ""))
    assert fewest >= 1e8 > MAX_REPLICAS


def test_screened_candidates_carry_the_release_and_each_chips_fusions():
    """`plan --rate --fusions ... --engine-version ...`: every screened replica is the deployment the simulator then
    serves, so it must hold the release and the fusions its chip runs (moe_gemm1 on the B200, not on the H100);
    a bad release is refused when the request is built, naming the field."""
    from tokensim.plan.capacity import screen
    req = CapacityRequest(tokensim.load_model("gpt-oss-120b"),
                          (tokensim.load_hardware("b200"), tokensim.load_hardware("h100-sxm")), rate_per_s=2.0,
                          slo_ttft_s=2.0, slo_tpot_s=0.05, engine="trtllm", engine_version="1.1.0",
                          fusions=("moe_gemm1", "allreduce_norm"), max_chips_per_replica=2)
    assert req.fusions == ("allreduce_norm", "moe_gemm1")          # one spelling: sorted, as Deployment keeps it
    found = {c.hardware: c.deployment for c in screen(req)}
    assert set(found) == {"b200", "h100-sxm"}
    assert found["b200"].fusions == ("allreduce_norm", "moe_gemm1") and found["h100-sxm"].fusions == ("allreduce_norm",)
    assert all(d.engine_version == "1.1.0" for d in found.values())
    with pytest.raises(TokensimError, match="engine_version"):
        CapacityRequest(req.model, req.hardware, rate_per_s=1.0, slo_ttft_s=1.0, slo_tpot_s=0.05, engine_version="new")
