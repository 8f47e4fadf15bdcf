"""The command line: tables and JSON on good input; one line, exit code 2, no traceback on bad input."""
import json
import subprocess
import sys

import pytest


def run(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "tokensim.cli", *args], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def test_predict_default_prints_table():
    proc = run("predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert "tokens/s per user" in proc.stdout and "decode step breakdown" in proc.stdout


def test_predict_json_has_required_keys():
    d = json.loads(run("predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--json").stdout)
    for key in ("tokens_per_s_per_user", "time_per_output_token_s", "ttft_s", "throughput_tokens_per_s", "chips",
                "memory_per_chip_bytes", "max_batch", "breakdown"):
        assert key in d
    assert all({"name", "time_s", "bound"} <= set(op) for op in d["breakdown"])


def test_models_and_hardware_lists():
    assert "kimi-k2.6" in run("models").stdout
    names = {h["name"] for h in json.loads(run("hardware", "--json").stdout)}
    assert {"h100-sxm", "cs-3", "groq-lpu", "mi300x"} <= names


@pytest.mark.parametrize("args, needle", [
    (("predict", "--model", "llama-3.1-8bb"), "llama-3.1-8b"),                       # close match listed
    (("predict", "--hardware", "h100-sxn"), "h100-sxm"),
    (("predict", "--batch", "-1"), "batch = -1"),
    (("predict", "--tp", "3"), "tp = 3"),
    (("predict", "--model", "llama-3.1-405b", "--tp", "1"), "does not fit"),
    (("predict", "--weights", "int3"), "weights = 'int3'"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    proc = run(*args, check_rc=2)
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_malformed_config_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096, "num_hidden_layers": "many"')
    proc = run("predict", "--model", str(bad), check_rc=2)
    assert "config.json" in proc.stderr and "Traceback" not in proc.stderr


def test_config_with_wrong_field_type(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": "many", "num_attention_heads": 32,
                               "vocab_size": 32000, "intermediate_size": 11008}))
    proc = run("predict", "--model", str(bad), check_rc=2)
    assert "num_hidden_layers" in proc.stderr
