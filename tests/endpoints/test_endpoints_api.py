"""The package's public surface, the timing source, workloads and the hardware probe."""
import json
import math
import re
import tomllib

import pytest

import tokensim.endpoints as endpoints
from tokensim.endpoints import (
    FixedRateSource,
    TimingSource,
    TokenEvent,
    build_prompt,
    load_dataset,
    probe_hardware,
    write_hardware_file,
)
from tokensim.errors import TokensimError


def test_public_api_is_pinned():
    """__all__ is exactly the documented API, and every name in it exists."""
    assert sorted(endpoints.__all__) == [
        "BenchConfig", "BenchResult", "FixedRateSource", "HardwareProbe", "RequestRecord", "RequestSpec",
        "RunningEmulator", "TimingSource", "TokenEvent", "bench_async", "build_prompt", "create_app", "load_dataset",
        "probe_hardware", "run_bench", "run_emulator", "start_emulator", "write_hardware_file"]
    assert all(hasattr(endpoints, name) for name in endpoints.__all__)


def test_fixed_rate_source_timing():
    """First token ttft_s after arrival, then one every tpot_s; the last event is marked finished."""
    source = FixedRateSource(ttft_s=0.5, tpot_s=0.1)
    assert isinstance(source, TimingSource) and source.next_event_s() is None
    first = source.submit(1.0, input_tokens=10, output_tokens=3)
    assert source.next_event_s() == 1.5 and source.advance(1.4) == []
    events = source.advance(10.0)
    assert [(e.request_id, round(e.time_s, 9), e.tokens, e.finished) for e in events] == [
        (first, 1.5, 1, False), (first, 1.6, 1, False), (first, 1.7, 1, True)]
    assert source.next_event_s() is None and isinstance(events[0], TokenEvent)


@pytest.mark.parametrize("ttft_s, tpot_s", [(-1, 0.1), (0.1, 0), (math.nan, 0.1), (0.1, math.inf)])
def test_fixed_rate_source_refuses_bad_times(ttft_s, tpot_s):
    """Negative, zero (TPOT), NaN or infinite times are refused by name."""
    with pytest.raises(TokensimError, match="ttft_s|tpot_s"):
        FixedRateSource(ttft_s, tpot_s)


def test_prompt_has_one_word_per_token_and_differs_per_request():
    """A prompt of N tokens has N words from the single-token list; different seeds give different prompts."""
    prompt = build_prompt(300, seed=1)
    assert len(prompt.split()) == 300 and prompt == build_prompt(300, seed=1) and prompt != build_prompt(300, seed=2)
    assert set(prompt.split()) <= set(endpoints.workload.PROMPT_WORDS)


