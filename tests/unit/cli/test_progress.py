"""Progress on stderr: rate and time left, redrawn on a terminal, periodic lines in a log."""

import io

from hypothesis import given, strategies as st

from asrpt.cli.progress import Progress, human_duration, progress_line


class FakeClock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self):
        return self.now_s


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_off_a_terminal_one_log_line_per_interval_with_rate_and_time_left():
    clock, log = FakeClock(), io.StringIO()
    progress = Progress("fifo seed 0", stream=log, log_every_s=10, clock=clock)
    for done in range(0, 1001, 10):
        clock.now_s = 100.0 + done / 50  # 50 jobs/s: 20 s in all
        progress.update(done, 1000)
    progress.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "asrpt: fifo seed 0: 500/1000 jobs (50%), 50 jobs/s, 10 s left"
    assert lines[-1].startswith("asrpt: fifo seed 0: 1000/1000 jobs (100%)")
    assert len(lines) == 2 and "\r" not in log.getvalue()


def test_a_short_run_off_a_terminal_prints_nothing():
    clock, log = FakeClock(), io.StringIO()
    progress = Progress("x", stream=log, clock=clock)
    clock.now_s += 1
    progress.update(10, 10)
    progress.close()
    assert log.getvalue() == ""


def test_on_a_terminal_the_line_is_redrawn_in_place():
    clock, tty = FakeClock(), Terminal()
    progress = Progress("asrpt seed 1", stream=tty, clock=clock)
    clock.now_s += 1
    progress.update(100, 400)
    progress.close()
    assert tty.getvalue().startswith("\rasrpt seed 1: 100/400 jobs (25%), 100 jobs/s, 3 s left")
    assert tty.getvalue().endswith("\n")


def test_human_durations():
    assert [human_duration(s) for s in (45, 720, 3 * 3600, 4 * 86400)] == ["45 s", "12 min", "3.0 h", "4.0 d"]
    assert progress_line("p", 0, 10, 0.0) == "p: 0/10 jobs (0%), 0 jobs/s, time left unknown"


@given(st.floats(min_value=0, max_value=1e9))
def test_human_duration_unit_grows_with_the_duration(seconds):
    order = ["s", "min", "h", "d"]
    unit = human_duration(seconds).split()[1]
    bigger = human_duration(seconds * 2).split()[1]
    assert order.index(bigger) >= order.index(unit)


def test_simulate_table_shows_hours_and_days_next_to_seconds():
    from asrpt.cli.simulate import format_table

    metrics = {"total_jct_s": 9e6, "ratio_to_lower_bound": 1.2, "avg_jct_s": 7200.0, "p50_jct_s": 60.0,
               "p99_jct_s": 3 * 86400.0, "avg_queue_s": 5400.0, "utilization": 0.5, "wall_s": 1.0}
    report = {"jobs": 3, "trace": "t.csv", "cluster": "pai", "predictor": "rf",
              "lower_bound": {"total_jct_s": 7.5e6}, "policies": {"fifo": metrics}}
    text = format_table(report)
    assert "7,200 (2.0 h)" in text and "259,200 (3.0 d)" in text and "60 (60 s)" in text
    assert "7,500,000 s (86.8 d)" in text


def test_predict_evaluate_reports_progress_up_to_every_test_job():
    from pathlib import Path

    from asrpt.predict.evaluate import evaluate, read_pai_trace

    rows = read_pai_trace(Path("src/asrpt/data/traces/pai_slice.csv"))[:600]
    seen = []
    report = evaluate(rows, retrain_every=100, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (report["n_test"], report["n_test"]) and len(seen) > 1
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
