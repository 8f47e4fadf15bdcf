"""Plots: every figure is written as a non-empty PNG and SVG, all of a group or none; the waterfall's bars multiply
to the total; a hardware family and an op keep one colour across plots; no pyplot and no global backend switch."""
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
from matplotlib.colors import to_hex

import tokensim
from tokensim.errors import TokensimError
from tokensim.output import plots
from tokensim.output.plot_data import speed_vs_batch_points, ttft_vs_depth_points
from tokensim.specs.hardware.catalog import catalog

FACTORS = [("bandwidth", 3.2), ("batch", 0.5), ("speculative decoding", 2.5), ("layer floor", 0.8)]


@pytest.fixture(scope="module")
def h200_prediction():
    return tokensim.predict("llama-3.1-70b", "h200", tp=2, batch=16, weights="fp8")


@pytest.fixture(scope="module")
def batch_points():
    return speed_vs_batch_points("llama-3.1-8b", ["h100-sxm", "h200", "mi300x", "cs-3"], batches=(1, 8, 64))


def _pareto_points(batch_points):
    best = max(batch_points, key=lambda p: p["throughput_tokens_per_s_per_chip"])
    return [dict(p, front=p["batch"] in (1, 64), best=p is best) for p in batch_points]


def _assert_written(paths, tmp_path, stem):
    assert [p.name for p in paths] == [f"{stem}.png", f"{stem}.svg"]
    png, svg = paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "<svg" in svg.read_text(encoding="utf-8")[:2000]


def test_each_plot_writes_png_and_svg(tmp_path, h200_prediction, batch_points):
    """Each plot function writes a real PNG and an SVG beside it, whatever suffix the path carries."""
    p = h200_prediction
    depth = ttft_vs_depth_points("llama-3.1-8b", "cs-3", depths=range(1, 5))
    cases = {
        "breakdown": lambda path: plots.breakdown(p, path),
        "roofline": lambda path: plots.roofline(p, tokensim.load_hardware("h200"), path),
        "speed": lambda path: plots.speed_vs_batch(batch_points, path),
        "pareto": lambda path: plots.pareto(_pareto_points(batch_points), path),
        "ttft": lambda path: plots.ttft_vs_depth(depth, path),
        "waterfall": lambda path: plots.waterfall(FACTORS, math.prod(f for _, f in FACTORS), path),
    }
    (tmp_path / "out").mkdir()
    for stem, draw in cases.items():
        _assert_written(draw(tmp_path / "out" / f"{stem}.png"), tmp_path, stem)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{s}.{x}" for s in cases for x in ("png", "svg"))


