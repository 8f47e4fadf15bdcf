"""The verdict rule on synthetic claims: the base case's range decides; alternatives only add (issue 10)."""
import math

import pytest

from tokensim.scenarios.claims import Alt, Value, VerdictKind, _ratio_value, verdict

BASE = Value(100.0, 80.0, 125.0, "layer.floor takes 60 % of each step")
FASTER = Alt("speculative decoding (eagle, k=3: 2.75 tokens per step)", Value(250.0, 200.0, 310.0))
OUTSIDE = Alt("one user alone", Value(400.0, 320.0, 500.0), breaks=("shared large-batch lane",))


def test_a_claim_inside_the_base_range_is_consistent():
    v = verdict(110.0, "tokens_per_s_per_user", BASE, [FASTER])
    assert v.kind is VerdictKind.CONSISTENT and v.off_by == 0.0
    assert v.message.startswith("consistent:") and "also consistent" not in v.message


@pytest.mark.parametrize("claim,kind,off", [(150.0, VerdictKind.CLAIM_ABOVE_RANGE, 150 / 125 - 1),
                                            (60.0, VerdictKind.CLAIM_BELOW_RANGE, 60 / 80 - 1)])
def test_a_claim_outside_on_either_side_is_inconsistent_by_how_much(claim, kind, off):
    v = verdict(claim, "tokens_per_s_per_user", BASE, [])
    assert v.kind is kind
    assert v.off_by == pytest.approx(off)
    assert v.message.startswith("inconsistent:") and f"{abs(off):.0%}" in v.message


def test_an_alternative_adds_also_consistent_but_does_not_change_the_verdict():
    """250 tok/s lies only in the speculative alternative's range: the base still calls it inconsistent."""
    v = verdict(250.0, "tokens_per_s_per_user", BASE, [FASTER, OUTSIDE])
    assert v.kind is VerdictKind.CLAIM_ABOVE_RANGE
    assert v.also_consistent_if == (FASTER.label,)
    assert v.outside_conditions == ()
    assert "also consistent if speculative decoding" in v.message


def test_an_alternative_that_breaks_the_claims_conditions_is_reported_apart():
    v = verdict(450.0, "tokens_per_s_per_user", BASE, [FASTER, OUTSIDE])
    assert v.kind is VerdictKind.CLAIM_ABOVE_RANGE
    assert v.also_consistent_if == ()
    assert v.outside_conditions and "breaks: shared large-batch lane" in v.outside_conditions[0]
    assert "consistent only outside the claim's stated conditions" in v.message


def test_a_capacity_floor_is_met_by_any_claim_above_it():
    floor = Value(43.0, 38.7, 47.3)
    assert verdict(70.0, "min_chips", floor, []).kind is VerdictKind.CONSISTENT
    assert verdict(30.0, "min_chips", floor, []).kind is VerdictKind.CLAIM_BELOW_RANGE


def test_ratio_ranges_combine_the_two_sides_as_independent(monkeypatch):
    """a = 100 (80-125), b = 10 (9-12): the log half-widths add in quadrature, not end to end.
    Down: sqrt(ln(100/80)^2 + ln(12/10)^2); up: sqrt(ln(125/100)^2 + ln(10/9)^2)."""
    import tokensim.scenarios.claims as claims

    values = {"a": Value(100.0, 80.0, 125.0), "b": Value(10.0, 9.0, 12.0)}

    class S:
        def __init__(self, name):
            self.name = name

    a, b = S("a"), S("b")
    monkeypatch.setattr(claims, "quantity", lambda s, q: values[s.name])
    r = _ratio_value(a, b, "tokens_per_s_per_user")
    down = math.hypot(math.log(100 / 80), math.log(12 / 10))
    up = math.hypot(math.log(125 / 100), math.log(10 / 9))
    assert r.value == pytest.approx(10.0)
    assert r.low == pytest.approx(10.0 * math.exp(-down))
    assert r.high == pytest.approx(10.0 * math.exp(up))
    assert r.low > 80 / 12 and r.high < 125 / 9          # narrower than combining the opposite ends
