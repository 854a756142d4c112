"""One job's unusable data must not stop the cycle for everybody: check it, or fall back.

Everything about a job comes from users (``#ASRPT`` lines, ``--comment asrpt:...``, the job
name) or from squeue, and any of it can be out of range for the speed table, the calendar or
a database column. :func:`usable_job` replaces each value the scheduler cannot use by what an
ordinary job has (the default workload class, plain data parallelism, no time limit, the
present as submit time) and says why; the daemon puts the reason in ``asrpt explain`` and
counts the job in ``asrpt_jobs_isolated_total``. Slurm still schedules the job as asked: only
asrpt's view of it is simplified.
"""

from __future__ import annotations

import math
from dataclasses import replace

from asrpt import comment_hints
from asrpt.core.model import Job, ParallelConfig
from asrpt.core.speed import SpeedTable

#: A submit time further ahead of the daemon's clock than this is a bad clock or bad data, s.
MAX_CLOCK_AHEAD_S = 86_400.0
#: Longest time limit taken literally (a century), seconds; beyond it the job has none.
MAX_TIME_LIMIT_S = 100 * 365 * 86_400.0
#: Largest iteration count taken literally (the wrapper's own limit for ``iterations=``).
MAX_ITERATIONS = 1e13
#: Largest parallel degree and micro-batch count taken literally (the wrapper's limits).
MAX_DEGREE = comment_hints.MAX_DEGREE
MAX_MICRO_BATCHES = comment_hints.MAX_MICRO_BATCHES


def _shown(value: object) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value)[:61])
    return repr(text if len(text) <= 60 else text[:57] + "...")


def usable_job(job: Job, now_s: float, speed: SpeedTable, default_class: str) -> tuple[Job, list[str]]:
    """``job`` with every value the scheduler cannot use replaced, and why (empty: all usable)."""
    reasons: list[str] = []
    changes: dict[str, object] = {}
    if not isinstance(job.workload_class, str) or not speed.knows_class(job.workload_class):
        fallback = default_class if speed.knows_class(default_class) else speed.workload_classes[0]
        known = ", ".join(speed.workload_classes[:8]) + (", ..." if len(speed.workload_classes) > 8 else "")
        reasons.append(f"workload class {_shown(job.workload_class)} is unknown (known: {known}); scheduled as {fallback}")
        changes["workload_class"] = fallback
    parallel = job.parallel
    if max(parallel.data, parallel.pipeline, parallel.tensor) > MAX_DEGREE or parallel.micro_batches > MAX_MICRO_BATCHES:
        reasons.append(
            f"layout {parallel.data}x{parallel.pipeline}x{parallel.tensor} with {_shown(parallel.micro_batches)} micro-batches "
            f"is beyond {MAX_DEGREE} per degree or {MAX_MICRO_BATCHES} micro-batches; scheduled as plain data parallel"
        )
        changes["parallel"] = ParallelConfig.data_parallel(parallel.workers)
    submit = job.submit_time_s
    if not (isinstance(submit, (int, float)) and math.isfinite(submit) and 0 <= submit <= now_s + MAX_CLOCK_AHEAD_S):
        reasons.append(f"submit time {_shown(submit)} is not a time up to a day from now; taken as now")
        changes["submit_time_s"] = float(now_s)
    limit = job.time_limit_s
    if limit is not None and not (math.isfinite(limit) and 0 < limit <= MAX_TIME_LIMIT_S):
        reasons.append(f"time limit {_shown(limit)} s is not a usable duration; treated as none")
        changes["time_limit_s"] = None
    predicted = job.predicted_iterations
    if predicted is not None and not (math.isfinite(predicted) and 0 <= predicted <= MAX_ITERATIONS):
        reasons.append(f"predicted iterations {_shown(predicted)} out of range; taken as unknown (0)")
        changes["predicted_iterations"] = 0.0
    # Names need no check here: the history's columns drop NUL and keep to their lengths
    # (asrpt.db.models.CleanText), and the scheduler only compares them.
    return (replace(job, **changes) if changes else job), reasons


def ordinary_job(job: Job, now_s: float, speed: SpeedTable, default_class: str) -> Job:
    """What asrpt assumes of a job it knows nothing about: Slurm's request and defaults."""
    plain = replace(
        job,
        workload_class=default_class,
        parallel=ParallelConfig.data_parallel(job.parallel.workers),
        predicted_iterations=0.0,
    )
    return usable_job(plain, now_s, speed, default_class)[0]
