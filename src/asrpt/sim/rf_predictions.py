"""The random-forest predictor inside a replay, learning only from what has finished.

A job is featurised once, when it arrives, from the aggregates of every run finished before
its submission (:class:`~asrpt.predict.features.CausalHistory`, kept up to date as jobs
finish): O(1) per job instead of a feature rebuild per prediction. The same row is its
training row once it has finished, because a job's features depend only on history older
than its submission; so a refit stacks rows already built instead of re-sweeping the whole
history. Both equal what :func:`~asrpt.predict.features.build_features` computes from
scratch (tests pin it).

The forest is refitted whenever the finished history has grown by half since the last fit
(so fitting costs O(n log n) over a replay, not O(n^2)).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from asrpt.core.model import ClusterSnapshot, Job
from asrpt.predict.features import COLUMN, MISSING, CausalHistory, build_features
from asrpt.predict.features import JobRecord as FeatureRow
from asrpt.predict.predictor import REFERENCE_CHAIN, IterationPredictor
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


#: Columns of a row that come from its submission time, kept from arrival on a re-rank.
_SUBMIT_COLUMNS = [COLUMN["submit_hour"], COLUMN["submit_weekday"]]


class RandomForestPredictions:
    def __init__(
        self,
        *,
        random_state: int = 0,
        unseen_policy: str = "zero",
        first_fit_after: int = 100,
        growth: float = 1.5,
        n_estimators: int = 50,
        estimate: str = "median",
        rerank: bool = True,
        unseen_residual_clip: float | None = None,
        unseen_reference: str = "history",
    ) -> None:
        self.unseen_reference = unseen_reference
        self.unseen_residual_clip = unseen_residual_clip
        self.random_state = random_state
        self.unseen_policy = unseen_policy
        self.estimate = estimate
        self.growth = growth
        self.n_estimators = n_estimators
        self._next_fit = first_fit_after
        self._finished: list[FeatureRow] = []
        self._history = CausalHistory()
        #: Feature row of each job that arrived and has not finished yet, by job id.
        self._arrived: dict[str, np.ndarray] = {}
        #: Training rows, parallel to ``_finished``; None once a finished job's arrival row
        #: is unknown (it was running before the replay started): refits then rebuild.
        self._train_rows: list[np.ndarray] | None = []
        self._model: IterationPredictor | None = None
        self.fits = 0
        #: Arrivals featurised by a full rebuild (submitted before history already folded in).
        self.rebuilds = 0
        #: Re-rank pending jobs after every refit (``annotate``); False predicts once, at arrival.
        self.rerank = rerank
        #: Refit count the pending jobs were last re-predicted with.
        self._ranked_fits = 0
        #: job id -> (the backend's Job, the same Job with the re-predicted iterations).
        self._reranked: dict[str, tuple[Job, Job]] = {}

    def predict(self, job: Job, now_s: float) -> Job:
        return replace(job, predicted_iterations=self.iterations(job))

    def iterations(self, job: Job) -> float | None:
        own = _row(job)
        features = self._history.features(own)
        if features is None:
            features = build_features([*self._finished, own])[-1]
            self.rebuilds += 1
        self._arrived[job.job_id] = features
        if self._model is None:
            return self._before_first_fit(features)
        return float(self._model.predict_unchecked(features[np.newaxis, :])[0])

    def _before_first_fit(self, features: np.ndarray) -> float | None:
        """Until the first fit: the most specific history median the job has (the forest's
        reference, without its correction); with no history, the paper's 0 under ``zero``;
        with the ``time_limit`` reference, the limit x the finished jobs' median ratio, or
        None (unknown) before any has finished: the limit is in seconds, iterations need the
        job's speed, and A-SRPT's cap turns "unknown" into what fits in the limit. Otherwise
        the median of what has finished so far (0 while nothing has)."""
        if self.unseen_policy == "zero" and features[COLUMN["group_count"]] <= 0:
            return 0.0
        log_limit = features[COLUMN["log_time_limit"]]
        if self.unseen_reference == "time_limit" and features[COLUMN["group_count"]] <= 0 and log_limit != MISSING:
            # The time limit scaled by the finished runs' median ratio (1 before any finished).
            ratios = [math.log1p(r.iterations or 0.0) - math.log1p(r.time_limit_s)
                      for r in self._finished if r.time_limit_s is not None]
            if not ratios:
                return None  # unknown: A-SRPT believes what fits in the limit (its cap)
            return float(np.expm1(log_limit + float(np.median(ratios))))
        for key in reversed(REFERENCE_CHAIN):  # most specific first
            if features[COLUMN[f"{key}_count"]] > 0:
                return float(np.expm1(features[COLUMN[f"{key}_median"]]))
        if not self._finished:
            return 0.0
        return float(np.median([row.iterations or 0.0 for row in self._finished]))

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None:
        row = _row(record.job, end_time_s=now_s, iterations=float(record.job.true_iterations or 0.0))
        self._finished.append(row)
        self._history.add_finished(row)
        features = self._arrived.pop(record.job.job_id, None)
        if features is None:
            self._train_rows = None
        elif self._train_rows is not None:
            self._train_rows.append(features)
        if len(self._finished) >= self._next_fit:
            self._fit()
            self._next_fit = int(len(self._finished) * self.growth) + 1

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        """Pending jobs with their predictions as of the latest refit (``rerank``).

        A job is predicted at arrival from what had finished by then; on a burst of arrivals
        (the first 1,000 Philly jobs arrive before 100 finish) that is nothing, and a job
        predicted before the first fit would keep its guess while the forest learns. After
        each refit every pending job is re-predicted by the new forest from the history
        finished before now (its request columns and submission time stay its own).
        """
        if not self.rerank or self._model is None:
            return snapshot
        if self._ranked_fits != self.fits:
            self._ranked_fits = self.fits
            self._rerank(snapshot, now_s)
        if not self._reranked:
            return snapshot
        pending = []
        still: dict[str, tuple[Job, Job]] = {}
        for job in snapshot.pending:
            hit = self._reranked.get(job.job_id)
            if hit is not None and hit[0] is job:
                still[job.job_id] = hit
                job = hit[1]
            pending.append(job)
        # Forget jobs that started or were replaced, so that once none is left the backend's
        # live view goes through again (policies then update from its change log, not rescan).
        self._reranked = still
        if not still:
            return snapshot
        return replace(snapshot, pending=tuple(pending))

    def _rerank(self, snapshot: ClusterSnapshot, now_s: float) -> None:
        jobs = list(snapshot.pending)
        if not jobs or self._model is None:
            self._reranked = {}
            return
        rows = []
        for job in jobs:
            arrival = self._arrived.get(job.job_id)
            now_row = self._history.features(replace(_row(job), submit_time_s=now_s))
            if now_row is None:
                now_row = build_features([*self._finished, replace(_row(job), submit_time_s=now_s)])[-1]
            if arrival is not None:
                now_row[_SUBMIT_COLUMNS] = arrival[_SUBMIT_COLUMNS]
            rows.append(now_row)
        predicted = self._model.predict_unchecked(np.vstack(rows))
        self._reranked = {
            job.job_id: (job, replace(job, predicted_iterations=float(value))) for job, value in zip(jobs, predicted)
        }

    def training_matrix(self) -> np.ndarray:
        """Features of every finished job as of its submission (the rows a refit learns from)."""
        if self._train_rows is None:
            return build_features(self._finished)
        return np.vstack(self._train_rows) if self._train_rows else build_features([])

    def _fit(self) -> None:
        X = self.training_matrix()
        y = np.array([row.iterations for row in self._finished], dtype=float)
        self._model = IterationPredictor(
            n_estimators=self.n_estimators, random_state=self.random_state, unseen_policy=self.unseen_policy,
            estimate=self.estimate, unseen_residual_clip=self.unseen_residual_clip,
            unseen_reference=self.unseen_reference, n_jobs=1,
        ).fit(X, y)
        self.fits += 1
