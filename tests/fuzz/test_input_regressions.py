"""One regression test per class of bad input the fuzzing of issue "11,540 malformed inputs" found: each was
an uncaught exception, a hang or a nonsense result, and is now one TokensimError (exit 2) naming the file,
the field, the value and what was expected, in bounded time."""
import json
import time
import tomllib

import pytest
from fuzz_support import DATA, cli, time_limit

import tokensim.inputs
from tokensim.errors import TokensimError
from tokensim.inputs.files import MAX_DEPTH, read_mapping
from tokensim.inputs.schema import json_schema
from tokensim.scenarios.agent import load_session
from tokensim.scenarios.scenario import load_scenario, run_scenario
from tokensim.specs.hardware.loader import load_hardware_file
from tokensim.specs.model.hf_config import load_config_file

CHIP = (DATA / "hardware" / "h100-sxm.toml").read_text(encoding="utf-8")
LLAMA = json.loads((DATA / "models" / "meta-llama__Llama-3.1-8B.json").read_text(encoding="utf-8"))
SCENARIO = 'name = "s"\nmodel = "llama-3.1-8b"\nhardware = "h100-sxm"\n[deployment]\ntp = 1\nbatch = 2\n'


def _refused(path, loader, *needles, within_s: float = 2.0) -> str:
    """`loader(path)` raises one TokensimError line that names the file and each needle, within `within_s` of this
    process's CPU time (the work the input costs, whatever else the machine runs; a hang is cut by the wall-clock
    `time_limit`)."""
    start = time.process_time()
    with time_limit(within_s + 5), pytest.raises(TokensimError) as err:
        loader(path)
    message = str(err.value)
    assert time.process_time() - start < within_s, message
    assert "\n" not in message and str(path) in message, message
    for needle in needles:
        assert needle in message, message
    return message


def test_non_utf8_file_names_the_byte_offset(tmp_path):
    """Was UnicodeDecodeError: bytes that are not UTF-8 are reported with their offset."""
    for name, loader in (("chip.toml", load_hardware_file), ("config.json", load_config_file),
                         ("s.toml", load_scenario), ("s.jsonl", load_session)):
        path = tmp_path / name
        path.write_bytes(b'name = "caf\xe9"\n')
        _refused(path, loader, "byte 0xe9 at offset 11 is not UTF-8")


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400", "2.5", "true", '"32"'])
def test_integer_field_that_is_not_an_integer(tmp_path, literal):
    """Was OverflowError/ValueError (int(inf)) or a silent float: num_hidden_layers must be a whole number."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA).replace('"num_hidden_layers": 32', f'"num_hidden_layers": {literal}'))
    _refused(path, load_config_file, "num_hidden_layers = ", "expected an integer")


@pytest.mark.parametrize("literal", ["inf", "nan", "1e400", "2.5", "true", '"8"', "[8]"])
def test_scenario_integer_field_that_is_not_an_integer(tmp_path, literal):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("tp = 1", f"tp = {literal}"))
    _refused(path, load_scenario, "deployment.tp = ", "expected an integer >= 1")


def test_memory_that_is_not_a_list_of_tables(tmp_path):
    """Was AttributeError: `memory: hbm` in a YAML hardware file."""
    path = tmp_path / "chip.yaml"
    path.write_text("name: x\nkind: gpu\nmemory: hbm\ncompute: {bf16_flops_per_s: 1.0e+15}\n")
    _refused(path, load_hardware_file, "memory = 'hbm': expected a list of [[memory]] tables")


def test_hardware_that_is_a_number_in_a_scenario(tmp_path):
    """Was TypeError (a path joined with an int): `hardware = 5`."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace('hardware = "h100-sxm"', "hardware = 5"))
    _refused(path, load_scenario, "hardware = 5: expected a catalog name or a hardware file path")


@pytest.mark.parametrize("name, text", [
    ("deep.json", "[" * 100_000 + "]" * 100_000),
    ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000),
    ("dotted.toml", "a" + ".a" * 100_000 + " = 1"),                 # tomllib: quadratic memory, GBs
    ("deep.yaml", "a:\n" + "- " * 100_000 + "x\n"),
    ("flow.yaml", "a: " + "[" * 50_000 + "]" * 50_000),
])
def test_nesting_100000_levels_deep(tmp_path, name, text):
    """Was RecursionError (or, for TOML dotted keys, gigabytes): refused before any parser recurses."""
    path = tmp_path / name
    path.write_text(text)
    _refused(path, read_mapping, str(MAX_DEPTH))


