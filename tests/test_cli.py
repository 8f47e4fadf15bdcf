"""The command line: tables and JSON on good input; one line, exit code 2, no traceback on bad input; choices that
--help lists and completion offers; the renamed token-count flags. Run in-process (typer's CliRunner on
`tokensim.cli.app`), except one smoke test of the installed console script and `python -m tokensim`."""
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokensim.cli import app, engine_names, engine_profile_names
from tokensim.perf.constants import ENGINES
from tokensim.specs.precision import COMPUTE_ORDER, PRECISIONS

try:
    runner = CliRunner(mix_stderr=False)     # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()                     # newer ones always keep them apart


def cli(*args: str, rc: int = 0, env: dict | None = None):
    result = runner.invoke(app, list(args), env=env)
    assert result.exit_code == rc, (result.exit_code, result.stdout[-2000:], result.stderr[-2000:], result.exception)
    return result


def assert_one_line(result, *needles: str) -> None:
    """Bad input: exit 2, one line on stderr starting `error:`, nothing on stdout, no traceback."""
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_predict_default_prints_table():
    out = cli("predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm").stdout
    assert "tokens/s per user" in out and "decode step breakdown" in out


def test_predict_json_has_required_keys_and_plain_values():
    d = json.loads(cli("predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--json",
                       "--weights", "FP8", "--engine", "vLLM").stdout)
    for key in ("tokens_per_s_per_user", "time_per_output_token_s", "ttft_s", "throughput_tokens_per_s", "chips",
                "memory_per_chip_bytes", "max_batch", "breakdown", "constants"):
        assert key in d
    assert all({"name", "time_s", "bound"} <= set(op) for op in d["breakdown"])
    assert d["deployment"]["weights"] == "fp8" and d["deployment"]["engine"] == "vllm"      # choices arrive as plain names


def test_models_and_hardware_lists():
    assert "kimi-k2.6" in cli("models").stdout
    names = {h["name"] for h in json.loads(cli("hardware", "--json").stdout)}
    assert {"h100-sxm", "cs-3", "groq-lpu", "mi300x"} <= names


@pytest.mark.parametrize("args, needles", [
    (("predict", "--model", "llama-3.1-8bb"), ["llama-3.1-8b"]),                  # close match listed
    (("predict", "--hardware", "h100-sxn"), ["h100-sxm"]),
    (("predict", "--batch", "-1"), ["batch = -1"]),
    (("predict", "--batch", "many"), ["--batch = 'many'", "integer"]),
    (("predict", "--tp", "3"), ["tp = 3"]),
    (("predict", "--model", "llama-3.1-405b", "--tp", "1"), ["does not fit"]),
    (("predict", "--weights", "int3"), ["--weights = 'int3'", "expected one of", "nvfp4"]),
    (("predict", "--kv", "fp9"), ["--kv = 'fp9'", "fp8"]),
    (("predict", "--compute", "fp6"), ["--compute = 'fp6'", "fp4"]),
    (("predict", "--engine", "tgi"), ["--engine = 'tgi'", "vllm"]),
    (("predict", "--input-tokens", "0"), ["input_tokens = 0"]),
    (("predict", "--input", "100", "--input-tokens", "200"), ["--input-tokens = 200", "--input"]),
    (("predict", "--no-such-flag"), ["--no-such-flag"]),
    (("plan", "--model", "llama-3.1-8b", "-H", "h100-sxm", "--objective", "fastest"), ["--objective = 'fastest'", "throughput"]),
    (("plan", "--model", "llama-3.1-8b"), ["--hardware"]),
    (("plan", "--model", "gpt-oss-120b", "-H", "b200", "--fusions", "allreduce"), ["--fusions = 'allreduce'"]),
    (("plan", "--model", "gpt-oss-120b", "-H", "b200", "--fusions", ","), ["--fusions = ','"]),
    (("plan", "--model", "gpt-oss-120b", "-H", "b200", "--engine-version", "latest"), ["engine_version = 'latest'"]),
    (("plan", "--model", "gpt-oss-120b", "-H", "b200", "--rate", "5", "--engine-version", "latest"),
     ["engine_version = 'latest'"]),
    (("compare", "gpt-oss-120b@b200:engine_version=x", "gpt-oss-120b@b200"), ["compare: engine_version = 'x'"]),
    (("compare", "gpt-oss-120b@b200:fusions=", "gpt-oss-120b@b200"), ["compare: fusions = ''"]),
    (("schema", "config"), ["'config'", "scenario, hardware, session"]),
    (("validate", "--runs", "runs.csv"), ["--runs = 'runs.csv'", "--serving"]),
    (("validate", "--serving", "--runs", "/no/such/folder/runs.csv"), ["--runs", "does not exist"]),
    (("no-such-command",), ["no-such-command"]),
])
def test_bad_input_is_one_line_exit_2(args, needles):
    assert_one_line(runner.invoke(app, list(args)), *needles)


