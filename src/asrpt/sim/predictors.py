"""Where a simulated job's predicted iterations come from.

Each predictor sees a job once, when it arrives, and learns only from jobs that have already
finished in simulated time, so nothing from the future leaks into a prediction.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Protocol

from asrpt.core.model import ClusterSnapshot, Job
from asrpt.core.prediction import DEFAULT_RF_ESTIMATE, DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE
from asrpt.sim.cluster import JobRecord

PREDICTOR_NAMES: tuple[str, ...] = ("oracle", "history", "rf")


class SimPredictions(Protocol):
    def predict(self, job: Job, now_s: float) -> Job: ...

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None: ...

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot: ...


class _ArrivalPredictions:
    """Predict at arrival; the loop's ``annotate`` then has nothing left to do."""

    def predict(self, job: Job, now_s: float) -> Job:
        return replace(job, predicted_iterations=self.iterations(job, now_s))

    def iterations(self, job: Job, now_s: float) -> float:
        raise NotImplementedError

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None:
        return None

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        """Nothing to do: the engine calls ``predict`` for every job as it arrives."""
        return snapshot


class OraclePredictions(_ArrivalPredictions):
    """Perfect knowledge: the upper bound of what prediction can buy."""

    def iterations(self, job: Job, now_s: float) -> float:
        return float(job.true_iterations or 0.0)


class GroupHistoryPredictions(_ArrivalPredictions):
    """Median iterations of the same recurrence group's finished runs, then the user's; unseen
    jobs get ``unseen_iterations`` (0 by default: the A-SRPT paper lets them go first)."""

    def __init__(self, unseen_iterations: float = 0.0) -> None:
        self.unseen_iterations = unseen_iterations
        self._by_group: dict[str, list[float]] = {}
        self._by_user: dict[str, list[float]] = {}

    def iterations(self, job: Job, now_s: float) -> float:
        for table, key in ((self._by_group, job.group), (self._by_user, job.user)):
            seen = table.get(key) if key else None
            if seen:
                return statistics.median(seen[-20:])
        return self.unseen_iterations

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None:
        iterations = float(record.job.true_iterations or 0.0)
        if job.group:
            self._by_group.setdefault(job.group, []).append(iterations)
        if job.user:
            self._by_user.setdefault(job.user, []).append(iterations)




def make_predictions(
    name: str,
    *,
    seed: int = 0,
    rf_unseen_policy: str = DEFAULT_RF_UNSEEN_POLICY,
    rf_estimate: str = DEFAULT_RF_ESTIMATE,
    rf_unseen_residual_clip: float | None = None,
    rf_rerank: bool = True,
    rf_unseen_reference: str = DEFAULT_RF_UNSEEN_REFERENCE,
) -> SimPredictions:
    """The predictor called ``name`` (see ``PREDICTOR_NAMES``).

    ``rf_unseen_policy`` is what rf predicts for a job whose group has no finished run
    (:data:`asrpt.predict.predictor.UNSEEN_POLICIES`); "zero" is the paper's rule, which on
    the PAI trace predicts 0 for 70 % of arrivals. ``rf_unseen_reference`` is where such a
    job's prediction starts (``"time_limit"``: its limit scaled by the typical ratio);
    ``rf_estimate`` is the point of the forest's distribution used
    (:data:`asrpt.predict.predictor.ESTIMATES`); ``rf_rerank`` re-predicts pending jobs after
    each refit. The defaults are in :mod:`asrpt.core.prediction`.
    """
    if name == "oracle":
        return OraclePredictions()
    if name == "history":
        return GroupHistoryPredictions()
    if name == "rf":
        from asrpt.sim.rf_predictions import RandomForestPredictions

        return RandomForestPredictions(
            random_state=seed, unseen_policy=rf_unseen_policy, estimate=rf_estimate,
            unseen_residual_clip=rf_unseen_residual_clip, rerank=rf_rerank,
            unseen_reference=rf_unseen_reference,
        )
    raise ValueError(f"unknown predictor {name!r}; valid: {', '.join(PREDICTOR_NAMES)}")
