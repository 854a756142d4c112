"""The simulator's random-forest predictor: its fast path predicts what a full causal rebuild
predicts, and nothing that finished at or after a job's submission reaches its prediction."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.predict.features import COLUMN, build_features
from asrpt.sim.cluster import JobRecord as SimRecord
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.rf_predictions import RandomForestPredictions, _row
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs

PAI_SLICE = Path(str(resources.files("asrpt").joinpath("data/traces/pai_slice.csv")))


class CheckedRandomForest(RandomForestPredictions):
    """Recomputes every prediction from scratch, as the predictor did before it kept
    aggregates: a full ``build_features`` over the finished runs and scikit-learn's validated
    ``predict``, and records both."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.checked: list[tuple[float, float, float]] = []

    def iterations(self, job):  # type: ignore[no-untyped-def]
        fast = super().iterations(job)
        own = _row(job)
        past = [row for row in self._finished if row.end_time_s < job.submit_time_s]
        rebuilt = build_features([*past, own])[-1:]
        np.testing.assert_array_equal(self._arrived[job.job_id], rebuilt[0])
        if self._model is None:
            slow = self._before_first_fit(rebuilt[0])
        else:
            slow = float(self._model.predict(rebuilt)[0])
        self.checked.append((job.submit_time_s, fast, slow))
        return fast


@pytest.fixture(scope="module")
def replayed() -> CheckedRandomForest:
    cluster = load_cluster("pai")
    speed = cluster.speed_table(default_speed_table())
    jobs = build_jobs(read_trace(PAI_SLICE, "pai", limit=700).records, cluster, speed, seed=0).jobs
    # "model": every job goes through the forest, not only those with group history.
    predictions = CheckedRandomForest(first_fit_after=60, n_estimators=10, unseen_policy="model")
    simulate(jobs, cluster.partitions, cluster.nodes, make_policy("asrpt", speed), predictions)
    return predictions


def test_every_prediction_equals_the_full_rebuild(replayed: CheckedRandomForest) -> None:
    assert replayed.fits >= 3 and replayed.rebuilds == 0
    fast, slow = np.array([(f, s) for _, f, s in replayed.checked]).T
    assert (fast > 0).sum() > 400  # the forest predicted them, not the zero before a fit
    np.testing.assert_array_equal(fast, slow)


def test_refits_learn_each_run_from_its_features_at_submission(replayed: CheckedRandomForest) -> None:
    """The stacked arrival rows are the matrix a full causal sweep of the history gives."""
    np.testing.assert_array_equal(replayed.training_matrix(), build_features(replayed._finished))


def test_runs_finishing_at_the_submission_second_do_not_count() -> None:
    """The clock hands over a finish before an arrival at the same second; that run must wait
    for the next, later submission."""
    cluster = load_cluster("pai")
    speed = cluster.speed_table(default_speed_table())
    done, other = build_jobs(read_trace(PAI_SLICE, "pai", limit=2).records, cluster, speed, seed=0).jobs[:2]
    same_second = replace(other, job_id="same", user=done.user, group=done.group, submit_time_s=100.0)
    next_second = replace(same_second, job_id="next", submit_time_s=101.0)
    predictions = RandomForestPredictions()
    predictions.iterations(done)
    predictions.observe_finished(done, SimRecord(job=done), 100.0)
    predictions.iterations(same_second)
    predictions.iterations(next_second)
    for job_id, runs in (("same", 0), ("next", 1)):
        assert predictions._arrived[job_id][COLUMN["group_count"]] == runs
        assert predictions._arrived[job_id][COLUMN["user_count"]] == runs


def test_make_predictions_passes_the_unseen_policy() -> None:
    from asrpt.sim.predictors import DEFAULT_RF_UNSEEN_POLICY, make_predictions

    assert make_predictions("rf").unseen_policy == DEFAULT_RF_UNSEEN_POLICY
    assert make_predictions("rf", rf_unseen_policy="zero").unseen_policy == "zero"
    assert make_predictions("rf", rf_estimate="mean").estimate == "mean"


