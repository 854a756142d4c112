"""What the daemon adds to Slurm's view of a job before the policy sees it.

Slurm knows who asked for how many accelerators of which type. The history knows more: the
wrapper's ``#ASRPT`` directives (workload class, parallel layout, the user's iteration hint)
and, from past runs, a predicted iteration count. This module is the loop's ``Predictions``
step for the daemon: it ingests the spool, records every job it sees, predicts new jobs once
(the prediction is stored, so a restart does not re-predict), and raises the prediction of a
running job that outlives it. A pending LLM serving job (``#ASRPT serve-model=NAME``) is then
placed by its model's serving plan (:mod:`asrpt.daemon.serving`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from asrpt.core.model import ClusterSnapshot, Job, ParallelConfig, RunningJob
from asrpt.daemon.serving import ServingPlanner
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.exceptions import AsrptError
from asrpt.predict.predictor import raise_underestimate
from asrpt.slurm.records import SlurmJob

log = logging.getLogger(__name__)

#: ``predict(job_rows)`` -> iterations per row; the daemon's current model (or the unseen rule).
PredictFunction = Callable[[list[SubmissionRecord]], list[float]]
#: ``check(job, now_s)`` -> (the job with unusable values replaced, why); see asrpt.daemon.isolate.
CheckFunction = Callable[[Job, float], tuple[Job, list[str]]]
#: ``plain(job, now_s)`` -> the job as asrpt sees a job it knows nothing about.
PlainFunction = Callable[[Job, float], Job]


@dataclass(slots=True)
class _Known:
    """What is cached per job id so a cycle does no database work for jobs it has seen."""

    predicted_iterations: float
    workload_class: str | None
    parallel: ParallelConfig | None
    group: str
    #: ``#ASRPT serve-model=NAME``, and ``tp=N`` (None for ``tp=auto`` or no tp).
    serve_model: str | None = None
    serve_tensor: int | None = None
    #: Why the history could not be used for this job (it is scheduled as an ordinary job).
    isolated: str | None = None
    #: Predicted 0 when first seen (no history, no hint, or unusable data): the raises that
    #: follow while it runs are a bound growing with its run time, not a forecast of its end.
    length_unknown: bool = False


class HistoryEnrichment:
    def __init__(
        self,
        repository: HistoryRepository,
        predict: PredictFunction,
        *,
        slurm_jobs: Callable[[], Mapping[str, SlurmJob]],
        ingest: Callable[[Mapping[str, SlurmJob]], int] | None = None,
        model_version: Callable[[], str] = lambda: "none",
        serving: ServingPlanner | None = None,
        check: CheckFunction | None = None,
        plain: PlainFunction | None = None,
    ) -> None:
        self.repository = repository
        self.check = check
        self.plain = plain
        #: This cycle's reasons per job for data that could not be used (for asrpt explain).
        self._reasons: dict[str, list[str]] = {}
        #: Live jobs already counted in :attr:`isolated_total`.
        self._isolated_ids: set[str] = set()
        #: (job id, reason) already logged: a job with unusable data warns once, not every cycle.
        self._logged: set[tuple[str, str]] = set()
        #: Jobs whose own data could not be used, each counted once.
        self.isolated_total = 0
        self.predict = predict
        self.slurm_jobs = slurm_jobs
        self.ingest = ingest
        self.model_version = model_version
        self.serving = serving
        self._known: dict[str, _Known] = {}
        #: Set by :meth:`repredict_pending`: the next cycle predicts its pending jobs again.
        self._repredict_pending = False
        #: Pending jobs to predict again in this cycle although a prediction is stored.
        self._repredict: set[str] = set()

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        self._reasons = {}
        jobs = self.slurm_jobs()
        if self.ingest is not None:
            self.ingest(jobs)
        # Slurm's view first (a comment hint or squeue field can be unusable), then the history's.
        snapshot = replace(
            snapshot,
            pending=tuple(self._check(j, now_s) for j in snapshot.pending),
            running=tuple(replace(r, job=self._check(r.job, now_s)) for r in snapshot.running),
        )
        if self._repredict_pending:
            self._repredict_pending = False
            for job in snapshot.pending:
                known = self._known.get(job.job_id)
                if known is not None and not known.isolated:
                    del self._known[job.job_id]
                    self._repredict.add(job.job_id)
        everyone = [*snapshot.pending, *(r.job for r in snapshot.running)]
        self._learn([j for j in everyone if j.job_id not in self._known], jobs, now_s)
        live = {j.job_id for j in everyone}
        for job_id in [j for j in self._known if j not in live]:
            del self._known[job_id]
        if self.serving is not None:
            self.serving.begin_cycle(snapshot, live)
        pending = tuple(
            self._guarded(job, now_s, lambda j: self._check(self._served(self._enriched(j)), now_s)) for job in snapshot.pending
        )
        running = tuple(self._guarded_running(r, now_s) for r in snapshot.running)
        for job_id, known in self._known.items():
            if known.isolated:
                self.note(job_id, known.isolated)
        self._isolated_ids &= live
        self._logged = {entry for entry in self._logged if entry[0] in live}
        fresh = set(self._reasons) - self._isolated_ids
        self.isolated_total += len(fresh)
        self._isolated_ids |= fresh
        return replace(snapshot, pending=pending, running=running)

    def note(self, job_id: str, reason: str) -> None:
        """Record why ``job_id``'s data was not used as given (shown by ``asrpt explain``)."""
        reasons = self._reasons.setdefault(job_id, [])
        if reason not in reasons:
            reasons.append(reason)
            if (job_id, reason) not in self._logged:  # once per job and reason, not every cycle
                self._logged.add((job_id, reason))
                log.warning("job %s: %s", job_id, reason, extra={"action": "job_isolated", "job_id": job_id})

    def isolate(self, job_id: str, reason: str) -> None:
        """Note why ``job_id`` is scheduled as an ordinary job, counted once per job."""
        self.note(job_id, reason)
        if job_id not in self._isolated_ids:
            self._isolated_ids.add(job_id)
            self.isolated_total += 1

    @property
    def notes(self) -> dict[str, str]:
        """Each job's note for ``asrpt explain``: its serving placement, and what of its data
        could not be used."""
        merged = {job_id: [note] for job_id, note in self.serving_notes.items()}
        for job_id, reasons in self._reasons.items():
            merged.setdefault(job_id, []).extend(reasons)
        return {job_id: "; ".join(parts) for job_id, parts in merged.items()}

    def _check(self, job: Job, now_s: float) -> Job:
        if self.check is None:
            return job
        checked, reasons = self.check(job, now_s)
        for reason in reasons:
            self.note(job.job_id, reason)
        return checked

    def _fallback(self, job: Job, now_s: float, error: Exception) -> Job:
        """The job as an ordinary one, when using its own data raised ``error``."""
        self.note(job.job_id, f"its data could not be used ({type(error).__name__}: {error}); scheduled as an ordinary job")
        return self.plain(job, now_s) if self.plain is not None else job

    def _guarded(self, job: Job, now_s: float, work: Callable[[Job], Job]) -> Job:
        """``work(job)``; an error that is not asrpt's own (a database outage is) isolates the job."""
        try:
            return work(job)
        except AsrptError:
            raise
        except Exception as error:
            return self._fallback(job, now_s, error)

    def _guarded_running(self, running: RunningJob, now_s: float) -> RunningJob:
        try:
            raised = self._raised(running, now_s)
            return replace(raised, job=self._check(raised.job, now_s))
        except AsrptError:
            raise
        except Exception as error:
            return replace(running, job=self._fallback(running.job, now_s, error))

    def repredict_pending(self) -> None:
        """After a retrain: the next cycle predicts every pending job again with the new model
        (a job is otherwise predicted once, when first seen, from the model of that moment,
        and a queue that formed before the first fit would keep 0 or its hint for good).
        Running jobs keep theirs (and their raises)."""
        self._repredict_pending = True

    def length_unknown(self, job: Job) -> bool:
        """Whether ``job``'s end cannot be forecast: it had no prediction when first seen
        (doubling it while it runs keeps the order honest, but is no estimate of its end)."""
        known = self._known.get(job.job_id)
        if known is not None:
            return known.length_unknown
        return not job.predicted_iterations or job.predicted_iterations <= 0

    def forget(self, job_id: str) -> None:
        """Drop the cached view of a job (its prediction changed elsewhere)."""
        self._known.pop(job_id, None)

    # -- internals ---------------------------------------------------------------------------
    def _learn(self, new_jobs: list[Job], slurm: Mapping[str, SlurmJob], now_s: float) -> None:
        if not new_jobs:
            return
        stored = self.repository.latest_predictions([j.job_id for j in new_jobs])
        to_predict: list[tuple[Job, SubmissionRecord]] = []
        for job in new_jobs:
            try:
                submission = self.repository.get_submission(job.job_id) or self._array_submission(job.job_id)
                if submission is None or submission.source == "wrapper" and submission.accelerators is None:
                    submission = self._record_from_slurm(job, slurm.get(job.job_id), submission)
                prediction = stored.get(job.job_id)
                if prediction is None or job.job_id in self._repredict:
                    to_predict.append((job, submission))
                    continue
                self._known[job.job_id] = self._known_from(submission, prediction.predicted_iterations, job)
            except AsrptError:
                raise
            except Exception as error:
                self._isolate_known(job, error)
        self._repredict.difference_update(j.job_id for j in new_jobs)
        if to_predict:
            version = self.model_version()
            for (job, submission), iterations in zip(to_predict, self._predictions([s for _, s in to_predict])):
                try:
                    if isinstance(iterations, Exception):
                        raise iterations
                    iterations = float(iterations)
                    iterations = iterations if math.isfinite(iterations) and iterations > 0 else 0.0
                    self.repository.record_prediction(
                        job.job_id, predicted_iterations=iterations, model_version=version, made_at_s=now_s
                    )
                    self._known[job.job_id] = self._known_from(submission, iterations, job)
                except AsrptError:
                    raise
                except Exception as error:
                    self._isolate_known(job, error)

    def _predictions(self, rows: list[SubmissionRecord]) -> list[float | Exception]:
        """One batched prediction; if the batch fails, row by row, so one row cannot sink the rest."""
        try:
            return list(self.predict(rows))
        except AsrptError:
            raise
        except Exception:
            values: list[float | Exception] = []
            for row in rows:
                try:
                    values.append(self.predict([row])[0])
                except AsrptError:
                    raise
                except Exception as error:
                    values.append(error)
            return values

    def _array_submission(self, job_id: str) -> SubmissionRecord | None:
        """A job array task's own history row, copied from what the array's submission said
        (the wrapper and the plugin record the id sbatch printed, the array's): each task is
        a job of its own in the history, with the script, hints and group of its array."""
        array_id, sep, _task = job_id.partition("_")
        if not sep:
            return None
        array = self.repository.get_submission(array_id)
        if array is None:
            return None
        self.repository.record_submission(replace(array, slurm_job_id=job_id))
        return self.repository.get_submission(job_id)

    def _isolate_known(self, job: Job, error: Exception) -> None:
        """Remember that ``job``'s history cannot be used: it stays an ordinary job (and is not
        retried every cycle) until it leaves the queue or the daemon restarts."""
        reason = f"its history could not be used ({type(error).__name__}: {str(error)[:200]}); scheduled as an ordinary job"
        self._known[job.job_id] = _Known(0.0, None, None, job.group, isolated=reason, length_unknown=True)

    def _record_from_slurm(self, job: Job, slurm_job: SlurmJob | None, wrapper: SubmissionRecord | None = None) -> SubmissionRecord:
        """Every job gets a history row, wrapper or not: what Slurm itself reports.

        When the wrapper's record is already stored, what it says about the work is left to
        it: Slurm's layout, class and group are only comment hints or defaults, and (Slurm
        outranking the wrapper in the merge rule) they would replace the user's ``#ASRPT``
        degrees and class and the script's recurrence group, or make a serving job's absent
        ``tp`` look like an explicit ``tp=1``.
        """
        layout = wrapper is None or not (
            wrapper.serve_model
            or any(v is not None for v in (wrapper.parallel_data, wrapper.parallel_pipeline, wrapper.parallel_tensor, wrapper.micro_batches))
        )
        workload_class = job.workload_class if wrapper is None or wrapper.workload_class is None else None
        group = (job.group or None) if wrapper is None or wrapper.recurrence_group is None else None
        record = SubmissionRecord(
            slurm_job_id=job.job_id,
            user=job.user or (slurm_job.user if slurm_job else "") or "unknown",
            submit_time_s=job.submit_time_s,
            source="slurm",
            job_name=slurm_job.name if slurm_job and slurm_job.name else None,
            partitions=slurm_job.partitions if slurm_job else job.allowed_partitions,
            accelerators=job.accelerators,
            accelerator_type=job.allowed_accelerators[0] if job.allowed_accelerators else None,
            parallel_data=job.parallel.data if layout else None,
            parallel_pipeline=job.parallel.pipeline if layout else None,
            parallel_tensor=job.parallel.tensor if layout else None,
            micro_batches=job.parallel.micro_batches if layout else None,
            workload_class=workload_class,
            recurrence_group=group,
            time_limit_s=job.time_limit_s,
        )
        self.repository.record_submission(record)
        return self.repository.get_submission(job.job_id) or record

    @staticmethod
    def _known_from(submission: SubmissionRecord, iterations: float, job: Job) -> _Known:
        parallel = None
        d, p, t = submission.parallel_data, submission.parallel_pipeline, submission.parallel_tensor
        if d and p and t and d * p * t == job.accelerators:
            parallel = ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=submission.micro_batches or 1)
        group = submission.recurrence_group or submission.script_hash or job.group
        serve_tensor = None if submission.parallel_tensor_auto else submission.parallel_tensor
        return _Known(iterations, submission.workload_class, parallel, group or "", submission.serve_model, serve_tensor,
                      length_unknown=not iterations > 0)

    def _enriched(self, job: Job) -> Job:
        known = self._known.get(job.job_id)
        if known is None:
            return job
        return replace(
            job,
            predicted_iterations=known.predicted_iterations,
            workload_class=known.workload_class or job.workload_class,
            parallel=known.parallel or job.parallel,
            group=known.group or job.group,
        )

    def _served(self, job: Job) -> Job:
        """A pending serving job restricted to its plan's partition, with the plan's layout."""
        known = self._known.get(job.job_id)
        if known is None or not known.serve_model or self.serving is None:
            return job
        return self.serving.apply(job, known.serve_model, known.serve_tensor)

    @property
    def serving_notes(self) -> dict[str, str]:
        """Each pending serving job's placement note (for ``asrpt explain``)."""
        return dict(self.serving.notes) if self.serving is not None else {}

    def _raised(self, running: RunningJob, now_s: float) -> RunningJob:
        """A running job past its prediction gets it raised (doubled until above what it has
        done), recorded, so that the order and the forecasts stay honest."""
        job = self._enriched(running.job)
        alpha_s = running.placement.iteration_time_s
        predicted = job.predicted_iterations or 0.0
        if alpha_s > 0 and not math.isinf(alpha_s):
            attained = (now_s - running.start_time_s) / alpha_s
            if attained > predicted:
                raised = raise_underestimate(predicted, attained)
                self.repository.record_prediction(
                    job.job_id, predicted_iterations=raised, model_version="raised", made_at_s=now_s
                )
                self._known[job.job_id].predicted_iterations = raised
                job = replace(job, predicted_iterations=raised)
                log.info("job %s ran past its prediction: raised to %.0f iterations", job.job_id, raised)
        return replace(running, job=job)