def test_yaml_alias_bomb(tmp_path):
    """Was 51 s and 3 GB from 688 bytes: YAML aliases are refused outright."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]")
    path = tmp_path / "chip.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 700
    _refused(path, load_hardware_file, "alias *a", within_s=0.5)


def test_ten_million_layers(tmp_path):
    """Was 99 s and 1.7 GB: a config.json with num_hidden_layers = 10,000,000 is refused at once."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(LLAMA, num_hidden_layers=10_000_000)))
    _refused(path, load_config_file, "num_hidden_layers = 10000000", "at most 1,000 layers", within_s=0.5)


def test_hybrid_pattern_of_a_million_layers(tmp_path):
    """The same bound when the layer count comes from Nemotron-H's hybrid_override_pattern."""
    cfg = json.loads((DATA / "models" / "nvidia__Nemotron-H-56B-Base-8K.json").read_text(encoding="utf-8"))
    cfg.pop("num_hidden_layers", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg, hybrid_override_pattern="M-" * 500_000)))
    _refused(path, load_config_file, "hybrid_override_pattern", "at most 1,000", within_s=1.0)


@pytest.mark.parametrize("old, new, field", [
    ("usd_per_hour = 2.99", "usd_per_hour = -2.99", "price.usd_per_hour = -2.99"),
    ("tdp_w = 700", "tdp_w = -700", "power.tdp_w = -700"),
    ("tdp_w = 700", "tdp_w = nan", "power.tdp_w = nan"),
    ("idle_w = 105", "idle_w = 7000", "power.idle_w = 7000.0: expected at most tdp_w"),
    ("capacity_bytes = 80e9", "capacity_bytes = inf", "memory[0].capacity_bytes = inf"),
    ("bf16_flops_per_s = 989.4e12", "bf16_flops_per_s = 1e-300", "compute.bf16_flops_per_s = 1e-300"),
])
def test_negative_or_non_finite_hardware_figures(tmp_path, old, new, field):
    """Was accepted and printed a negative $/Mtok (or inf/NaN speeds): every figure is positive and finite."""
    path = tmp_path / "chip.toml"
    assert old in CHIP
    path.write_text(CHIP.replace(old, new))
    _refused(path, load_hardware_file, field)


@pytest.mark.parametrize("capacity", ["1e6", "200e9"])
def test_a_driver_capacity_that_does_not_match_the_datasheet_names_the_file(tmp_path, capacity):
    """Was a TokensimError without the file's name (found by the hardware fuzz test): a capacity_bytes that is
    valid alone (1 MB) left the H100's visible_capacity_bytes = 85,520,809,984 (81,559 MiB) outside a factor 1.5
    of it, and only the HardwareSpec noticed, after the file's checks. 200e9: 85.5e9 is below 200e9 / 1.5."""
    path = tmp_path / "chip.toml"
    assert "capacity_bytes = 80e9" in CHIP
    path.write_text(CHIP.replace("capacity_bytes = 80e9", f"capacity_bytes = {capacity}"))
    _refused(path, load_hardware_file, "visible_capacity_bytes = 85520809984", "within a factor 1.5")


@pytest.mark.parametrize("value", ["nan", "inf", "-0.5", "true", '"fast"'])
def test_non_finite_or_negative_constants(tmp_path, value):
    """Was NaN tokens/s: a [constants] value must be a finite number >= 0."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO + f"[constants]\nhbm_bandwidth_fraction = {value}\n")
    _refused(path, load_scenario, "constants.hbm_bandwidth_fraction = ")


def test_unknown_constant_is_named_with_the_close_match(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO + "[constants]\nhbm_bandwith_fraction = 0.8\n")
    _refused(path, load_scenario, "constants.hbm_bandwith_fraction = 0.8 (unknown field)",
             "did you mean hbm_bandwidth_fraction?")


def test_a_good_constant_still_changes_the_prediction(tmp_path):
    """The checks refuse nonsense only: a finite [constants] value still overrides the shipped one."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO + "[constants]\nhbm_bandwidth_fraction = 0.3\n")
    base_path = tmp_path / "base.toml"
    base_path.write_text(SCENARIO)
    slow, base = run_scenario(load_scenario(path)), run_scenario(load_scenario(base_path))
    assert 0 < slow.tokens_per_s_per_user < base.tokens_per_s_per_user


