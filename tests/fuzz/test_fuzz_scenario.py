"""Malformed scenario files: a scenario (and its alternatives) that predicts positive finite speeds, or one
TokensimError; `tokensim run FILE` exits 0 with a sensible prediction or 2 with one line."""
import json
import tomllib

from fuzz_support import DATA, FUZZ, assert_sensible_prediction, cli, damaged_bytes, mutated, serialize, structural, time_limit
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensim.errors import TokensimError
from tokensim.scenarios.scenario import load_scenario, run_scenario

SIMPLE = {
    "name": "fuzz", "title": "a small scenario", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "assumptions": ["batch 4"],
    "deployment": {"tp": 1, "pp": 1, "batch": 4, "input_tokens": 512, "output_tokens": 128, "weights": "fp8",
                   "kv": "bf16"},
    "speculative": {"method": "eagle", "draft_tokens": 2, "acceptance": [0.8, 0.7]},
    "constants": {"layer_latency_s": 1e-6, "hbm_bandwidth_fraction": 0.8},
    "workload": {"sequences": 100},
    "session": {"calls": 10, "output_tokens": 100, "fresh_input_tokens": 1000, "tool_s": 1.5},
    "claims": [{"id": "x1", "text": "fast", "quantity": "tokens_per_s_per_user", "value": 100, "unit": "tokens/s"}],
    "alternatives": [{"name": "bigger batch", "deployment": {"batch": 8}},
                     {"name": "floor", "constants": {"kernel_gap_s": 1e-6}}],
}
PREFILL = {"name": "pd", "model": "llama-3.1-8b", "hardware": "h100-sxm", "deployment": {"tp": 1, "batch": 8},
           "prefill": {"hardware": "h200", "deployment": {"tp": 1, "batch": 8}, "link_bandwidth_bytes_per_s": 50e9,
                       "link_latency_s": 1e-5}}
SHIPPED = [tomllib.loads((DATA / "scenarios" / "claims" / f"{n}.toml").read_text(encoding="utf-8"))
           for n in ("sol-afd", "kimi-k2.6-cs3", "benchmark-wafer")]
scenario_docs = st.sampled_from([SIMPLE, PREFILL, *SHIPPED]).flatmap(mutated)


def _library(path) -> None:
    with time_limit():
        try:
            s = load_scenario(path)
            variants = [s] + [a for _, a in s.alternatives()]
            predictions = [run_scenario(v) for v in variants]
        except TokensimError as exc:
            assert "\n" not in str(exc), str(exc)
            return
    for p in predictions:
        assert_sensible_prediction(json.loads(json.dumps(p.to_dict(), default=str)))


@FUZZ
@given(doc=scenario_docs)
def test_mutated_scenario_runs_or_names_the_field(tmp_path, doc):
    """Junk in any field of any table, missing and unknown fields, long lists: the scenario and every
    alternative predict sensibly, or loading or running it is one TokensimError."""
    path = tmp_path / "scenario.toml"
    path.write_text(serialize(doc, "toml"), encoding="utf-8")
    _library(path)


@settings(FUZZ, max_examples=100)
@given(doc=scenario_docs)
def test_mutated_scenario_through_run(tmp_path, doc):
    """`tokensim run FILE --json`: exit 0 with a sensible prediction, or 2 with one line."""
    path = tmp_path / "scenario.toml"
    path.write_text(serialize(doc, "toml"), encoding="utf-8")
    with time_limit():
        result = cli("run", str(path), "--json")
    if result.exit_code == 0:
        assert_sensible_prediction(json.loads(result.stdout))


@settings(FUZZ, max_examples=100)
@given(raw=st.one_of(damaged_bytes(serialize(SIMPLE, "toml")), structural("toml").map(str.encode)))
def test_damaged_scenario_bytes(tmp_path, raw):
    """Cut files, invalid UTF-8, NUL bytes, binary junk, nesting and dotted keys 100,000 deep, empty files."""
    path = tmp_path / "scenario.toml"
    path.write_bytes(raw)
    _library(path)