def test_prediction_plots_writes_breakdown_and_roofline(tmp_path, h200_prediction):
    paths = plots.prediction_plots(h200_prediction, tokensim.load_hardware("h200"), tmp_path / "p.png")
    assert [p.name for p in paths] == ["p-breakdown.png", "p-breakdown.svg", "p-roofline.png", "p-roofline.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_predicted_vs_measured_still_draws(tmp_path):
    """The validation scatter keeps its signature: results with row.value, row.metric, predicted, family."""
    rows = [SimpleNamespace(row=SimpleNamespace(value=v, metric="output_tps_per_user"), predicted=v * 1.1, family=f)
            for v, f in ((50.0, "nvidia-hopper"), (900.0, "cerebras-wafer"), (20.0, "amd-cdna3"))]
    _assert_written(plots.predicted_vs_measured(rows, tmp_path / "v.png"), tmp_path, "v")


def test_waterfall_bars_multiply_to_the_total():
    """Each factor's bar spans run -> run * factor on the log axis; the product of the bars is the total bar."""
    total = math.prod(f for _, f in FACTORS)
    fig = plots.waterfall_figure(FACTORS, total)
    bars = fig.axes[0].patches
    assert len(bars) == len(FACTORS) + 1
    run = 1.0
    for (name, f), bar in zip(FACTORS, bars, strict=False):
        lo, hi = bar.get_y(), bar.get_y() + bar.get_height()
        assert (hi / lo) == pytest.approx(max(f, 1 / f))
        assert {round(lo, 9), round(hi, 9)} == {round(run, 9), round(run * f, 9)}, name
        run *= f
    total_bar = bars[-1]
    assert run == pytest.approx(total)
    assert total_bar.get_y() + total_bar.get_height() == pytest.approx(max(total, 1.0))


@pytest.mark.parametrize("factors, total", [(FACTORS, 3.0), ([("a", -2.0)], -2.0), ([], 1.0), ([("a", 2.0)], 0.0)])
def test_waterfall_refuses_factors_that_do_not_multiply_to_the_total(factors, total):
    with pytest.raises(TokensimError):
        plots.waterfall_figure(factors, total)


def _line_colours(fig) -> dict:
    return {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()}


def test_a_family_keeps_its_colour_across_plots(batch_points):
    """h200 is drawn in the Hopper colour on the batch plot and the Pareto plot; CS-3 in the wafer colour everywhere."""
    speed = _line_colours(plots.speed_vs_batch_figure(batch_points))
    front = _line_colours(plots.pareto_figure(_pareto_points(batch_points)))
    depth = _line_colours(plots.ttft_vs_depth_figure(ttft_vs_depth_points("llama-3.1-8b", "cs-3", depths=range(1, 4))))
    hopper, wafer = plots.FAMILY_COLOURS["nvidia-hopper"], plots.FAMILY_COLOURS["cerebras-wafer"]
    assert speed["h200"] == speed["h100-sxm"] == front["h200 (front)"] == hopper
    assert speed["cs-3"] == front["cs-3 (front)"] == depth["llama-3.1-8b on cs-3"] == wafer
    assert speed["mi300x"] == plots.FAMILY_COLOURS[catalog()["mi300x"].family]


def test_an_op_keeps_its_colour_in_breakdown_and_roofline(h200_prediction):
    fig = plots.breakdown_figure(h200_prediction)
    bar_colours = {to_hex(b.get_facecolor()) for b in fig.axes[0].patches}
    roof = plots.roofline_figure(h200_prediction, tokensim.load_hardware("h200"))
    dot_colours = {to_hex(c.get_facecolor()[0]) for c in roof.axes[0].collections}
    assert plots.op_colour("ffn") in bar_colours and plots.op_colour("ffn") in dot_colours
    assert plots.op_colour("some.new.op") == plots.op_colour("some.new.op")


def test_family_of_disaggregated_names():
    assert plots.family_of("h200") == "nvidia-hopper"
    assert plots.family_of("b200+cs-3") == "nvidia-blackwell"
    assert plots.family_of("h200->cs-3") == "cerebras-wafer"
    assert plots.family_of("my-own-chip") == ""


def test_depth_sweep_runs_from_fewest_stages_to_one_layer_per_stage():
    points = ttft_vs_depth_points("llama-3.1-70b", "cs-3")
    depths = [p["pp"] for p in points]
    assert depths == list(range(depths[0], 81)) and depths[0] > 1      # 70B at bf16 needs several wafers
    assert all(p["ttft_s"] > 0 for p in points)


@pytest.mark.parametrize("draw", [plots.speed_vs_batch_figure, plots.pareto_figure, plots.ttft_vs_depth_figure])
def test_bad_points_name_the_missing_field(draw):
    with pytest.raises(TokensimError):
        draw([])
    with pytest.raises(TokensimError, match="points\\[0\\]"):
        draw([{"hardware": "h200"}])


def test_a_chip_with_no_predictable_batch_is_an_error():
    with pytest.raises(TokensimError, match="no batch"):
        speed_vs_batch_points("llama-3.1-405b", ["h100-sxm"], batches=(1,), tp=1)


def test_a_group_of_figures_is_written_whole_or_not_at_all(tmp_path, h200_prediction):
    """When the second figure of a group cannot be written, the first is not written either and no temporary
    file is left; an existing file of the same name keeps its content."""
    (tmp_path / "a.png").write_bytes(b"old")
    good = plots.breakdown_figure(h200_prediction)
    with pytest.raises(TokensimError, match="no-such-folder"):
        plots.save_all([(good, tmp_path / "a.png"), (good, tmp_path / "no-such-folder" / "b.png")], field="--plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]
    assert (tmp_path / "a.png").read_bytes() == b"old"


@pytest.mark.parametrize("bad", ["/", ".", "{tmp}", "{tmp}/", "{tmp}/missing/x.png", "{tmp}/file.txt/x.png"])
def test_a_path_that_cannot_be_a_file_is_refused(tmp_path, h200_prediction, bad):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(TokensimError, match="--plot = "):
        plots.breakdown(h200_prediction, bad.format(tmp=tmp_path), field="--plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_plots_use_no_pyplot_and_leave_the_backend_alone():
    """Drawing and saving a figure imports no pyplot (whose import picks a global backend)."""
    code = ("import sys, tempfile, pathlib\n"
            "from tokensim.output import plots\n"
            "d = pathlib.Path(tempfile.mkdtemp())\n"
            "plots.waterfall([('a', 2.0), ('b', 0.5)], 1.0, d / 'w.png')\n"
            "from tokensim.output.report_html import figure_img\n"
            "assert figure_img(plots.waterfall_figure([('a', 2.0)], 2.0), 'x').startswith('<img')\n"
            "assert (d / 'w.svg').stat().st_size > 1000\n"
            "print('pyplot' if 'matplotlib.pyplot' in sys.modules else 'clean')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"


def test_engine_profile_figure_draws_the_curves_beside_the_evidence_for_that_engine(tmp_path):
    """The curves are the profile's: at many rows the decode share approaches gemm_flops_fraction x the sustained
    clock x the inner fill of Llama-3.1-8B's FFN (by hand: fraction x clock x rows / (rows + half rows) /
    (2/3 (4096 + h) / 4096 + 1/3 (14336 + h) / 14336), h = gemm_half_inner) and never passes 1; evidence for other
    engines is left out; the figure writes PNG and SVG."""
    from tokensim.output.engine_plots import ROWS, engine_profile, engine_profile_data
    from tokensim.perf.constants import for_hardware
    k = for_hardware(tokensim.load_hardware("h100-sxm"), "vllm")
    row = SimpleNamespace(value=100.0)
    results = [SimpleNamespace(row=row, predicted=110.0, family="nvidia-hopper", engine="vllm"),
               SimpleNamespace(row=row, predicted=90.0, family="nvidia-hopper", engine="sglang")]
    case = SimpleNamespace(concurrency=8, run=SimpleNamespace(tpot_s=0.02, system="h100_sxm"),
                           deployment=SimpleNamespace(engine="vllm"))
    d = engine_profile_data("vllm", results, [case], [0.025])
    assert d.published == [(100.0, 110.0, "nvidia-hopper")]
    assert d.silicon == [(8, pytest.approx(1.25), "h100_sxm")]
    h = k.gemm_half_inner
    inner = 1 / (2 / 3 * (4096 + h) / 4096 + 1 / 3 * (14336 + h) / 14336)
    expected = k.gemm_flops_fraction * k.sustained_clock_fraction * ROWS[-1] / (ROWS[-1] + k.gemm_half_rows) * inner
    assert d.decode_share[-1] == pytest.approx(expected, rel=1e-12) and max(d.decode_share) <= 1
    written = engine_profile(d, tmp_path / "engine-vllm.png")
    assert sorted(p.suffix for p in written) == [".png", ".svg"] and all(p.stat().st_size > 0 for p in written)