def test_a_bug_is_one_line_exit_1_unless_debugging(monkeypatch):
    """An unexpected exception is reported in one line (exit 1); TOKENSIM_DEBUG=1 lets it through with its traceback."""
    from tokensim.output import render_catalog

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(render_catalog, "model_rows", broken)
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 1 and result.stderr.strip() == (
        "error: internal error, please report it: RuntimeError: boom (TOKENSIM_DEBUG=1 shows the traceback)")
    result = runner.invoke(app, ["models"], env={"TOKENSIM_DEBUG": "1"})
    assert isinstance(result.exception, RuntimeError)


def test_malformed_config_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096, "num_hidden_layers": "many"')
    assert_one_line(runner.invoke(app, ["predict", "--model", str(bad)]), "config.json")


def test_config_with_wrong_field_type(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": "many", "num_attention_heads": 32,
                               "vocab_size": 32000, "intermediate_size": 11008}))
    assert_one_line(runner.invoke(app, ["predict", "--model", str(bad)]), "num_hidden_layers")


def test_no_command_shows_the_help_and_no_error_line():
    result = runner.invoke(app, [])
    assert "Usage" in result.output and "predict" in result.output
    assert "error:" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)


def test_version_comes_from_the_installed_metadata():
    assert cli("--version").stdout.strip() == f"tokensim {version('tokensim')}"


def test_help_lists_every_choice():
    """--help shows the precision, compute and engine names the library accepts, and the objectives."""
    text = cli("predict", "--help", env={"COLUMNS": "300"}).stdout
    for name in [*PRECISIONS, *COMPUTE_ORDER, *engine_names()]:
        assert name in text, name
    assert "--input-tokens" in text and "--output-tokens" in text
    plan_help = cli("plan", "--help", env={"COLUMNS": "300"}).stdout
    assert all(o in plan_help for o in ("cost", "throughput", "speed"))


def test_engine_choices_follow_the_library():
    """Every engine the library names is a choice (one-word spellings, any case), and every choice is one it accepts."""
    from tokensim.deploy.deployment import Deployment

    choices = engine_names()
    assert set(engine_profile_names()) <= set(choices)
    assert {e.lower() for e in ENGINES if " " not in e and "(" not in e} <= set(choices)
    for name in choices:
        Deployment(engine=name)                    # refused input would raise TokensimError


@pytest.mark.parametrize("command", ["predict", "plan", "report", "fit"])
def test_old_spellings_are_hidden_and_output_never_names_a_file(command):
    """--input/--output still work on predict and plan but are not advertised; report and fit write with -o/--out."""
    text = cli(command, "--help").stdout
    words = set(text.replace("│", " ").replace(",", " ").split())
    assert "--input" not in words and "--output" not in words
    if command in ("report", "fit"):
        assert "--out" in words and "-o" in words


def test_old_token_flags_still_work():
    new = json.loads(cli("predict", "--input-tokens", "2048", "--output-tokens", "512", "--json").stdout)
    old = json.loads(cli("predict", "--input", "2048", "--output", "512", "--json").stdout)
    assert new["deployment"]["input_tokens"] == old["deployment"]["input_tokens"] == 2048
    assert new["deployment"]["output_tokens"] == old["deployment"]["output_tokens"] == 512
    assert new["tokens_per_s_per_user"] == old["tokens_per_s_per_user"]


