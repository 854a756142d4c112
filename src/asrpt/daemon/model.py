"""The daemon's iteration predictor: retrained on a schedule from the history, used to predict
each new job once. The model lives in the daemon's memory only; predictions go to the database,
which is all the CLI ever reads."""

from __future__ import annotations

import logging
import math

import numpy as np

from asrpt.core.prediction import DEFAULT_RF_ESTIMATE, DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE
from asrpt.db.repository import HistoryRepository, HistoryRow, SubmissionRecord
from asrpt.predict.features import JobRecord, build_features
from asrpt.predict.predictor import IterationPredictor

log = logging.getLogger(__name__)


def _row(submission: SubmissionRecord) -> JobRecord:
    return JobRecord(
        job_id=submission.slurm_job_id,
        user=submission.user,
        submit_time_s=submission.submit_time_s,
        job_name=submission.job_name,
        group=submission.recurrence_group or submission.script_hash,
        partitions=submission.partitions,
        accelerators=float(submission.accelerators) if submission.accelerators else None,
        accelerator_type=submission.accelerator_type,
        parallel_data=submission.parallel_data,
        parallel_pipeline=submission.parallel_pipeline,
        parallel_tensor=submission.parallel_tensor,
        model_name=submission.model_name or submission.workload_class,
        time_limit_s=submission.time_limit_s,
        iterations_hint=submission.iterations_hint,
    )


class DaemonPredictor:
    """Holds the current forest (the daemon always predicts with it once trained; the unseen
    rule and the estimate come from ``[scheduler]``); before there is enough history it falls
    back to the user's hint, then to 0."""

    def __init__(
        self,
        repository: HistoryRepository,
        *,
        unseen_policy: str = DEFAULT_RF_UNSEEN_POLICY,
        estimate: str = DEFAULT_RF_ESTIMATE,
        unseen_reference: str = DEFAULT_RF_UNSEEN_REFERENCE,
        min_rows: int = 20,
        random_state: int = 0,
    ):
        self.repository = repository
        self.unseen_policy = unseen_policy
        self.estimate = estimate
        self.unseen_reference = unseen_reference
        self.min_rows = min_rows
        self.random_state = random_state
        self.model: IterationPredictor | None = None
        self.version = "untrained"
        self._history: list[HistoryRow] = []
        #: The rows the current forest was fitted on.
        self._fitted_rows: list[HistoryRow] = []

    def retrain(self, now_s: float) -> int:
        """Fit on every finished job with a known iteration count; returns the rows used (0
        when there are too few, or none finished since the last fit)."""
        rows = [r for r in self.repository.history_rows(finished_only=True) if r.iterations is not None]
        self._history = rows
        if len(rows) < self.min_rows:
            log.info("retrain: %d finished jobs with iterations, need %d; keeping %s", len(rows), self.min_rows, self.version)
            return 0
        if self.model is not None and rows == self._fitted_rows:
            # Nothing finished since: the same rows and seed give the same forest, and every
            # pending job's prediction would be written again for nothing.
            log.debug("retrain: no new finished job since %s", self.version)
            return 0
        X = build_features(rows)
        y = np.array([float(r.iterations) for r in rows], dtype=float)
        self.model = IterationPredictor(
            random_state=self.random_state, unseen_policy=self.unseen_policy, estimate=self.estimate,
            unseen_reference=self.unseen_reference, n_jobs=1,
        ).fit(X, y)
        self._fitted_rows = rows
        self.version = f"rf-{len(rows)}-{int(now_s)}"
        log.info("retrained the iteration predictor on %d jobs (%s)", len(rows), self.version)
        return len(rows)

    def predict(self, submissions: list[SubmissionRecord]) -> list[float]:
        if self.model is None:
            return [float(s.iterations_hint) if s.iterations_hint and math.isfinite(s.iterations_hint) else 0.0 for s in submissions]
        rows = [*self._history, *(_row(s) for s in submissions)]
        features = build_features(rows)[len(self._history):]
        return [float(v) for v in self.model.predict(features)]
