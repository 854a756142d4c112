"""Forecast accuracy in the simulator: exact when the forecast knows everything, measurably off
when it does not, and never a change to the replay itself."""

from __future__ import annotations

import json

import pytest

from asrpt.core.policies import make_policy
from asrpt.sim.engine import simulate
from asrpt.sim.forecast_accuracy import (
    ForecastSampler,
    belief_for,
    compare_with_outcome,
    measure_forecasts,
    sample_job_ids,
)
from asrpt.sim.metrics import policy_metrics
from asrpt.sim.predictors import GroupHistoryPredictions, OraclePredictions
from tests.helpers import flat_job, flat_speed_table, partition_nodes

SIZES = [(2, 100), (1, 30), (1, 10), (2, 20), (1, 5), (1, 60), (2, 5), (1, 40), (1, 15), (2, 10)]


def _jobs(*, submit_step_s: float = 0.0, limit_factor: float = 3.0):
    return [
        flat_job(str(i), g, float(n), submit_s=i * submit_step_s, time_limit_s=limit_factor * n, group=f"g{i % 3}", user="u")
        for i, (g, n) in enumerate(SIZES)
    ]


def _cluster():
    partition, nodes = partition_nodes("gpu", "gpu", count=2, per_node=2)
    return [partition], nodes


@pytest.mark.parametrize("policy_name", ["asrpt", "fifo", "spwf"])
def test_exact_predictions_give_exact_forecasts(policy_name) -> None:
    """Every job known at once and predicted exactly: each forecast at submission is what happens."""
    speed = flat_speed_table()
    partitions, nodes = _cluster()
    result, accuracy = measure_forecasts(
        _jobs(), partitions, nodes, make_policy(policy_name, speed), OraclePredictions(), speed=speed, samples=10
    )
    assert accuracy.samples == 10 and accuracy.unplaced == 0
    assert accuracy.median_abs_start_error_s == 0.0 and accuracy.median_abs_end_error_s == 0.0
    assert max(accuracy.start_errors_s) == pytest.approx(0.0) and max(accuracy.end_errors_s) == pytest.approx(0.0)
    assert accuracy.median_abs_end_error_at_start_s == 0.0
    assert accuracy.forecasts == 1  # one cycle saw all ten arrive


@pytest.mark.parametrize("policy_name", ["asrpt", "asrpt-strict", "fifo", "multifactor"])
def test_exact_forecast_from_the_middle_of_a_replay(policy_name) -> None:
    """The last job arrives while others run and wait: forecast from that live state (running
    jobs adopted, the policy state copied) with exact beliefs, it is exactly right."""
    speed = flat_speed_table()
    partitions, nodes = _cluster()
    jobs = _jobs(submit_step_s=4.0)
    sampler = ForecastSampler(make_policy(policy_name, speed), {jobs[-1].job_id}, speed, belief="predicted")
    result = simulate(jobs, partitions, nodes, sampler, OraclePredictions())
    accuracy = compare_with_outcome(sampler, result)
    assert accuracy.samples == 1
    assert accuracy.median_abs_start_error_s == pytest.approx(0.0)
    assert accuracy.median_abs_end_error_s == pytest.approx(0.0)
    assert result.records[jobs[-1].job_id].first_start_s > jobs[-1].submit_time_s  # it did have to wait


def test_time_limits_and_unseen_jobs_make_forecasts_miss() -> None:
    speed = flat_speed_table()
    partitions, nodes = _cluster()
    # multifactor forecasts as Slurm does: every job runs to its (3x too long) time limit.
    _, slurm = measure_forecasts(
        _jobs(), partitions, nodes, make_policy("multifactor", speed), OraclePredictions(), speed=speed, samples=10
    )
    assert slurm.belief == "time_limit"
    assert slurm.median_abs_end_error_s > 0 and slurm.median_abs_end_error_at_start_s > 0
    # A-SRPT with predictions from history: the first jobs of a group are unseen, arrivals come later.
    _, asrpt = measure_forecasts(
        _jobs(submit_step_s=7.0), partitions, nodes, make_policy("asrpt", speed), GroupHistoryPredictions(), speed=speed, samples=10
    )
    assert asrpt.belief == "predicted" and asrpt.samples == 10
    assert asrpt.median_abs_end_error_s > 0 and max(asrpt.start_errors_s) > 0
    assert asrpt.p90_abs_end_error_s >= asrpt.median_abs_end_error_s


def test_forecasting_does_not_change_the_replay() -> None:
    speed = flat_speed_table()
    partitions, nodes = _cluster()
    for name in ("asrpt", "multifactor", "tiresias"):
        jobs = _jobs(submit_step_s=3.0)
        plain = simulate(jobs, partitions, nodes, make_policy(name, speed), GroupHistoryPredictions())
        sampled, accuracy = measure_forecasts(
            jobs, partitions, nodes, make_policy(name, speed), GroupHistoryPredictions(), speed=speed, samples=4, seed=1
        )
        assert policy_metrics(sampled) == policy_metrics(plain), name
        assert accuracy.samples == 4


def test_sample_is_seeded_and_bounded() -> None:
    jobs = _jobs()
    assert sample_job_ids(jobs, 3, seed=0) == sample_job_ids(jobs, 3, seed=0)
    assert len(sample_job_ids(jobs, 3, seed=0)) == 3
    assert sample_job_ids(jobs, 50, seed=0) == {j.job_id for j in jobs}
    assert belief_for("multifactor") == "time_limit" and belief_for("asrpt") == "predicted"


def test_simulate_forecast_adds_the_block_and_the_column(tmp_path, capsys) -> None:
    from asrpt.cli.main import main

    out = tmp_path / "report.json"
    code = main([
        "simulate", "--trace", "src/asrpt/data/traces/pai_slice.csv", "--format", "pai", "--cluster", "pai",
        "--policy", "asrpt", "--policy", "multifactor", "--limit", "40", "--forecast", "--forecast-samples", "10",
        "--json", str(out), "--no-progress",
    ])
    assert code == 0
    report = json.loads(out.read_text())
    for name in ("asrpt", "multifactor"):
        block = report["policies"][name]["forecast"]
        assert block["samples"] + block["unplaced"] == 10
        assert block["median_abs_start_error_s"] >= 0 and block["median_abs_end_error_s"] >= 0
    table = capsys.readouterr().out
    assert "ETA err start/end s" in table


def test_simulate_no_slurm_fill_replays_the_idealised_cluster(tmp_path) -> None:
    """``--no-slurm-fill`` is recorded and changes the replay of a gating policy: with the Slurm
    model jobs A-SRPT has not released yet start as soon as they fit."""
    from asrpt.cli.main import main

    reports = {}
    for flag in ([], ["--no-slurm-fill"]):
        out = tmp_path / f"report{len(flag)}.json"
        code = main([
            "simulate", "--trace", "src/asrpt/data/traces/pai_slice.csv", "--format", "pai", "--cluster", "pai",
            "--policy", "asrpt", "--limit", "60", "--json", str(out), "--no-progress", *flag,
        ])
        assert code == 0
        reports[bool(flag)] = json.loads(out.read_text())
    assert reports[False]["slurm_fills"] is True and reports[True]["slurm_fills"] is False
    filled, ideal = (reports[k]["policies"]["asrpt"]["total_jct_s"] for k in (False, True))
    assert filled != ideal