@pytest.mark.parametrize("words, cword, expected", [
    ("tokensim predict --weights nv", 3, {"nvfp4"}),
    ("tokensim predict --engine ", 3, set(engine_names())),
    ("tokensim plan --objective ", 3, {"cost", "throughput", "speed"}),
    ("tokensim sch", 1, {"schema"}),
])
def test_shell_completion_offers_the_choices(words, cword, expected):
    result = runner.invoke(app, [], env={"_TOKENSIM_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)},
                           prog_name="tokensim")
    assert result.exit_code == 0
    assert set(result.stdout.split()) == expected


def test_schema_prints_json_schema():
    schema = pytest.importorskip("tokensim.inputs.schema", reason="tokensim.inputs.schema is not in this tree yet")
    for kind in ("scenario", "hardware", "session"):
        printed = json.loads(cli("schema", kind).stdout)
        assert printed == json.loads(json.dumps(schema.json_schema(kind)))
        assert isinstance(printed, dict) and printed


def _console_script() -> Path:
    script = Path(sys.executable).parent / ("tokensim.exe" if os.name == "nt" else "tokensim")
    if not script.exists():
        pytest.skip("the tokensim console script is not installed beside this Python (pip install .)")
    return script


def test_console_script_and_python_m_smoke():
    """The installed entry point and `python -m tokensim` run the same app in a fresh process."""
    proc = subprocess.run([str(_console_script()), "predict", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens_per_s_per_user"] > 0
    proc = subprocess.run([sys.executable, "-m", "tokensim", "predict", "--weights", "int3"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --weights = 'int3'") and "Traceback" not in proc.stderr


def test_simulate_refuses_fixed_lengths_beyond_the_context():
    """Llama-3.1-8B holds 131,072 tokens: 200,000 prompt tokens per request would have every request rejected, so
    the command says which flag and which limit, in one line, and exits 2 instead of printing an empty table."""
    r = cli("simulate", "--model", "llama-3.1-8b", "--rate", "1", "--requests", "5", "--input-tokens", "200000", rc=2)
    assert_one_line(r, "--input-tokens", "200000", "131072")


def test_simulate_says_how_many_requests_it_rejected_and_why(tmp_path):
    """A dataset whose second request is longer than the context: one of two requests is served, the other rejected
    as context_limit, and the table's note says so (1 of 2, for the two requests asked)."""
    data = tmp_path / "lengths.jsonl"
    data.write_text('{"input_tokens": 10, "output_tokens": 5}\n{"input_tokens": 200000, "output_tokens": 5}\n')
    r = cli("simulate", "--model", "llama-3.1-8b", "--rate", "1", "--requests", "2", "--dataset", str(data))
    assert "1 of 2 requests rejected (context_limit 1)" in r.stdout + r.stderr


def test_simulate_refuses_a_negative_seed():
    """numpy's generator takes only seeds >= 0: --seed -1 was an internal error (exit 1); now the flag is named in one
    line with exit 2, and the library says the same to a caller who passes seed=-1."""
    r = cli("simulate", "--model", "llama-3.1-8b", "--rate", "1", "--requests", "5", "--seed", "-1", rc=2)
    assert_one_line(r, "--seed", "-1")
    from tokensim.errors import TokensimError
    from tokensim.prediction.serving import LoadSpec, workload_for
    with pytest.raises(TokensimError, match="seed"):
        workload_for(LoadSpec(5, rate_per_s=1.0, seed=-1))


@pytest.mark.parametrize("flags, field", [(("--tp", "4"), "--tp"), (("--fusions", "allreduce_norm"), "--fusions"),
                                          (("--weights", "fp8"), "--weights"), (("--model", "qwen3-32b"), "--model"),
                                          (("--engine", "vllm"), "--engine"), (("--ep", "1"), "--ep")])
def test_simulate_refuses_deployment_flags_a_scenario_would_ignore(flags, field):
    """A scenario states its own deployment: a layout flag beside it is an error, not silently dropped, even when
    it repeats the flag's default (--engine vllm, --ep 1)."""
    assert_one_line(cli("simulate", "kimi-k2.6-gpu", "--rate", "1", "--requests", "10", *flags, rc=2), field,
                    "scenario")


def test_serve_and_bench_still_build_a_scenarios_engine_without_layout_flags():
    """`serve --emulate` and `bench --compare` build a scenario's engine with empty model and hardware (no layout
    flags exist on them); the refusal of ignored flags belongs to `simulate` alone (a new user's run caught it)."""
    from tokensim.cli_serving import _engine_from_args

    spec, name = _engine_from_args("kimi-k2.6-cs3", "", "", None, None, None, 1, 1, None, "bf16", "vllm")[:2]
    assert spec is not None and name


def test_plan_json_says_which_fusions_each_chip_ran():
    """`plan --fusions` on a Blackwell and a Hopper chip: every front point lists the fusions its chip's kernels run
    (moe_gemm1 is trtllm-gen's, Blackwell only), in one spelling."""
    out = json.loads(cli("plan", "--model", "gpt-oss-120b", "-H", "b200", "-H", "h100-sxm", "--max-chips", "2",
                         "--engine", "trtllm", "--engine-version", "1.1.0", "--fusions", "moe_gemm1,allreduce_norm",
                         "--json").stdout)
    ran = {(p["deployment"]["hardware"], tuple(p["deployment"]["fusions"])) for p in out["front"]}
    assert ran and ran <= {("b200", ("allreduce_norm", "moe_gemm1")), ("h100-sxm", ("allreduce_norm",))}


def test_p2p_flags_of_predict_simulate_and_plan():
    """GPU peer-to-peer switched on a PCIe box (tests/test_p2p.py holds the hand calculation); refused, one line,
    where no chip has a PCIe link."""
    on = json.loads(cli("predict", "-m", "qwen3-32b", "-H", "rtx-pro-6000", "--tp", "2", "--p2p", "--json").stdout)
    off = json.loads(cli("predict", "-m", "qwen3-32b", "-H", "rtx-pro-6000", "--tp", "2", "--no-p2p", "--json").stdout)
    assert on["tokens_per_s_per_user"] > off["tokens_per_s_per_user"]
    assert "with GPU peer-to-peer" in " ".join(on["assumptions"])
    sim = ("simulate", "-m", "qwen3-32b", "-H", "rtx-pro-6000", "--tp", "2", "--rate", "1", "--requests", "40", "--json")
    ttft_on = json.loads(cli(*sim, "--p2p").stdout)["ttft_s"]["mean"]
    ttft_off = json.loads(cli(*sim, "--no-p2p").stdout)["ttft_s"]["mean"]
    assert ttft_on < ttft_off
    assert_one_line(runner.invoke(app, ["predict", "-m", "qwen3-32b", "-H", "h100-sxm", "--tp", "2", "--p2p"]),
                    "--p2p", "h100-sxm", "no PCIe link")
    assert_one_line(runner.invoke(app, ["plan", "-m", "qwen3-32b", "-H", "h100-sxm", "--no-p2p"]),
                    "--no-p2p", "none of the hardware")


def test_a_scenario_states_p2p_and_its_alternatives_may_change_it(tmp_path):
    from tokensim.scenarios.scenario import load_scenario

    path = tmp_path / "box.toml"
    path.write_text('model = "qwen3-32b"\nhardware = "rtx-pro-6000"\np2p = true\n[deployment]\ntp = 2\n'
                    '[[alternatives]]\nname = "a VM"\np2p = false\n')
    s = load_scenario(path)
    assert s.hardware.link("scale_up").medium == "pcie"
    [(name, alt)] = s.alternatives()
    assert name == "a VM" and alt.hardware.link("scale_up").medium == "pcie-host"
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "qwen3-32b"\nhardware = "rtx-pro-6000"\np2p = "yes"\n[deployment]\ntp = 2\n')
    assert_one_line(runner.invoke(app, ["run", str(bad)]), str(bad), "p2p", "true or false")
    nvlink = tmp_path / "nvlink.toml"
    nvlink.write_text('model = "qwen3-32b"\nhardware = "h100-sxm"\np2p = false\n[deployment]\ntp = 2\n')
    assert_one_line(runner.invoke(app, ["run", str(nvlink)]), str(nvlink), "p2p", "no PCIe link")
