"""The predictor on the real Alibaba PAI 2020 slice, and the trace reader's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrpt.exceptions import TraceFormatError
from asrpt.predict.evaluate import BASELINES, evaluate, format_table, read_pai_trace
from asrpt.predict.predictor import IterationPredictor


@pytest.fixture(scope="module")
def report(pai_trace_path: Path) -> dict:
    rows = read_pai_trace(pai_trace_path)
    assert len(rows) == 8868
    return evaluate(rows, predictor=IterationPredictor(random_state=0, n_jobs=2))


def test_rf_beats_the_global_median_on_recurring_jobs(report: dict) -> None:
    rf = report["models"]["rf"]["recurring"]
    baseline = report["models"]["global-median"]["recurring"]
    assert rf["n"] == baseline["n"] == report["n_test_recurring"] > 500
    assert rf["median_ape"] < 0.5 * baseline["median_ape"]
    assert rf["mae_log"] < 0.5 * baseline["mae_log"]


def test_rf_is_competitive_with_the_history_baselines(report: dict) -> None:
    """Regression guard: the forest keeps the best recurring log error and the best overall one."""
    models = report["models"]
    assert set(models) == {"rf", *BASELINES}
    best_recurring_mae_log = min(models[name]["recurring"]["mae_log"] for name in BASELINES)
    assert models["rf"]["recurring"]["mae_log"] <= 1.05 * best_recurring_mae_log
    assert models["rf"]["mae_log"] < min(models[name]["mae_log"] for name in BASELINES)
    table = format_table(report)
    assert "rf" in table and "first-seen" in table
    json.dumps(report)  # the CLI writes it as JSON


def test_reader_reports_missing_columns_and_bad_values(tmp_path: Path) -> None:
    bad_header = tmp_path / "header.csv"
    bad_header.write_text("job_id,user\n1,a\n")
    with pytest.raises(TraceFormatError, match="missing columns"):
        read_pai_trace(bad_header)
    header = "job_id,user,num_gpu,num_cpu,num_pod,duration,job_name,submit_time,group,gpu_type,wait_time\n"
    bad_value = tmp_path / "value.csv"
    bad_value.write_text(header + "0,u,1,2,1,abc,j,0,g,V100,3\n")
    with pytest.raises(TraceFormatError, match=r"value\.csv:2"):
        read_pai_trace(bad_value)
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_pai_trace(tmp_path / "absent.csv")
    good = tmp_path / "good.csv"
    good.write_text(header + "0,u,0.5,2,2,100,j,10,g,V100,3\n")
    (row,) = read_pai_trace(good)
    assert (row.submit_time_s, row.end_time_s, row.iterations) == (10.0, 113.0, 100.0)
    assert (row.accelerators, row.parallel_data, row.accelerator_type) == (0.5, 2, "V100")


def test_replay_with_retraining_refits_and_never_sees_the_future(pai_trace_path: Path) -> None:
    """Refitting every 400 jobs of the test period: more fits, the same jobs scored, and every
    fit only from jobs that had finished by then (evaluate() asserts nothing leaks by
    construction; here the shape and the benefit of fresher models are checked)."""
    rows = read_pai_trace(pai_trace_path)
    once = evaluate(rows, predictor=IterationPredictor(random_state=0, n_jobs=2))
    replay = evaluate(rows, predictor=IterationPredictor(random_state=0, n_jobs=2), retrain_every=400)
    assert once["fits"] == 1 and replay["fits"] == -(-replay["n_test"] // 400)
    assert replay["n_test"] == once["n_test"]
    assert replay["models"]["rf"]["recurring"]["median_ape"] <= once["models"]["rf"]["recurring"]["median_ape"] * 1.1
