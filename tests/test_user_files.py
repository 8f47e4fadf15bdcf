"""A user's own files: hardware in YAML, an agent session in JSONL, a draft model for speculative decoding."""
import json
import subprocess
import sys

import pytest

import tokensim
from tokensim.scenarios.agent import Call, Session, load_session, session_time
from tokensim.deploy.deployment import SpecDecode
from tokensim.errors import TokensimError

YAML_CHIP = """
name: my-chip
display_name: My accelerator
vendor: Example
kind: gpu
family: my-family
memory:
  - tier: hbm
    capacity_bytes: 96.0e9
    bandwidth_bytes_per_s: 4.0e12
    source: https://example.org/datasheet
compute:
  bf16_flops_per_s: 1.0e15
  source: https://example.org/datasheet
power:
  tdp_w: 800
  idle_w: 120
  source: https://example.org/datasheet
"""


def test_yaml_hardware_file_predicts_and_is_never_executed(tmp_path):
    f = tmp_path / "chip.yaml"
    f.write_text(YAML_CHIP)
    p = tokensim.predict("llama-3.1-8b", str(f), batch=1)
    assert p.hardware == "my-chip" and p.tokens_per_s_per_user > 0
    assert p.bandwidth_bound_tokens_per_s_per_user == pytest.approx(4.0e12 / p.bytes_per_step_per_chip)
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(TokensimError, match="evil.yaml: not valid YAML"):
        tokensim.load_hardware(str(evil))


def test_yaml_hardware_with_a_missing_field_names_it(tmp_path):
    f = tmp_path / "chip.yaml"
    f.write_text(YAML_CHIP.replace("    bandwidth_bytes_per_s: 4.0e12\n", ""))
    proc = subprocess.run([sys.executable, "-m", "tokensim.cli", "predict", "--hardware", str(f)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "memory[0].bandwidth_bytes_per_s" in proc.stderr


def test_agent_session_time_by_hand(tmp_path):
    """Two calls on a deployment at 100 tokens/s per user with TTFT 0.2 s for its 1000-token prompt
    (0.2 ms per fresh input token): (500 x 0.2 ms + 400 / 100) + (1000 x 0.2 ms + 100 / 100) = 5.3 s of model
    time, plus 10 s + 2 s of tools."""
    f = tmp_path / "session.jsonl"
    f.write_text("\n".join(json.dumps(c) for c in [{"input_tokens": 500, "output_tokens": 400, "tool_s": 10},
                                                   {"input_tokens": 1000, "output_tokens": 100, "tool_s": 2}]))
    session = load_session(f)
    p = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=1, input_tokens=1000)
    t = session_time(session, p, "x")
    per_token = p.ttft_s / 1000
    expected_model = 500 * per_token + 400 / p.tokens_per_s_per_user + 1000 * per_token + 100 / p.tokens_per_s_per_user
    assert t.model_s == pytest.approx(expected_model)
    assert t.tool_s == 12 and t.total_s == pytest.approx(expected_model + 12)
    assert 0 < t.model_share < 1


def test_bad_session_line_is_named(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text('{"input_tokens": 5, "output_tokens": 10}\n{"input_tokens": 5\n')
    with pytest.raises(TokensimError, match="line 2"):
        load_session(f)


def test_draft_model_speculation():
    """A separate draft model: Llama-3.1-8B drafting for Llama-3.1-70B. Each step costs the verify pass plus
    k draft steps of the 8B; at a = 0.8, k = 4 the target emits 3.36 tokens per step, so one user goes faster."""
    spec = SpecDecode("draft", 4, (0.8,), draft_model="llama-3.1-8b")
    base = tokensim.predict("llama-3.1-70b", "h200", tp=4, batch=1)
    fast = tokensim.predict("llama-3.1-70b", "h200", tp=4, batch=1, spec=spec)
    assert fast.tokens_per_step == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert base.tokens_per_s_per_user < fast.tokens_per_s_per_user < fast.tokens_per_step * base.tokens_per_s_per_user


def test_sequences_per_s_per_kw_is_throughput_over_power():
    p = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=32, output_tokens=200)
    assert p.sequences_per_s_per_kw == pytest.approx(p.throughput_tokens_per_s / 200 / (p.power_w / 1000))
