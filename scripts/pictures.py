"""Regenerate the pictures in docs/ (PNG and SVG each) and docs/report-example.html.

Run: python scripts/pictures.py
"""
from __future__ import annotations

from pathlib import Path

from tokensim.output import plots
from tokensim.output.plot_data import speed_vs_batch_points, ttft_vs_depth_points
from tokensim.output.report import write_report
from tokensim.plan.compare import parse_setup, waterfall
from tokensim.plan.search import PlanRequest, plan
from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.model.catalog import load_model

DOCS = Path(__file__).resolve().parent.parent / "docs"
CHIPS = ["a100-sxm", "h100-sxm", "h200", "b200", "mi300x", "mi355x", "groq-lpu", "cs-3"]


def plan_fronts(model: str, hardware: list[str]) -> list[dict]:
    """The Pareto front `tokensim plan` finds on up to 8 chips of each hardware, marked with its best (cost) point."""
    points = []
    for hw in hardware:
        r = plan(PlanRequest(load_model(model), (load_hardware(hw),), max_chips=8, input_tokens=1024, output_tokens=256))
        points += [dict(r.point(i), hardware=hw, front=True, best=(i == r.best)) for i in r.front]
    return points


def main() -> None:
    s = load_scenario(find_scenario("kimi-k2.6-cs3"))
    p = run_scenario(s)
    plots.breakdown(p, DOCS / "breakdown-kimi-k2.6-cs3.png")
    plots.roofline(p, s.hardware, DOCS / "roofline-kimi-k2.6-cs3.png")
    batch = speed_vs_batch_points("llama-3.1-70b", CHIPS, weights="fp8")
    plots.speed_vs_batch(batch, DOCS / "speed-vs-batch-llama-3.1-70b.png")
    plots.pareto(plan_fronts("llama-3.1-70b", ["a100-sxm", "h100-sxm", "h200", "b200", "mi300x", "mi355x"]),
                 DOCS / "pareto-llama-3.1-70b.png")
    depth = ttft_vs_depth_points("llama-3.1-70b", "cs-3") + ttft_vs_depth_points("kimi-k2.6", "cs-3", compute="bf16",
                                                                                   input_tokens=1000, output_tokens=500)
    plots.ttft_vs_depth(depth, DOCS / "ttft-vs-depth-cs3.png")
    factors, _, _, total = waterfall(parse_setup("kimi-k2.6-gpu"), parse_setup("kimi-k2.6-cs3"))
    plots.waterfall([(f.name, f.ratio) for f in factors], total, DOCS / "waterfall-kimi-k2.6-gpu-vs-cs3.png")
    write_report(["kimi-k2.6-cs3", "sol-cs3"], DOCS / "report-example.html", title="tokensim report: wafer claims")
    engine_figures()


def engine_figures() -> None:
    """docs/engine-<name>.png: each engine profile's curves beside the published rows and serving runs naming it."""
    from tokensim.output.engine_plots import engine_profile, engine_profile_data
    from tokensim.perf.engines import engine_profiles
    from tokensim.validate.load import shipped_silicon_cases
    from tokensim.validate.run import validate
    from tokensim.validate.serving import steady_tpot

    results, _ = validate()
    cases = shipped_silicon_cases()
    tpot = steady_tpot(cases)
    for engine in sorted(engine_profiles()):
        engine_profile(engine_profile_data(engine, results, cases, tpot), DOCS / f"engine-{engine}.png")


if __name__ == "__main__":
    main()