def test_late_submissions_and_adopted_runs_fall_back_to_the_rebuild() -> None:
    """A forecast replays from the present: jobs already running finish without having
    arrived, and queued jobs were submitted before runs already folded in."""
    cluster = load_cluster("pai")
    speed = cluster.speed_table(default_speed_table())
    first, second, third = build_jobs(read_trace(PAI_SLICE, "pai", limit=3).records, cluster, speed, seed=0).jobs[:3]
    adopted = replace(first, submit_time_s=0.0)
    queued = replace(second, user=first.user, group=first.group, submit_time_s=50.0)
    newer = replace(third, user=first.user, group=first.group, submit_time_s=200.0)
    predictions = RandomForestPredictions()
    predictions.observe_finished(adopted, SimRecord(job=adopted), 100.0)  # never arrived here
    predictions.iterations(newer)  # folds in the run that ended at 100
    predictions.iterations(queued)  # submitted at 50: must not see it
    assert predictions.rebuilds == 1
    assert predictions._arrived[queued.job_id][COLUMN["group_count"]] == 0
    assert predictions._arrived[newer.job_id][COLUMN["group_count"]] == 1
    np.testing.assert_array_equal(predictions.training_matrix(), build_features(predictions._finished))


def _pai_jobs(limit: int):
    cluster = load_cluster("pai")
    speed = cluster.speed_table(default_speed_table())
    return cluster, build_jobs(read_trace(PAI_SLICE, "pai", limit=limit).records, cluster, speed, seed=0).jobs


def test_pending_jobs_are_re_predicted_by_each_refit() -> None:
    """Jobs that arrive before the first fit are predicted from nothing; after a refit,
    ``annotate`` hands the policy the new forest's predictions, from the history finished
    before now, and the same Job objects until the next refit (so the policy skips them)."""
    from asrpt.core.model import ClusterSnapshot

    cluster, jobs = _pai_jobs(400)
    waiting, history = jobs[:40], jobs[40:]
    start = min(j.submit_time_s for j in history)
    waiting = [replace(j, submit_time_s=start - 1.0) for j in waiting]  # arrive before any finish
    for rerank in (True, False):
        predictions = RandomForestPredictions(first_fit_after=100, n_estimators=10, rerank=rerank)
        arrived = [predictions.predict(j, start - 1.0) for j in waiting]
        assert predictions.fits == 0
        for n, job in enumerate(sorted(history, key=lambda j: j.submit_time_s)):
            predictions.predict(job, job.submit_time_s)
            predictions.observe_finished(job, SimRecord(job=job), job.submit_time_s + 1.0 + n * 1e-3)
        assert predictions.fits >= 2
        now_s = max(j.submit_time_s for j in history) + 10.0
        snapshot = ClusterSnapshot(partitions=cluster.partitions, nodes=cluster.nodes, pending=tuple(arrived))
        annotated = predictions.annotate(snapshot, now_s)
        if not rerank:
            assert annotated is snapshot
            continue
        again = predictions.annotate(snapshot, now_s)
        assert all(a is b for a, b in zip(annotated.pending, again.pending))
        rows = []
        for job in arrived:
            row = build_features([*predictions._finished, replace(_row(job), submit_time_s=now_s)])[-1]
            row[[COLUMN["submit_hour"], COLUMN["submit_weekday"]]] = predictions._arrived[job.job_id][
                [COLUMN["submit_hour"], COLUMN["submit_weekday"]]]
            rows.append(row)
        expected = predictions._model.predict(np.vstack(rows))
        np.testing.assert_allclose([j.predicted_iterations for j in annotated.pending], expected)
        assert [j.predicted_iterations for j in annotated.pending] != [j.predicted_iterations for j in arrived]


def test_before_the_first_fit_an_unseen_job_starts_from_its_time_limit() -> None:
    """Nothing finished: no scale from seconds to iterations, so the job is unknown (None, which
    A-SRPT's cap reads as "as long as the limit allows"); then the finished jobs' ratio."""
    _, jobs = _pai_jobs(3)
    a, b = jobs[0], jobs[1]
    predictions = RandomForestPredictions(unseen_policy="model", unseen_reference="time_limit")
    job = replace(a, group="fresh", time_limit_s=3600.0)
    assert predictions.iterations(job) is None
    done = replace(b, group="done", true_iterations=100.0, time_limit_s=1000.0, submit_time_s=0.0)
    predictions.iterations(done)
    predictions.observe_finished(done, SimRecord(job=done), 1.0)
    later = replace(job, job_id="later", submit_time_s=job.submit_time_s + 10.0)
    assert predictions.iterations(later) == pytest.approx(np.expm1(np.log1p(3600.0) + np.log1p(100.0) - np.log1p(1000.0)))
    assert RandomForestPredictions(unseen_policy="zero").iterations(replace(job, job_id="z")) == 0.0
