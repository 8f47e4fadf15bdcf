"""Sweeps of serving simulations (tokensim.sim.sweep, `tokensim simulate --workers/--ray`): the same summaries,
byte for byte, whichever backend runs the points (this process, a process pool, a local Ray instance); bad input is
one line and exit 2."""
import json
import sys

import pytest
from typer.testing import CliRunner

from tokensim.cli import app
from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.prediction.serving import LoadSpec, engine_for
from tokensim.sim.sweep import SweepPoint, run_sweep
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.model.catalog import load_model

try:
    runner = CliRunner(mix_stderr=False)     # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()                     # newer ones always keep them apart

SWEEP_ARGS = ("simulate", "--rate", "1,2", "--requests", "40", "--input-tokens", "512", "--output-tokens", "64", "--json")


@pytest.fixture(scope="module")
def points() -> list[SweepPoint]:
    """Three rates on one vLLM replica (the cost model's timer), and the highest rate again with max_num_seqs 4."""
    spec = engine_for(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Deployment(engine="vllm"))
    loads = [LoadSpec(60, rate_per_s=r, input_tokens=512, output_tokens=64, seed=7) for r in (1.0, 4.0, 16.0)]
    return [SweepPoint(spec, ld, slo_ttft_s=0.5, slo_tpot_s=0.05) for ld in loads] + [
        SweepPoint(spec, loads[-1], scheduler={"max_num_seqs": 4})]


@pytest.fixture(scope="module")
def in_process(points) -> str:
    return json.dumps(run_sweep(points, workers=1), sort_keys=True)


def test_process_pool_gives_the_in_process_summaries(points, in_process):
    """Two worker processes return, in the points' order, exactly the summaries one process computes; the scheduler
    setting of a point is applied (max_num_seqs 4 queues requests that 1024 would run)."""
    pooled = run_sweep(points, workers=2)
    assert json.dumps(pooled, sort_keys=True) == in_process
    assert [s["requests"] for s in pooled] == [60] * 4 and "series" not in pooled[0]
    assert pooled[3]["ttft_s"]["mean"] > 2 * pooled[2]["ttft_s"]["mean"]


def test_local_ray_gives_the_in_process_summaries(points, in_process):
    """A Ray instance started for the sweep (ray_address "local") returns the same summaries byte for byte, calls
    progress once per point, and is shut down afterwards."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tokensim[ray]')")
    ticks = []
    on_ray = run_sweep(points, workers=2, ray_address="local", progress=lambda: ticks.append(1))
    assert json.dumps(on_ray, sort_keys=True) == in_process
    assert len(ticks) == len(points) and not ray.is_initialized()


def test_a_failing_point_stops_the_pool_with_its_own_error(points):
    """A point the simulator refuses raises its TokensimError in the caller, not a pool error."""
    bad = SweepPoint(points[0].engine, LoadSpec(10))              # neither a rate nor clients
    with pytest.raises(TokensimError, match="load"):
        run_sweep([points[0], bad], workers=2)


def test_unknown_scheduler_setting_is_refused_when_the_point_is_built(points):
    """A setting the scheduler does not have fails at once, naming it and listing the ones it has."""
    with pytest.raises(TokensimError, match="max_num_seq'.*max_num_seqs"):
        SweepPoint(points[0].engine, points[0].load, scheduler={"max_num_seq": 4})


def test_cli_sweep_with_two_workers_prints_what_one_prints():
    """`simulate --rate 1,2 --workers 2 --json` is byte-identical to the sequential run."""
    one = runner.invoke(app, [*SWEEP_ARGS, "--workers", "1"])
    two = runner.invoke(app, [*SWEEP_ARGS, "--workers", "2"])
    assert one.exit_code == two.exit_code == 0, (one.stderr, two.stderr)
    assert two.stdout == one.stdout
    assert [s["load"]["rate_per_s"] for s in json.loads(one.stdout)["sweep"]] == [1.0, 2.0]


def test_cli_ray_without_ray_installed_is_one_line_exit_2(monkeypatch):
    """--ray when `import ray` fails: one line on stderr naming --ray and the extra to install, exit 2."""
    monkeypatch.setitem(sys.modules, "ray", None)               # makes `import ray` raise ImportError
    result = runner.invoke(app, [*SWEEP_ARGS, "--ray", "local"])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ray"), result.stderr
    assert "pip install 'tokensim[ray]'" in lines[0] and "Traceback" not in result.output and result.stdout == ""
