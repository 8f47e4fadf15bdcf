"""`tokensim simulate --dataset FILE`: request lengths from a JSONL file, in order and cycled to --requests."""
import json

from typer.testing import CliRunner

from tokensim.cli import app

try:
    runner = CliRunner(mix_stderr=False)     # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()


def test_lengths_come_from_the_dataset_in_order_and_cycle(tmp_path):
    """Two requests in the file, four simulated: 100 + 300 + 100 + 300 = 800 prompt tokens and 10 + 30 + 10 + 30 =
    80 output tokens, whatever --input-tokens says; the same under closed-loop clients."""
    data = tmp_path / "lengths.jsonl"
    data.write_text('{"input_tokens": 100, "output_tokens": 10}\n\n{"input_toks": 300, "output_toks": 30}\n')
    for load in (["--rate", "2"], ["--concurrency", "2"]):
        r = runner.invoke(app, ["simulate", *load, "--requests", "4", "--input-tokens", "5000", "--dataset", str(data),
                                "--json"])
        assert r.exit_code == 0, r.stderr
        doc = json.loads(r.stdout)
        assert (doc["completed"], doc["input_tokens"], doc["output_tokens"]) == (4, 800, 80)
        assert doc["load"]["dataset"] == str(data) and doc["load"]["input_tokens"] is None


def test_a_bad_dataset_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_tokens": 100}\n')
    for path, words in ((bad, "bad.jsonl:1: expected input_tokens and output_tokens"),
                        (tmp_path / "missing.jsonl", "cannot read")):
        r = runner.invoke(app, ["simulate", "--rate", "1", "--requests", "4", "--dataset", str(path)])
        assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n")
    r = runner.invoke(app, ["simulate", "--trace", str(trace), "--dataset", str(bad)])
    assert r.exit_code == 2 and "--dataset" in r.stderr
