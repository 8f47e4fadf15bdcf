"""Malformed config.json files: the config reader returns a model with positive finite sizes, or one
TokensimError naming the file; `tokensim predict --model FILE` exits 0 with a sensible prediction or 2."""
import json
import math

import pytest
from fuzz_support import DATA, FUZZ, assert_sensible_prediction, cli, damaged_bytes, mutated, structural, time_limit
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensim.errors import TokensimError
from tokensim.specs.model.hf_config import load_config_file

BASES = {name: json.loads((DATA / "models" / f"{name}.json").read_text(encoding="utf-8")) for name in (
    "meta-llama__Llama-3.1-8B", "mistralai__Mixtral-8x7B-v0.1", "Qwen__Qwen3-Next-80B-A3B-Thinking",
    "deepseek-ai__DeepSeek-V3", "nvidia__Nemotron-H-56B-Base-8K", "openai__gpt-oss-20b", "moonshotai__Kimi-K3")}
configs = st.sampled_from(sorted(BASES)).flatmap(lambda name: mutated({k: v for k, v in BASES[name].items()
                                                                       if k != "_source"}, max_changes=2))


def _load(path):
    with time_limit():
        try:
            spec = load_config_file(path)
        except TokensimError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            return None
    assert 1 <= spec.n_layers <= 1000 and spec.hidden_size >= 1
    assert math.isfinite(spec.total_params) and spec.total_params > 0
    assert math.isfinite(spec.active_params) and 0 < spec.active_params <= spec.total_params
    return spec


@FUZZ
@given(doc=configs)
def test_mutated_config_loads_or_names_the_field(tmp_path, doc):
    """Junk values, missing and unknown fields, long lists: a sane ModelSpec or one line naming config.json."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    _load(path)


@settings(FUZZ, max_examples=100)
@given(doc=configs)
def test_mutated_config_through_predict(tmp_path, doc):
    """The same files through `tokensim predict --model FILE --json`: exit 0 with a real prediction, or 2."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with time_limit():
        result = cli("predict", "--model", str(path), "--hardware", "h100-sxm", "--json")
    if result.exit_code == 0:
        assert_sensible_prediction(json.loads(result.stdout))


@settings(FUZZ, max_examples=100)
@given(data=st.one_of(damaged_bytes(json.dumps(BASES["meta-llama__Llama-3.1-8B"])),
                      structural("json").map(str.encode)))
def test_damaged_config_bytes(tmp_path, data):
    """Cut files, invalid UTF-8, NUL bytes, binary junk, deep nesting, a list or a number at the top level."""
    path = tmp_path / "config.json"
    path.write_bytes(data)
    _load(path)


@pytest.mark.parametrize("layers", [1001, 10_000_000, 10**30, 1e400, float("nan")])
def test_layer_count_is_bounded(tmp_path, layers):
    """A config asking for more than 1,000 layers (or for infinitely many) is refused at once, saying so."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(BASES["meta-llama__Llama-3.1-8B"], num_hidden_layers=layers)))
    with time_limit(2), pytest.raises(TokensimError, match="num_hidden_layers") as err:
        load_config_file(path)
    assert "config.json" in str(err.value)
    if isinstance(layers, int) and layers > 1000:
        assert "at most 1,000 layers" in str(err.value)