def test_yaml_that_would_run_code_is_refused(tmp_path):
    """Loading never executes anything: a python tag is a YAML error, not a call."""
    marker = tmp_path / "pwned"
    path = tmp_path / "chip.yaml"
    path.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    _refused(path, load_hardware_file, "not valid YAML")
    assert not marker.exists()


def test_integer_literal_too_long_to_convert(tmp_path):
    """Was ValueError (Python's 4,300-digit limit) escaping the TOML and JSON parsers."""
    for name in ("s.toml", "config.json"):
        path = tmp_path / name
        path.write_text("x = 1" + "0" * 5000 if name.endswith(".toml") else '{"x": 1' + "0" * 5000 + "}")
        _refused(path, read_mapping, "not valid")


def test_stage_range_beyond_the_model_is_refused_without_building_it(tmp_path):
    """A stage "0-1000000000" was expanded into a billion-entry list before being checked."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("tp = 1", 'stages = ["0-1000000000"]'))
    _refused(path, lambda p: run_scenario(load_scenario(p)), "deployment.stages[0]", "0-31", within_s=1.0)


def test_session_calls_bounded(tmp_path):
    """A session of more than 100,000 calls is refused (each call is one prediction's worth of arithmetic)."""
    path = tmp_path / "s.jsonl"
    path.write_text('{"output_tokens": 1}\n' * 100_001)
    _refused(path, load_session, "more than 100,000 calls", within_s=5.0)


def test_message_names_file_field_value_and_expectation_and_counts_the_rest(tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text(CHIP.replace("tdp_w = 700", "tdp_w = -1\ntdpw = 5").replace("\nchips = 8", "\nchips = 8.5"))
    message = _refused(path, load_hardware_file)
    assert message.startswith(f"{path}: ")
    assert " = " in message and ": expected " in message and message.endswith("(and 2 more)"), message


def test_cli_exits_2_with_one_line_for_each_class(tmp_path, monkeypatch):
    """Through the command: exit 2, one line on stderr, nothing on stdout (checked by `cli`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chip.yaml").write_text("name: x\nkind: gpu\nmemory: hbm\ncompute: {bf16_flops_per_s: 1.0e+15}\n")
    (tmp_path / "config.json").write_text(json.dumps(dict(LLAMA, num_hidden_layers=10_000_000)))
    (tmp_path / "s.toml").write_text(SCENARIO + "[constants]\nhbm_bandwidth_fraction = nan\n")
    (tmp_path / "calls.jsonl").write_bytes(b'{"output_tokens": 5}\n\xff\n')
    for args, needle in [(("predict", "--hardware", "chip.yaml"), "memory = 'hbm'"),
                         (("predict", "--model", "config.json"), "at most 1,000 layers"),
                         (("run", "s.toml"), "constants.hbm_bandwidth_fraction = nan"),
                         (("agent", "cs3-capacity", "--session", "calls.jsonl"), "is not UTF-8")]:
        result = cli(*args)
        assert result.exit_code == 2 and needle in result.stderr, (args, result.stderr)


@pytest.mark.parametrize("kind", ["scenario", "hardware", "session"])
def test_json_schema_of_each_kind(kind):
    """The schema comes from the checking models: strict objects, units in the descriptions."""
    schema = json_schema(kind)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert json.loads(json.dumps(schema)) == schema
    required = {"scenario": {"hardware"}, "hardware": {"name", "kind", "memory", "compute"}, "session": {"calls"}}[kind]
    assert required <= set(schema["required"])


def test_json_schema_refuses_an_unknown_kind():
    with pytest.raises(TokensimError, match="kind = 'model': expected one of scenario, hardware, session"):
        json_schema("model")


def test_every_shipped_file_passes_its_model():
    """The checks accept every file tokensim ships (and read them as before)."""
    from tokensim.scenarios.scenario import shipped_scenarios
    from tokensim.specs.hardware.catalog import catalog

    assert len(catalog()) >= 20
    for path in shipped_scenarios().values():
        s = load_scenario(path)
        assert s.raw == tomllib.loads(path.read_text(encoding="utf-8"))
        s.alternatives()


def test_public_names_of_the_inputs_package():
    assert tokensim.inputs.__all__ == ["read_mapping", "read_json_lines", "json_schema"]
