"""What slurmctld starts on its own with what the daemon wrote, for ``SimCluster``.

The daemon only writes priorities (the decision's starts first, then its order), node lists
for the starts and holds (:mod:`asrpt.slurm.cli_backend`). Slurm starts the pinned starts at
once, and then its main scheduler and its backfill start *any* other pending job that is not
held and fits, in priority order: a job the policy chose not to start (A-SRPT's release
gating, a strict head-of-line wait, a job missing from the order) runs anyway if it fits.
Modelling that keeps the simulator from crediting a policy with control it does not have.

The model is the core's own dispatcher, not a second one: mode ``backfill`` (a job that does
not fit gets a reservation at its earliest start by the running jobs' time limits; later
jobs start only if they do not delay it, and the main scheduler's starts are the subset of
these that fit outright), runtimes = time limits (Slurm's backfill trusts them; a job without
one never starts in front of a reservation), no communication-heavy holds, ``depth`` like
``bf_max_job_test``, unpinned jobs placed by Heavy-Edge. Simplifications: only the first
blocked job gets a reservation (Slurm's backfill reserves for each one it tests), the whole
order is honoured (the daemon gives jobs beyond its ``ordered_limit`` one floor priority), and
a job starts in the same pass as the starts (Slurm needs up to a scheduling interval).
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Mapping, Sequence

from asrpt.core.dispatch import DispatchMemo, DispatchOptions, FreeCapacity, dispatch
from asrpt.core.model import ClusterSnapshot, Job, LazyOrder, Node, Partition, Placement, RequestShape
from asrpt.core.speed import SpeedTable
from asrpt.core.srpt import id_sort_key

#: Slurm's default ``bf_max_job_test``.
BF_MAX_JOB_TEST = 100


def time_limit_runtime_s(job: Job, iteration_time_s: float) -> float:
    """What Slurm's backfill believes a job runs: its time limit (unknown: forever)."""
    limit = job.time_limit_s
    return limit if limit is not None and limit > 0 else math.inf


def _no_ideal_s(job: Job) -> float:
    return 0.0  # only used for communication-heavy holds, which Slurm does not make


class SlurmScheduler:
    """slurmctld's pass over the pending jobs after the daemon's writes, with a cheap test
    first: most events leave no job that could fit, and building the priority order (sorting
    every pending job) and walking it at each of them would dominate a long replay."""

    def __init__(self, partitions: Sequence[Partition], speed: SpeedTable, depth: int = BF_MAX_JOB_TEST) -> None:
        self.partitions = tuple(partitions)
        self.speed = speed
        self.options = DispatchOptions(mode="backfill", comm_heavy_tau=0.0, backfill_depth=depth)
        #: What the passes reuse between events (the policy keeps its own).
        self.dispatch_memo: DispatchMemo | None = DispatchMemo()
        #: Pending jobs per (allowed partitions, allowed accelerators, request shape,
        #: accelerators): how many, and one of them (whether a job fits depends on no more).
        self._counts: dict[_FitKey, int] = {}
        self._example: dict[_FitKey, Job] = {}

    # -- kept up to date by SimCluster ------------------------------------------------------
    def added(self, job: Job) -> None:
        key = _key(job)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._example.setdefault(key, job)

    def removed(self, job: Job) -> None:
        key = _key(job)
        left = self._counts[key] - 1
        if left:
            self._counts[key] = left
        else:
            del self._counts[key]

    # -- the pass ---------------------------------------------------------------------------
    def could_start(self, nodes: tuple[Node, ...], held: Iterable[Job]) -> bool:
        """Whether some pending job that is not held fits now, in its request's shape, in a
        partition it may use (necessary for Slurm to start anything: the pass starts only jobs
        that fit; a dictionary look-up per kind of job, on the capacity the pass then uses)."""
        free = FreeCapacity.of(nodes, self.dispatch_memo)
        if free.free_total <= 0:
            return False
        counts = self._counts
        held_counts: dict[_FitKey, int] = {}
        for job in held:
            key = _key(job)
            held_counts[key] = held_counts.get(key, 0) + 1
        for key, count in counts.items():
            if count <= held_counts.get(key, 0):
                continue
            if free.fits(self.partitions, self._example[key]):
                return True
        return False

    def starts(self, snapshot: ClusterSnapshot, now_s: float, priority_order: Iterable[str],
               pending: Mapping[str, Job], held: set[str]) -> list[Placement]:
        """What Slurm starts: the pending, not held jobs in ``priority_order`` (ids, highest
        first; ids not pending are skipped), then the ones it leaves out by submit time and
        id (priority/basic numbers new jobs that way), through the backfill dispatcher."""
        result = dispatch(
            _queue(priority_order, pending, held),
            snapshot,
            now_s,
            speed=self.speed,
            options=self.options,
            runtime_s=time_limit_runtime_s,
            alpha_min_s=_no_ideal_s,
            first_blocked_s={},
            memo=self.dispatch_memo,
        )
        return result.starts


_FitKey = tuple[tuple[str, ...], tuple[str, ...], RequestShape, int]


def _key(job: Job) -> _FitKey:
    return (job.allowed_partitions, job.allowed_accelerators, job.request_shape, job.accelerators)


def _queue(priority_order: Iterable[str], pending: Mapping[str, Job], held: set[str]) -> Iterator[Job]:
    """Pending, not held jobs in Slurm's priority order; the rest (built only if reached)."""
    listed: set[str] = set()
    for job_id in priority_order.stream() if isinstance(priority_order, LazyOrder) else priority_order:
        listed.add(job_id)
        job = pending.get(job_id)
        if job is not None and job_id not in held:
            yield job
    rest = [j for j_id, j in pending.items() if j_id not in listed and j_id not in held]
    rest.sort(key=lambda j: (j.submit_time_s, id_sort_key(j.job_id)))
    yield from rest