def test_dataset_reads_both_layouts(tmp_path):
    """Bench datasets (input_tokens/output_tokens) and traces (input_toks/output_toks) both load."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"input_tokens": 5, "output_tokens": 2}) + "\n\n"
                    + json.dumps({"request_id": "bench-0", "input_toks": 2358, "output_toks": 531,
                                  "arrival_time": 1.0}) + "\n")
    assert [(s.input_tokens, s.output_tokens) for s in load_dataset(path)] == [(5, 2), (2358, 531)]


@pytest.mark.parametrize("text, needle", [("{not json\n", "d.jsonl:1: not a JSON object"),
                                          ('{"input_tokens": 5}\n', "d.jsonl:1: expected input_tokens"),
                                          ('{"a": 1}\n{"input_tokens": 0, "output_tokens": 1}\n', "d.jsonl:1"),
                                          ('{"input_tokens": 3, "output_tokens": 1}\n{"input_tokens": 1.5, '
                                           '"output_tokens": 1}\n', "d.jsonl:2: input_tokens = 1.5"),
                                          ("\n", "no requests")])
def test_bad_dataset_names_file_and_line(tmp_path, text, needle):
    """A bad dataset line fails with the file, the line number and what was wrong."""
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    with pytest.raises(TokensimError, match=needle):
        load_dataset(path)


@pytest.fixture(scope="module")
def probed():
    return probe_hardware(array_bytes=16 * 2**20, repeats=2)


def test_probe_and_hardware_file(tmp_path, probed):
    """probe_hardware gives positive finite figures; the file parses as TOML in the catalog's layout, kind cpu,
    every source saying it was measured."""
    result = probed
    figures = [result.memory_bandwidth_bytes_per_s, result.memory_capacity_bytes,
               *(rate for _, rate in result.gemm_flops_per_s), *(rate for _, rate in result.bandwidth_tests_bytes_per_s)]
    assert all(math.isfinite(x) and x > 0 for x in figures)
    assert {fmt for fmt, _ in result.gemm_flops_per_s} >= {"fp32", "fp64"} and result.cores >= 1
    assert len(result.load_average_before) == 3 and result.cpu_model
    assert "bf16" in dict(result.gemm_flops_per_s) or "bf16" in dict(result.not_measured)
    data = tomllib.loads(write_hardware_file(tmp_path / "me.toml", result, name="my-box").read_text())
    assert (data["name"], data["kind"], data["family"]) == ("my-box", "cpu", "cpu")
    memory = data["memory"][0]
    assert memory["tier"] == "dram" and memory["bandwidth_bytes_per_s"] > 0 and memory["capacity_bytes"] > 0
    assert data["compute"]["fp32_flops_per_s"] > 0
    assert set(data["compute"]) <= {"fp32_flops_per_s", "bf16_flops_per_s", "source"}   # formats the catalog knows
    for table in (memory, data["compute"], data["system"]):
        assert table["source"].startswith("measured by tokensim hardware probe on ")
    assert "not datasheet peaks" in data["notes"] and data["probe"]["cores"] == result.cores


def test_hardware_file_name_is_checked(tmp_path, probed):
    """A file name with spaces or punctuation is refused by name."""
    with pytest.raises(TokensimError, match="name"):
        write_hardware_file(tmp_path / "x.toml", probed, name="my box!")


def _fake_python(tmp_path, body: str) -> str:
    """An executable standing in for an interpreter given to --torch-python (it ignores the script it is given)."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_torch_python_rate_is_read_and_written_as_bf16(tmp_path):
    """The bf16 rate another interpreter prints is recorded with how it was measured, and lands in the hardware
    file as bf16_flops_per_s."""
    from tokensim.endpoints.probe import _torch_bf16_in
    fake = _fake_python(tmp_path, "echo warming up; echo '{\"flops_per_s\": 1.5e12, \"torch\": \"9.9\", \"threads\": 1}'")
    rate, method = _torch_bf16_in(fake, 2)
    assert rate == 1.5e12 and "torch 9.9 bfloat16" in method and fake in method
    result = probe_hardware(array_bytes=2**20, repeats=1, torch_python=fake)
    assert dict(result.gemm_flops_per_s)["bf16"] == 1.5e12 and "bf16" not in dict(result.not_measured)
    data = tomllib.loads(write_hardware_file(tmp_path / "me.toml", result).read_text())
    assert data["compute"]["bf16_flops_per_s"] == 1.5e12


@pytest.mark.parametrize("body, needle", [
    ("echo 'No module named torch' >&2; exit 1", "exited with 1 .No module named torch"),
    ("echo hello", "printed 'hello"),
    ("echo '{\"flops_per_s\": -1}'", "measured -1"),
])
def test_torch_python_failures_are_one_line_errors(tmp_path, body, needle):
    """An interpreter without torch, one that prints something else, or a nonsense rate: an error that names the
    option and the interpreter; a path that does not exist likewise."""
    from tokensim.endpoints.probe import _torch_bf16_in
    fake = _fake_python(tmp_path, body)
    with pytest.raises(TokensimError, match="--torch-python") as err:
        _torch_bf16_in(fake, 1)
    assert re.search(needle, str(err.value)), str(err.value)
    with pytest.raises(TokensimError, match="no such file"):
        _torch_bf16_in(str(tmp_path / "missing"), 1)
