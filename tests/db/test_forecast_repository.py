"""Forecast verbs of the history repository on SQLite and PostgreSQL (same tests, both backends)."""

from __future__ import annotations

import math

import pytest

from asrpt.db.repository import (
    ForecastRecord,
    HistoryRepository,
    OutcomeRecord,
    SubmissionRecord,
)

NOW_S = 1_750_000_000.5
DAY_S = 86_400.0


def forecast(job_id: str, **overrides) -> ForecastRecord:
    fields = dict(
        slurm_job_id=job_id,
        user="alice",
        policy="asrpt",
        running=False,
        accelerators=8,
        predicted_start_s=NOW_S + 600.0,
        predicted_end_s=NOW_S + 4200.0,
        job_name=f"train-{job_id}",
        partitions=("a100", "v100"),
        partition="a100",
    )
    fields.update(overrides)
    return ForecastRecord(**fields)


def test_latest_forecasts_are_the_last_cycle_in_scheduling_order(repository: HistoryRepository) -> None:
    first = [
        forecast("10", position=2, predicted_iterations=5000.0, expected_iterations=5000.0),
        forecast("11", position=1, held=True, reason="communication-heavy: held", virtual_remaining_s=12.5, virtual_size_s=40.0),
        forecast("9", running=True, position=None, predicted_start_s=NOW_S - 100, predicted_end_s=NOW_S + 50, user="bob"),
    ]
    assert repository.record_forecasts(NOW_S, first) == 3
    latest = repository.latest_forecasts()
    assert [f.slurm_job_id for f in latest] == ["9", "11", "10"]  # running, then by position
    held = latest[1]
    assert (held.held, held.reason, held.virtual_remaining_s, held.virtual_size_s) == (True, "communication-heavy: held", 12.5, 40.0)
    assert held.partitions == ("a100", "v100") and held.partition == "a100"
    assert held.made_at_s == pytest.approx(NOW_S) and held.current
    assert latest[2].predicted_iterations == 5000.0 and latest[2].expected_iterations == 5000.0

    # Next cycle: 9 finished, 11 started, 12 arrived.
    second = [
        forecast("11", running=True, predicted_start_s=NOW_S + 30, predicted_end_s=NOW_S + 3000),
        forecast("10", position=1, predicted_start_s=NOW_S + 3000, predicted_end_s=NOW_S + 6000),
        forecast("12", position=2, predicted_start_s=None, predicted_end_s=math.inf, reason="no partition"),
    ]
    repository.record_forecasts(NOW_S + 30, second)
    assert [f.slurm_job_id for f in repository.latest_forecasts()] == ["11", "10", "12"]
    ten = repository.forecast_for("10")
    assert ten is not None and ten.position == 1
    # The first forecast stays next to the latest one.
    assert ten.first_made_at_s == pytest.approx(NOW_S) and ten.made_at_s == pytest.approx(NOW_S + 30)
    assert ten.first_predicted_start_s == pytest.approx(NOW_S + 600) and ten.predicted_start_s == pytest.approx(NOW_S + 3000)
    never = repository.forecast_for("12")
    assert never is not None and never.predicted_start_s is None and never.predicted_end_s is None
    gone = repository.forecast_for("9")
    assert gone is not None and not gone.current and gone.user == "bob"
    assert repository.forecast_for("nope") is None

    # An empty queue: nothing is current any more.
    repository.record_forecasts(NOW_S + 60, [])
    assert repository.latest_forecasts() == []


def test_latest_forecasts_filter_by_user_and_partition(repository: HistoryRepository) -> None:
    repository.record_forecasts(
        NOW_S,
        [
            forecast("1", position=1, user="alice", partition="a100", partitions=("a100",)),
            forecast("2", position=2, user="bob", partition="v100", partitions=("a100", "v100")),
            forecast("3", position=3, user="carol", partition="t4", partitions=("t4",)),
        ],
    )
    assert [f.slurm_job_id for f in repository.latest_forecasts(user="bob")] == ["2"]
    assert [f.slurm_job_id for f in repository.latest_forecasts(user="alice,carol")] == ["1", "3"]
    assert [f.slurm_job_id for f in repository.latest_forecasts(partition="a100")] == ["1", "2"]
    assert [f.slurm_job_id for f in repository.latest_forecasts(partition=["t4"])] == ["3"]
    assert [f.slurm_job_id for f in repository.latest_forecasts(user="alice", partition="v100")] == []


def _job(repository: HistoryRepository, job_id: str, *, group: str | None, user: str = "alice", submit_s: float) -> None:
    repository.record_submission(
        SubmissionRecord(slurm_job_id=job_id, user=user, submit_time_s=submit_s, source="slurm", recurrence_group=group)
    )


