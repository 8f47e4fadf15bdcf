"""Output files: written whole (temporary file in the target's folder, fsync, rename) or not at all; a target that
cannot be a file is refused in one line before any work; `fit` writes where the user says, by default to the user's
data folder and never into the installed package."""
import csv
import json
import os
import stat
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokensim.cli import app, default_fitted_path
from tokensim.errors import TokensimError
from tokensim.output import plots
from tokensim.output.files import atomic_open, atomic_outputs, atomic_write, check_target, user_data_dir
from tokensim.validate.fit import PARAMS

try:
    runner = CliRunner(mix_stderr=False)     # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()                     # newer ones always keep them apart


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_write_writes_with_the_usual_mode(tmp_path):
    target = tmp_path / "a.txt"
    assert atomic_write(target, "héllo\n") == target
    assert target.read_text(encoding="utf-8") == "héllo\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask       # not mkstemp's private 0600
    atomic_write(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes" and listing(tmp_path) == ["a.txt"]


def test_a_failure_inside_the_block_leaves_the_old_files_and_no_temporaries(tmp_path):
    (tmp_path / "a.csv").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_outputs() as outputs:
            outputs.write(tmp_path / "a.csv", "new")
            with outputs.open(tmp_path / "b.csv", "w") as f:
                f.write("half")
            raise RuntimeError("the computation failed half-way")
    assert listing(tmp_path) == ["a.csv"] and (tmp_path / "a.csv").read_text() == "old"
    with pytest.raises(ZeroDivisionError):
        with atomic_open(tmp_path / "c.csv", newline="") as f:
            csv.writer(f).writerow(["x", 1 / 0])
    assert listing(tmp_path) == ["a.csv"]


def test_one_target_may_not_be_named_twice(tmp_path):
    with pytest.raises(TokensimError, match="named once"):
        with atomic_outputs() as outputs:
            outputs.write(tmp_path / "x", "1")
            outputs.write(tmp_path / "x", "2")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("bad, why", [
    ("{tmp}", "not a folder"), ("{tmp}/", "not a folder"), ("/", "not a folder"), ("", "not a folder"),
    ("{tmp}/missing/x.csv", "does not exist"), ("{tmp}/plain.txt/x.csv", "is not a folder"),
])
def test_targets_that_cannot_be_files_are_refused(tmp_path, bad, why):
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(TokensimError, match=why) as info:
        check_target(bad.format(tmp=tmp_path), "--csv")
    assert str(info.value).startswith(f"--csv = {bad.format(tmp=tmp_path)!r}: expected")


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root may write anywhere")
def test_an_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(TokensimError, match="not writable"):
            check_target(locked / "x.csv", "--csv")
    finally:
        locked.chmod(0o700)


def test_user_data_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert user_data_dir() == tmp_path / "tokensim"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")        # the XDG spec: relative paths are ignored
    assert user_data_dir() == Path.home() / ".local" / "share" / "tokensim"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert user_data_dir() == Path.home() / ".local" / "share" / "tokensim"


# ---- the commands ----

def one_line_failure(args: list[str], *needles: str, env: dict | None = None) -> str:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize("args, flag", [
    (["predict", "--plot", "/"], "--plot"),
    (["predict", "--plot", "{tmp}"], "--plot"),
    (["predict", "--plot", "{tmp}/missing/p.png"], "--plot"),
    (["run", "kimi-k2.6-cs3", "--plot", "{tmp}"], "--plot"),
    (["compare", "kimi-k2.6-gpu", "kimi-k2.6-cs3", "--plot", "{tmp}/"], "--plot"),
    (["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-chips", "2", "--csv", "{tmp}"], "--csv"),
    (["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-chips", "2", "--plot", "{tmp}"], "--plot"),
    (["validate", "--plot", "{tmp}"], "--plot"),
    (["report", "kimi-k2.6-cs3", "-o", "{tmp}"], "--out"),
    (["fit", "-o", "{tmp}"], "--out"),
])
def test_every_writing_command_refuses_a_folder_and_leaves_nothing(tmp_path, args, flag):
    """The target is checked before the work starts: one line naming the flag, and nothing new anywhere near."""
    work = tmp_path / "work"
    work.mkdir()
    before = listing(tmp_path), listing(work)
    line = one_line_failure([a.format(tmp=work) for a in args])
    assert line.startswith(f"error: {flag} = ")
    assert (listing(tmp_path), listing(work)) == before


def test_predict_plot_writes_every_view_and_nothing_else(tmp_path):
    result = runner.invoke(app, ["predict", "--hardware", "cs-3", "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    views = ("breakdown", "roofline", "speed-vs-batch", "ttft-vs-depth")
    assert listing(tmp_path) == sorted(f"p-{v}.{x}" for v in views for x in ("png", "svg"))
    assert "wrote" in result.stderr and "p-breakdown.png" in result.stderr


def test_a_plot_that_fails_half_way_writes_none(tmp_path, monkeypatch):
    """predict --plot draws four views; if the third cannot be drawn, the first two are not left behind."""
    def broken(points):
        raise TokensimError("speed_vs_batch.points = []: expected at least one point")

    monkeypatch.setattr(plots, "speed_vs_batch_figure", broken)
    one_line_failure(["predict", "--plot", str(tmp_path / "p.png")], "speed_vs_batch")
    assert listing(tmp_path) == []


def test_plan_csv_is_written_whole(tmp_path):
    target = tmp_path / "plan.csv"
    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-chips", "2", "--csv", str(target), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(target.open(newline="")))
    assert rows[0][:3] == ["hardware", "chips", "tp"]
    assert len(rows) - 1 == json.loads(result.stdout)["evaluated"] > 10           # every evaluated deployment
    assert listing(tmp_path) == ["plan.csv"]


def test_report_writes_with_out_and_old_output_spelling(tmp_path):
    result = runner.invoke(app, ["report", "cs3-capacity", "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    result = runner.invoke(app, ["report", "cs3-capacity", "--output", str(tmp_path / "old.html")])
    assert result.exit_code == 0 and (tmp_path / "old.html").exists()
    one_line_failure(["report", "cs3-capacity", "-o", str(tmp_path / "a.html"), "--output", str(tmp_path / "b.html")], "--out")
    assert listing(tmp_path) == ["old.html", "r.html"]


@pytest.fixture
def few_measurements(tmp_path) -> Path:
    shipped = resources.files("tokensim") / "data" / "measurements.csv"
    lines = shipped.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "m.csv"
    path.write_text("\n".join(lines[:13]) + "\n", encoding="utf-8")
    return path


def test_fit_writes_to_the_user_data_folder_not_the_package(tmp_path, few_measurements):
    package_file = resources.files("tokensim") / "data" / "fitted.toml"
    before = package_file.read_bytes()
    data_home = tmp_path / "xdg"
    result = runner.invoke(app, ["fit", "--measurements", str(few_measurements), "--no-loso", "--no-serving"],
                           env={"XDG_DATA_HOME": str(data_home)})
    assert result.exit_code == 0, result.output
    target = data_home / "tokensim" / "fitted.toml"
    assert target.read_text(encoding="utf-8").startswith("# Written by `tokensim fit`")
    assert f"wrote {target}" in result.stdout
    assert package_file.read_bytes() == before
    assert listing(target.parent) == ["fitted.toml"]


def test_fit_writes_where_o_says_and_reports_it_in_json(tmp_path, few_measurements):
    target = tmp_path / "mine.toml"
    result = runner.invoke(app, ["fit", "--measurements", str(few_measurements), "--no-loso", "--no-serving", "-o", str(target), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["written_to"] == str(target)
    # no terminal under the runner: the plain progress line goes to stderr, once at the end of a quick fit
    # (two sweeps, one tick per constant each; no refits left out)
    assert result.stderr.splitlines()[-1].startswith(f"fitting: {2 * len(PARAMS)}/{2 * len(PARAMS)} (100%)")
    assert "[constants." in target.read_text(encoding="utf-8") and listing(tmp_path) == ["m.csv", "mine.toml"]


def test_default_fitted_path_is_outside_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_fitted_path() == tmp_path / "tokensim" / "fitted.toml"
    package = Path(str(resources.files("tokensim")))
    assert package not in default_fitted_path().parents


def test_fit_gives_the_same_file_in_one_process_or_two(tmp_path, few_measurements):
    """--workers spreads each in-sample evaluation of the loss (validate/split_loss.py) and the out-of-sample refits
    (here the source groups' refits: --no-serving leaves no simulation; the pooled simulations and the split loss on
    serving runs are checked in test_serving_load) over processes; each is deterministic and put back in order, so
    the written fit (constants, report, out-of-sample residuals) must not depend on the count."""
    texts = []
    for n in (1, 2):
        target = tmp_path / f"w{n}.toml"
        result = runner.invoke(app, ["fit", "--measurements", str(few_measurements), "--no-serving", "--workers", str(n),
                                     "-o", str(target)])
        assert result.exit_code == 0, result.output
        texts.append(target.read_text(encoding="utf-8"))
    assert texts[0] == texts[1] and "log_ratio_out_of_sample" in texts[0]
    one_line_failure(["fit", "--measurements", str(few_measurements), "--workers", "0"], "--workers")


def test_fit_keep_constants_writes_the_constants_in_use_back_with_a_new_report(tmp_path, few_measurements):
    """--keep-constants fits nothing: every constant of the written file is the value in use (the shipped fit), and
    only the report is new; its progress counts no fitting sweeps (here none of anything: --no-loso)."""
    import tomllib

    from tokensim.validate.fit import buildable, current_values

    target = tmp_path / "kept.toml"
    result = runner.invoke(app, ["fit", "--measurements", str(few_measurements), "--no-loso", "--no-serving",
                                 "--keep-constants", "-o", str(target), "--json"])
    assert result.exit_code == 0, result.output
    written = tomllib.loads(target.read_text(encoding="utf-8"))["constants"]
    in_use = current_values()
    assert len(in_use) == len(PARAMS)
    for p, v in in_use.items():
        assert written[p.family][p.engine][p.name] == pytest.approx(v, rel=1e-5)    # 6 significant digits written
    assert json.loads(result.stdout)["rows"] == len(buildable(few_measurements))
    assert "fitting:" not in result.stderr
