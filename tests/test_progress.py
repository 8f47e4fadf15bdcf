"""Progress where no bar can be drawn: a plain line at most once per interval, and one at the end."""
import io

from tokensim.output.progress import PlainProgress, progress_bar


def test_plain_progress_prints_at_most_once_a_minute_and_at_the_end():
    now = [0.0]
    out = io.StringIO()
    p = PlainProgress("fitting", 6, 60.0, stream=out, clock=lambda: now[0])
    for t in (10.0, 59.0, 70.0, 100.0, 130.0, 135.0):      # 6 ticks; 70 - 0 >= 60, 130 - 70 >= 60, 6 of 6 at 135
        now[0] = t
        p.tick()
    assert out.getvalue().splitlines() == [
        "fitting: 3/6 (50%), 1 min 10 s elapsed",
        "fitting: 5/6 (83%), 2 min 10 s elapsed",
        "fitting: 6/6 (100%), 2 min 15 s elapsed",
    ]


def test_progress_bar_without_a_terminal_is_silent_unless_asked(capsys):
    with progress_bar("quick", 3) as tick:
        for _ in range(3):
            tick()
    with progress_bar("long", 2, enabled=False, plain_every_s=0.0) as tick:   # --json: stdout stays JSON
        tick()
        tick()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[0].startswith("long: 1/2 (50%), 0 min 0")
    assert captured.err.splitlines()[1].startswith("long: 2/2 (100%)")
    assert "quick" not in captured.err
