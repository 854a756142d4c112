"""The random-forest predictor inside a replay, learning only from what has finished.

The forest is refitted whenever the finished history has grown by half since the last fit
(so fitting costs O(n log n) over a replay, not O(n^2)). A job's causal history features come
from the finished runs of its own group and user, the only rows its aggregates depend on,
capped at the most recent ``history_cap`` of each so that heavy users stay cheap; the count
features saturate at that cap.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from asrpt.core.model import ClusterSnapshot, Job
from asrpt.predict.features import JobRecord as FeatureRow
from asrpt.predict.features import build_features
from asrpt.predict.predictor import IterationPredictor
from asrpt.sim.cluster import JobRecord


def _row(job: Job, end_time_s: float | None = None, iterations: float | None = None) -> FeatureRow:
    return FeatureRow(
        job_id=job.job_id,
        user=job.user,
        submit_time_s=job.submit_time_s,
        group=job.group or None,
        partitions=job.allowed_partitions,
        accelerators=float(job.accelerators),
        accelerator_type=job.allowed_accelerators[0] if job.allowed_accelerators else None,
        parallel_data=job.parallel.data,
        parallel_pipeline=job.parallel.pipeline,
        parallel_tensor=job.parallel.tensor,
        model_name=job.workload_class,
        time_limit_s=job.time_limit_s,
        end_time_s=end_time_s,
        iterations=iterations,
    )


class RandomForestPredictions:
    def __init__(
        self,
        *,
        random_state: int = 0,
        unseen_policy: str = "zero",
        first_fit_after: int = 100,
        growth: float = 1.5,
        history_cap: int = 200,
        n_estimators: int = 50,
    ) -> None:
        self.random_state = random_state
        self.unseen_policy = unseen_policy
        self.growth = growth
        self.history_cap = history_cap
        self.n_estimators = n_estimators
        self._next_fit = first_fit_after
        self._finished: list[FeatureRow] = []
        self._by_group: dict[str, list[FeatureRow]] = {}
        self._by_user: dict[str, list[FeatureRow]] = {}
        self._model: IterationPredictor | None = None
        self.fits = 0

    def predict(self, job: Job, now_s: float) -> Job:
        return replace(job, predicted_iterations=self.iterations(job))

    def iterations(self, job: Job) -> float:
        if self._model is None:
            return 0.0
        own = _row(job)
        seen: dict[str, FeatureRow] = {}
        for table, key in ((self._by_group, own.group), (self._by_user, own.user)):
            for row in table.get(key or "", [])[-self.history_cap :]:
                seen[row.job_id] = row
        features = build_features([*seen.values(), own])[-1:]
        return float(self._model.predict(features)[0])

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None:
        row = _row(record.job, end_time_s=now_s, iterations=float(record.job.true_iterations or 0.0))
        self._finished.append(row)
        if row.group:
            self._by_group.setdefault(row.group, []).append(row)
        self._by_user.setdefault(row.user, []).append(row)
        if len(self._finished) >= self._next_fit:
            self._fit()
            self._next_fit = int(len(self._finished) * self.growth) + 1

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        """Nothing to do: the engine calls ``predict`` for every job as it arrives."""
        return snapshot

    def _fit(self) -> None:
        X = build_features(self._finished)
        y = np.array([row.iterations for row in self._finished], dtype=float)
        self._model = IterationPredictor(
            n_estimators=self.n_estimators, random_state=self.random_state, unseen_policy=self.unseen_policy, n_jobs=1
        ).fit(X, y)
        self.fits += 1
