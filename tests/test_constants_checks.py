"""Constants a user sets ([constants] in a scenario, an overlay) are checked where they are built: an achieved share
of a peak is in (0, 1]. CI's fuzz run found `hbm_bandwidth_fraction = 0` in a scenario reaching a division in the
step cost (ZeroDivisionError, a traceback) instead of one message naming the field."""
import pytest

from tokensim import predict
from tokensim.errors import TokensimError
from tokensim.perf.constants import SHARES, default_table
from tokensim.specs.hardware.catalog import load_hardware


@pytest.mark.parametrize("name", SHARES)
@pytest.mark.parametrize("value", [0.0, 1.5])
def test_a_share_outside_0_1_is_one_message_naming_it(name, value):
    family = load_hardware("h100-sxm").family
    table = default_table().with_overlay({family: {"default": {name: value}}})
    with pytest.raises(TokensimError) as err:
        predict("llama-3.1-8b", "h100-sxm", batch=1, constants=table)
    assert f"constants.{name}" in str(err.value) and "(0, 1]" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_share_of_one_is_accepted():
    family = load_hardware("h100-sxm").family
    table = default_table().with_overlay({family: {"default": {"hbm_bandwidth_fraction": 1.0}}})
    assert predict("llama-3.1-8b", "h100-sxm", batch=1, constants=table).tokens_per_s_per_user > 0


def test_a_fitted_table_from_an_older_release_still_predicts(tmp_path, monkeypatch):
    """A fitted table a user wrote before 2026-12-05 holds `moe_load_imbalance`, a constant this version replaced by
    `expert_load_cv`. The name is not used any more (no value of it reaches a prediction), and neither a prediction
    nor its evidence listing fails on it (it raised AttributeError in `predict --json`)."""
    old = tmp_path / "fitted.toml"
    old.write_text('date = "2026-12-04"\nrows = 126\n[constants.default.default]\nmoe_load_imbalance = 1.99\n'
                   'hbm_bandwidth_fraction = 0.8\n', encoding="utf-8")
    monkeypatch.setenv("TOKENSIM_FITTED", str(old))
    table = default_table()
    hw = load_hardware("h100-sxm")
    why = table.evidence(hw.family, hw.kind, "default", hw.vendor, hw.name)
    assert "moe_load_imbalance" not in why and why["hbm_bandwidth_fraction"].startswith("fitted by")
    assert predict("deepseek-v3", "h200", tp=8, ep=8, batch=8, constants=table).tokens_per_s_per_user > 0
