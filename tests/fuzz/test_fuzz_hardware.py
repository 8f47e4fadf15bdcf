"""Malformed hardware files (TOML, YAML, JSON): a HardwareSpec whose figures are positive and finite, or one
TokensimError naming the file; `tokensim predict --hardware FILE` exits 0 with a sensible prediction or 2."""
import json
import math
import tomllib

from fuzz_support import DATA, FUZZ, assert_sensible_prediction, cli, damaged_bytes, mutated, serialize, structural, time_limit
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensim.errors import TokensimError
from tokensim.specs.hardware.loader import load_hardware_file

BASES = [tomllib.loads((DATA / "hardware" / f"{name}.toml").read_text(encoding="utf-8"))
         for name in ("h100-sxm", "cs-3", "groq-lpu")]
FORMATS = st.sampled_from(["toml", "yaml", "json"])
hardware_docs = st.sampled_from(BASES).flatmap(mutated)


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _load(path):
    with time_limit():
        try:
            hw = load_hardware_file(path)
        except TokensimError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            return None
    assert hw.memory and all(_positive(t.capacity_bytes) and _positive(t.bandwidth_bytes_per_s) for t in hw.memory)
    assert hw.flops_per_s and all(_positive(v) for _, v in hw.flops_per_s)
    assert all(_positive(k.bandwidth_bytes_per_s) and math.isfinite(k.latency_s) and k.latency_s >= 0 for k in hw.links)
    assert math.isfinite(hw.tdp_w) and 0 <= hw.idle_w <= hw.tdp_w
    assert all(v is None or _positive(v) for v in (hw.price_usd_per_hour, hw.purchase_usd, hw.system_power_w))
    assert hw.chips_per_system >= 1 and any(t.holds_weights for t in hw.memory)
    return hw


@FUZZ
@given(doc=hardware_docs, fmt=FORMATS)
def test_mutated_hardware_file_loads_or_names_the_field(tmp_path, doc, fmt):
    """Junk values (NaN, inf, negative, huge, text, lists), missing and unknown fields, long lists."""
    path = tmp_path / f"chip.{fmt}"
    path.write_text(serialize(doc, fmt), encoding="utf-8")
    _load(path)


@settings(FUZZ, max_examples=100)
@given(doc=hardware_docs, fmt=FORMATS)
def test_mutated_hardware_through_predict(tmp_path, doc, fmt):
    """`tokensim predict --hardware FILE --json`: a prediction with positive speeds and no negative figure
    (price, power, energy), or exit 2 with one line."""
    path = tmp_path / f"chip.{fmt}"
    path.write_text(serialize(doc, fmt), encoding="utf-8")
    with time_limit():
        result = cli("predict", "--model", "llama-3.1-8b", "--hardware", str(path), "--json")
    if result.exit_code == 0:
        assert_sensible_prediction(json.loads(result.stdout))


@settings(FUZZ, max_examples=100)
@given(fmt=FORMATS, data=st.data())
def test_damaged_hardware_bytes(tmp_path, fmt, data):
    """Cut files, invalid UTF-8, NUL bytes, binary junk, deep nesting, YAML aliases, empty files."""
    text = serialize(BASES[0], fmt)
    raw = data.draw(st.one_of(damaged_bytes(text), structural(fmt).map(str.encode)))
    path = tmp_path / f"chip.{fmt}"
    path.write_bytes(raw)
    _load(path)