def test_finished_runs_and_predictions_of_a_job(repository: HistoryRepository) -> None:
    for i, iterations in enumerate((100.0, 300.0, 200.0)):
        _job(repository, f"g{i}", group="resnet", submit_s=NOW_S - DAY_S + i)
        repository.record_outcome(
            OutcomeRecord(slurm_job_id=f"g{i}", start_time_s=NOW_S - 5000 + i, end_time_s=NOW_S - 4000 + i * 1000, iterations=iterations)
        )
    _job(repository, "other", group="bert", user="bob", submit_s=NOW_S - DAY_S)
    repository.record_outcome(OutcomeRecord(slurm_job_id="other", start_time_s=NOW_S - 100, end_time_s=NOW_S - 10))
    _job(repository, "unfinished", group="resnet", submit_s=NOW_S)

    runs = repository.finished_runs(group="resnet")
    assert (runs.count, runs.median_iterations) == (3, 200.0)
    assert runs.median_run_time_s == pytest.approx(1000.0 + 1000.0 - 1)  # run times 1000, 1999, 2998 s
    before = repository.finished_runs(group="resnet", ended_before_s=NOW_S - 3500)
    assert before.count == 1
    assert repository.finished_runs(user="bob").count == 1
    assert repository.finished_runs(user="bob").median_iterations is None
    assert repository.finished_runs(group="none").count == 0
    with pytest.raises(ValueError):
        repository.finished_runs()

    repository.record_prediction("unfinished", predicted_iterations=150.0, model_version="rf-3", made_at_s=NOW_S)
    repository.record_prediction("unfinished", predicted_iterations=400.0, model_version="raised", made_at_s=NOW_S + 60)
    assert [(p.predicted_iterations, p.model_version) for p in repository.predictions_of("unfinished")] == [
        (150.0, "rf-3"),
        (400.0, "raised"),
    ]
    assert repository.predictions_of("other") == []


def test_recent_accuracy_compares_first_predictions_and_forecasts_with_outcomes(repository: HistoryRepository) -> None:
    for job_id, predicted, actual in (("1", 100.0, 200.0), ("2", 300.0, 300.0), ("3", 50.0, 100.0)):
        _job(repository, job_id, group="g", submit_s=NOW_S - 1000)
        repository.record_prediction(job_id, predicted_iterations=predicted, model_version="rf", made_at_s=NOW_S - 1000)
    repository.record_prediction("1", predicted_iterations=1000.0, model_version="raised", made_at_s=NOW_S - 500)
    repository.record_forecasts(
        NOW_S - 1000,
        [
            forecast("1", predicted_start_s=NOW_S - 900, predicted_end_s=NOW_S - 100),
            forecast("2", predicted_start_s=NOW_S - 800, predicted_end_s=NOW_S - 300),
        ],
    )
    # A later forecast does not change the first one, which accuracy uses.
    repository.record_forecasts(NOW_S - 500, [forecast("1", predicted_start_s=NOW_S - 900, predicted_end_s=NOW_S)])
    for job_id, actual, start, end in (("1", 200.0, NOW_S - 880, NOW_S - 40), ("2", 300.0, NOW_S - 800, NOW_S - 300), ("3", 100.0, NOW_S - 50, NOW_S - 20)):
        repository.record_outcome(OutcomeRecord(slurm_job_id=job_id, start_time_s=start, end_time_s=end, iterations=actual))

    summary = repository.recent_accuracy()
    assert summary.finished_jobs == 3
    assert summary.iterations_samples == 3
    assert summary.median_abs_pct_iterations_error == pytest.approx(50.0)  # 50 %, 0 %, 50 %
    assert (summary.start_samples, summary.end_samples) == (2, 2)
    assert summary.median_abs_start_error_s == pytest.approx(10.0)  # 20 s and 0 s
    assert summary.median_abs_end_error_s == pytest.approx(30.0)  # 60 s and 0 s
    assert repository.recent_accuracy(limit=1).finished_jobs == 1
    with pytest.raises(ValueError):
        repository.recent_accuracy(limit=0)


def test_prune_deletes_old_forecasts_of_jobs_that_left(repository: HistoryRepository) -> None:
    repository.record_forecasts(NOW_S - 40 * DAY_S, [forecast("old"), forecast("kept")])
    repository.record_forecasts(NOW_S - 1 * DAY_S, [forecast("kept")])
    result = repository.prune_older_than(30, now_s=NOW_S)
    assert result.forecasts == 1
    assert repository.forecast_for("old") is None
    assert repository.forecast_for("kept") is not None
