"""The policies A-SRPT is measured against. All place with Heavy-Edge through the same
dispatcher; they differ in the order they hand it and in the runtimes they believe."""

from __future__ import annotations

import heapq
import math
import statistics
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, Iterable, Iterator, Mapping

from asrpt.core.dispatch import DispatchMemo, DispatchOptions, dispatch
from asrpt.core.keyed_queue import KeyedQueue
from asrpt.core.model import ClusterSnapshot, Decision, Job, LazyOrder, PendingJobs, RunningJob, pending_by_id
from asrpt.core.placement import alpha_min_s
from asrpt.core.policies.preemption import requeues_that_make_room
from asrpt.core.speed import SpeedTable
from asrpt.core.srpt import id_sort_key, tie_rounded

#: No comm-heavy holds: the baselines start what fits (A-SRPT's rule is its own contribution).
NO_HOLDS = DispatchOptions(mode="backfill", comm_heavy_tau=0.0)


@dataclass(slots=True)
class OrderState:
    """What an ordering baseline remembers: when each job was first seen running, finished
    runtimes per group/user (QSSF), attained service (Tiresias), derived alpha_min."""

    first_blocked_s: dict[str, float] = field(default_factory=dict)
    alpha_min_cache_s: dict[str, float] = field(default_factory=dict)
    running_since_s: dict[str, tuple[float, str, str]] = field(default_factory=dict)
    durations_by_group_s: dict[str, list[float]] = field(default_factory=dict)
    durations_by_user_s: dict[str, list[float]] = field(default_factory=dict)
    attained_gpu_s: dict[str, float] = field(default_factory=dict)
    #: ("group" | "user", name) whose finished runtimes grew at the last ``observe``; derived.
    history_changed: set[tuple[str, str]] = field(default_factory=set)
    #: QSSF only, derived: pending jobs by (history that sets their estimate, accelerators),
    #: each bucket in arrival order; each job's bucket; the jobs that move to their group's
    #: (user's) history once it has a finished run.
    buckets: dict[tuple[str, str, int], KeyedQueue] = field(default_factory=dict)
    bucket_of: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    waiting_for_group: dict[str, set[str]] = field(default_factory=dict)
    waiting_for_user: dict[str, set[str]] = field(default_factory=dict)
    last_now_s: float | None = None
    #: Policies whose key never changes for a pending job object keep the queue sorted as jobs
    #: come and go instead of sorting it at every decision. All derived, not serialised:
    #: every runnable pending job under its key, in order;
    sorted_queue: KeyedQueue = field(default_factory=KeyedQueue)
    #: multifactor only: jobs whose age factor reached its cap, by their (now fixed) priority,
    #: and the uncapped ones by submit time (the next to reach the cap first); the cluster
    #: size the keys were computed for;
    capped: KeyedQueue = field(default_factory=KeyedQueue)
    uncapped_by_submit: KeyedQueue = field(default_factory=KeyedQueue)
    key_capacity: int = 0
    #: the job object each listed job's key was computed for;
    seen: dict[str, Job] = field(default_factory=dict)
    #: pending jobs no allowed partition can ever hold (listed last);
    unrunnable: set[str] = field(default_factory=set)
    #: the backend change log the list is up to date with, and where in it;
    change_log: object = None
    change_cursor: int = 0
    #: bumped by every decision, so a lazy order knows when it went stale.
    version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_blocked_s": dict(self.first_blocked_s),
            "running_since_s": {k: list(v) for k, v in self.running_since_s.items()},
            "durations_by_group_s": {k: list(v) for k, v in self.durations_by_group_s.items()},
            "durations_by_user_s": {k: list(v) for k, v in self.durations_by_user_s.items()},
            "attained_gpu_s": dict(self.attained_gpu_s),
            "last_now_s": self.last_now_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OrderState":
        return cls(
            first_blocked_s=dict(data.get("first_blocked_s", {})),
            running_since_s={k: (float(v[0]), str(v[1]), str(v[2])) for k, v in data.get("running_since_s", {}).items()},
            durations_by_group_s={k: list(v) for k, v in data.get("durations_by_group_s", {}).items()},
            durations_by_user_s={k: list(v) for k, v in data.get("durations_by_user_s", {}).items()},
            attained_gpu_s=dict(data.get("attained_gpu_s", {})),
            last_now_s=data.get("last_now_s"),
        )


class OrderedPolicy:
    """Sort pending jobs by ``key`` and dispatch them; subclasses supply the key and beliefs."""

    name = "ordered"
    options = NO_HOLDS
    #: True when ``key`` depends only on the job object (never on time or learned history):
    #: the queue is then kept sorted incrementally.
    static_key = False

    def __init__(self, speed: SpeedTable, options: DispatchOptions | None = None) -> None:
        self.speed = speed
        if options is not None:
            self.options = options
        #: What this policy's dispatches reuse between decisions (only saves work).
        self.dispatch_memo: DispatchMemo | None = DispatchMemo()

    def new_state(self) -> OrderState:
        return OrderState()

    def restore_state(self, data: dict[str, Any]) -> OrderState:
        return OrderState.from_dict(data)

    def key(self, job: Job, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> Any:
        raise NotImplementedError

    def runtime_s(self, job: Job, iteration_time_s: float) -> float:
        """What the policy believes a job runs; used for backfill reservations."""
        n = job.predicted_iterations
        return n * iteration_time_s if n is not None and n > 0 else math.inf

    def alpha_min(self, job: Job, snapshot: ClusterSnapshot, state: OrderState) -> float:
        cached = state.alpha_min_cache_s.get(job.job_id)
        if cached is None:
            cached = alpha_min_s(job, snapshot.partitions, snapshot.nodes, self.speed,
                                 None if self.dispatch_memo is None else self.dispatch_memo.placement)
            state.alpha_min_cache_s[job.job_id] = cached
        return cached

    def observe(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        """Learn from jobs that left the running set since the last cycle."""
        running_now = {r.job.job_id for r in snapshot.running}
        state.history_changed.clear()
        pending: Mapping[str, Job] | None = None
        for job_id in [j for j in state.running_since_s if j not in running_now]:
            start_s, group, user = state.running_since_s.pop(job_id)
            if pending is None:
                pending = pending_by_id(snapshot.pending)
            if job_id in pending:
                continue  # preempted, not finished
            for kind, table, key in (("group", state.durations_by_group_s, group), ("user", state.durations_by_user_s, user)):
                if key:
                    table.setdefault(key, []).append(now_s - start_s)
                    state.history_changed.add((kind, key))
            state.alpha_min_cache_s.pop(job_id, None)
            state.attained_gpu_s.pop(job_id, None)
        for r in snapshot.running:
            state.running_since_s.setdefault(r.job.job_id, (r.start_time_s, r.job.group, r.job.user))

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> Decision:
        self.observe(snapshot, now_s, state)
        return self.dispatch_queue(snapshot, now_s, state)

    def dispatch_queue(
        self, snapshot: ClusterSnapshot, now_s: float, state: OrderState, pending: Mapping[str, Job] | None = None
    ) -> Decision:
        """Order the pending jobs and hand them to the shared dispatcher. ``pending`` (the
        pending jobs by id) says the kept queue was already brought up to date this decision."""
        if self.static_key:
            if pending is None:
                pending = pending_by_id(snapshot.pending)
                self._update_sorted_queue(snapshot, pending, now_s, state)
            queue: Iterable[Job] = (pending[j] for j in self._queue_ids(now_s, state))
        else:
            runnable = [j for j in snapshot.pending if not math.isinf(self.alpha_min(j, snapshot, state))]
            queue = sorted(runnable, key=lambda j: self.key(j, snapshot, now_s, state))
        result = dispatch(
            queue,
            snapshot,
            now_s,
            speed=self.speed,
            options=self.options,
            runtime_s=self.runtime_s,
            alpha_min_s=lambda job: state.alpha_min_cache_s[job.job_id],
            first_blocked_s=state.first_blocked_s,
            memo=self.dispatch_memo,
        )
        if self.static_key:
            state.version += 1
            version = state.version
            order = LazyOrder(
                lambda: chain(self._queue_ids(now_s, state), sorted(state.unrunnable, key=id_sort_key)),
                lambda: state.version == version,
            )
        else:
            order = tuple(j.job_id for j in queue)
            if len(order) < len(snapshot.pending):
                listed = set(order)
                order += tuple(j.job_id for j in snapshot.pending if j.job_id not in listed)
        return Decision(
            order=order,
            starts=tuple(result.starts),
            holds=tuple(result.holds),
            reasons=result.reasons,
            wake_at_s=None if math.isinf(result.wake_at_s) else result.wake_at_s,
        )

    def _update_sorted_queue(self, snapshot: ClusterSnapshot, pending: Mapping[str, Job], now_s: float,
                             state: OrderState) -> None:
        """File new and changed jobs under their key and drop those that left: from the
        backend's change log when it keeps one, else by comparing every pending job."""
        touched: Iterable[str] | None = None
        if isinstance(snapshot.pending, PendingJobs):
            changed, state.change_cursor = snapshot.pending.changes_since(state.change_log, state.change_cursor)
            state.change_log = snapshot.pending.log
            touched = None if changed is None else dict.fromkeys(changed)
        else:
            state.change_log = None
        if touched is None:
            touched = chain(pending, [j for j in state.seen if j not in pending])
        for job_id in touched:
            job = pending.get(job_id)
            old = state.seen.get(job_id)
            if job is old:
                continue
            if old is not None:
                state.seen.pop(job_id)
                state.unrunnable.discard(job_id)
                self._unfile(old, state)
            if job is None:
                continue
            state.seen[job_id] = job
            if math.isinf(self.alpha_min(job, snapshot, state)):
                state.unrunnable.add(job_id)
                continue
            self._file(job, snapshot, now_s, state)
        self._refresh_keys(snapshot, now_s, state)

    # How a fixed-key policy keeps its queue; multifactor and QSSF override them.
    def _file(self, job: Job, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        state.sorted_queue.put(job.job_id, self.key(job, snapshot, now_s, state))

    def _unfile(self, job: Job, state: OrderState) -> None:
        state.sorted_queue.discard(job.job_id)

    def _refresh_keys(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        """Re-file jobs whose key changed although the job did not (learned history)."""

    def _queue_ids(self, now_s: float, state: OrderState) -> Iterable[str]:
        return state.sorted_queue


def _arrival_key(job: Job) -> tuple[float, tuple[int, int, str]]:
    return (job.submit_time_s, id_sort_key(job.job_id))


class FifoPolicy(OrderedPolicy):
    """First come, first served; the head blocks (no backfill)."""

    name = "fifo"
    static_key = True
    options = DispatchOptions(mode="strict", comm_heavy_tau=0.0)

    def key(self, job, snapshot, now_s, state):
        return _arrival_key(job)


class SjfOraclePolicy(OrderedPolicy):
    """Shortest true runtime (at the ideal placement) first: knows the future."""

    name = "sjf-oracle"
    static_key = True

    def runtime_s(self, job: Job, iteration_time_s: float) -> float:
        return (job.true_iterations or 0.0) * iteration_time_s

    def key(self, job, snapshot, now_s, state):
        return (tie_rounded(self.runtime_s(job, self.alpha_min(job, snapshot, state))), _arrival_key(job))


class SpwfPolicy(OrderedPolicy):
    """Shortest predicted work first: accelerators x predicted iterations x alpha_min."""

    name = "spwf"
    static_key = True

    def key(self, job, snapshot, now_s, state):
        n = job.predicted_iterations or 0.0
        return (tie_rounded(job.accelerators * n * self.alpha_min(job, snapshot, state)), _arrival_key(job))


class QssfPolicy(OrderedPolicy):
    """Helios' Quasi-Shortest-Service-First: accelerators x a runtime estimate from the
    policy's own history of finished runs (group, then user, then a default).

    Every pending job whose estimate comes from the same history (its group's, else its
    user's, else the default) and that needs as many accelerators has the same key up to
    arrival, so the queue is kept as such buckets in arrival order and merged by the current
    estimates at each decision; a finished run re-files nothing unless it gives a group or
    user its first history.
    """

    name = "qssf"
    static_key = True

    def __init__(self, speed: SpeedTable, options: DispatchOptions | None = None, default_runtime_s: float = 3600.0):
        super().__init__(speed, options)
        self.default_runtime_s = default_runtime_s

    def estimate_s(self, job: Job, state: OrderState) -> float:
        kind, name = self._source(job, state)
        return self._estimate_from(kind, name, state)

    def key(self, job, snapshot, now_s, state):
        return (job.accelerators * self.estimate_s(job, state), _arrival_key(job))

    @staticmethod
    def _source(job: Job, state: OrderState) -> tuple[str, str]:
        """Whose finished runs estimate the job: its group's, else its user's, else none."""
        if job.group and state.durations_by_group_s.get(job.group):
            return ("group", job.group)
        if job.user and state.durations_by_user_s.get(job.user):
            return ("user", job.user)
        return ("default", "")

    def _estimate_from(self, kind: str, name: str, state: OrderState) -> float:
        if kind == "default":
            return self.default_runtime_s
        table = state.durations_by_group_s if kind == "group" else state.durations_by_user_s
        return statistics.median(table[name][-20:])

    def _file(self, job: Job, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        kind, name = self._source(job, state)
        bucket = (kind, name, job.accelerators)
        state.buckets.setdefault(bucket, KeyedQueue()).put(job.job_id, _arrival_key(job))
        state.bucket_of[job.job_id] = bucket
        if kind != "group" and job.group:
            state.waiting_for_group.setdefault(job.group, set()).add(job.job_id)
        if kind == "default" and job.user:
            state.waiting_for_user.setdefault(job.user, set()).add(job.job_id)

    def _unfile(self, job: Job, state: OrderState) -> None:
        bucket = state.bucket_of.pop(job.job_id, None)
        if bucket is None:
            return
        queue = state.buckets[bucket]
        queue.discard(job.job_id)
        if not queue:
            del state.buckets[bucket]
        for waiting, name in ((state.waiting_for_group, job.group), (state.waiting_for_user, job.user)):
            ids = waiting.get(name)
            if ids is not None:
                ids.discard(job.job_id)
                if not ids:
                    del waiting[name]

    def _refresh_keys(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        moving: set[str] = set()
        for kind, name in state.history_changed:
            moving |= (state.waiting_for_group if kind == "group" else state.waiting_for_user).get(name, set())
        for job_id in moving:
            job = state.seen[job_id]
            self._unfile(job, state)
            self._file(job, snapshot, now_s, state)

    def _queue_ids(self, now_s: float, state: OrderState) -> Iterable[str]:
        streams = [
            _costed(job_accelerators * self._estimate_from(kind, name, state), queue)
            for (kind, name, job_accelerators), queue in state.buckets.items()
        ]
        return (job_id for _, _, job_id in heapq.merge(*streams))


def _costed(cost: float, queue: KeyedQueue) -> Iterator[tuple[float, Any, str]]:
    """A bucket's jobs as (key, arrival, id), the tuple QSSF's ``key`` gives them."""
    return ((cost, arrival, job_id) for arrival, job_id in queue.items())


class MultifactorPolicy(OrderedPolicy):
    """Slurm's multifactor priority (age + job size, favouring large jobs as Slurm's default)
    with EASY backfill on the users' requested time limits.

    The age factor grows at the same rate for every job until it reaches its cap, so the
    order of the uncapped jobs never changes and neither does that of the capped ones: both
    are kept sorted as jobs come and go and merged by the current priority at each decision
    (no sort of the whole queue per event).
    """

    name = "multifactor"
    static_key = True

    def __init__(
        self,
        speed: SpeedTable,
        options: DispatchOptions | None = None,
        weight_age: float = 1000.0,
        weight_size: float = 1000.0,
        max_age_s: float = 7 * 86400.0,
    ) -> None:
        super().__init__(speed, options)
        self.weight_age = weight_age
        self.weight_size = weight_size
        self.max_age_s = max_age_s

    def runtime_s(self, job: Job, iteration_time_s: float) -> float:
        return job.time_limit_s if job.time_limit_s is not None else math.inf

    def key(self, job, snapshot, now_s, state):
        """(-priority at ``now_s``, arrival): the reference the kept queues must agree with.

        Priorities are scaled by max_age x capacity so that whole-second submit times give
        exact sums: jobs whose age and size factors balance exactly tie and go by arrival
        instead of by the rounding of two quotients."""
        capacity = _capacity(snapshot)
        if self._capped(job, now_s):
            return self._capped_key(job, capacity)
        static, arrival = self._uncapped_key(job, capacity)
        return (static - self._age_scale(capacity) * now_s, arrival)

    def _capped(self, job: Job, now_s: float) -> bool:
        return now_s - job.submit_time_s >= self.max_age_s

    def _age_scale(self, capacity: int) -> float:
        """Scaled priority per second of age."""
        return self.weight_age * capacity

    def _size_part(self, job: Job) -> float:
        return self.weight_size * job.accelerators * self.max_age_s

    def _capped_key(self, job: Job, capacity: int) -> tuple[float, Any]:
        return (-self._age_scale(capacity) * self.max_age_s - self._size_part(job), _arrival_key(job))

    def _uncapped_key(self, job: Job, capacity: int) -> tuple[float, Any]:
        """-priority + age_scale x now (scaled): the same for every ``now`` before the cap."""
        return (self._age_scale(capacity) * job.submit_time_s - self._size_part(job), _arrival_key(job))

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> Decision:
        capacity = _capacity(snapshot)
        if capacity != state.key_capacity:  # the cluster changed size: every size factor did
            for table in (state.sorted_queue, state.capped, state.uncapped_by_submit):
                table.clear()
            state.seen.clear()
            state.unrunnable.clear()
            state.change_log = None
            state.key_capacity = capacity
        return super().decide(snapshot, now_s, state)

    def _file(self, job: Job, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> None:
        self._file_at(job, now_s, state)

    def _file_at(self, job: Job, now_s: float, state: OrderState) -> None:
        if self._capped(job, now_s):
            state.capped.put(job.job_id, self._capped_key(job, state.key_capacity))
        else:
            state.sorted_queue.put(job.job_id, self._uncapped_key(job, state.key_capacity))
            state.uncapped_by_submit.put(job.job_id, job.submit_time_s)

    def _unfile(self, job: Job, state: OrderState) -> None:
        for table in (state.sorted_queue, state.capped, state.uncapped_by_submit):
            table.discard(job.job_id)

    def _queue_ids(self, now_s: float, state: OrderState) -> Iterable[str]:
        while (oldest := state.uncapped_by_submit.first()) is not None and now_s - oldest[0] >= self.max_age_s:
            job = state.seen[oldest[1]]
            self._unfile(job, state)
            self._file_at(job, now_s, state)
        shift = self._age_scale(state.key_capacity) * now_s
        uncapped = ((static - shift, arrival, job_id) for (static, arrival), job_id in state.sorted_queue.items())
        capped = ((key, arrival, job_id) for (key, arrival), job_id in state.capped.items())
        return (job_id for _, _, job_id in heapq.merge(uncapped, capped))


def _capacity(snapshot: ClusterSnapshot) -> int:
    return sum(n.accelerators_total for n in snapshot.nodes) or 1


class TiresiasPolicy(OrderedPolicy):
    """Discretised 2D-LAS (Tiresias): queues by attained accelerator-seconds, FIFO inside a
    queue, and running jobs of a lower queue are preempted for waiting jobs of a higher one.

    A waiting job attains nothing, so its key is fixed while it waits: the waiting queue is
    kept sorted, and only the running jobs are sorted at each decision.
    """

    name = "tiresias"
    static_key = True
    options = DispatchOptions(mode="greedy", comm_heavy_tau=0.0)

    def __init__(
        self,
        speed: SpeedTable,
        options: DispatchOptions | None = None,
        queue_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0),
        preempt_exempt_s: float = 60.0,
    ) -> None:
        super().__init__(speed, options)
        self.queue_thresholds_gpu_s = queue_thresholds_gpu_s
        #: A job is not preempted before it has run this long since its (re)start, like
        #: Slurm's PreemptExemptTime: on a heterogeneous shaped cluster the count budget can
        #: otherwise swap the same jobs in and out at every event.
        self.preempt_exempt_s = preempt_exempt_s

    def level(self, job_id: str, state: OrderState) -> int:
        attained = state.attained_gpu_s.get(job_id, 0.0)
        return sum(1 for limit in self.queue_thresholds_gpu_s if attained >= limit)

    def key(self, job, snapshot, now_s, state):
        return (self.level(job.job_id, state), _arrival_key(job))

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: OrderState) -> Decision:
        if state.last_now_s is not None:
            elapsed_s = max(now_s - state.last_now_s, 0.0)
            for r in snapshot.running:
                state.attained_gpu_s[r.job.job_id] = state.attained_gpu_s.get(r.job.job_id, 0.0) + elapsed_s * r.job.accelerators
        state.last_now_s = now_s
        self.observe(snapshot, now_s, state)
        budget: dict[str, int] = {}
        for node in snapshot.nodes:
            budget[node.partition] = budget.get(node.partition, 0) + node.accelerators_total
        pending = pending_by_id(snapshot.pending)
        self._update_sorted_queue(snapshot, pending, now_s, state)
        running_jobs = sorted((self.key(r.job, snapshot, now_s, state), r) for r in snapshot.running)
        left = len(running_jobs)
        waiting = ((key, pending[job_id]) for key, job_id in state.sorted_queue.items())
        # Walk by priority (keys are unique: they end in the job id), charging each job to a
        # partition: running jobs to their own, waiting jobs to the allowed partition with the
        # most room. A running job that no longer fits its partition's budget is preempted, but
        # only where a waiting job was charged: freeing accelerators nobody above it can use
        # would only churn.
        wanted: set[str] = set()
        #: Waiting jobs the walk charged to a partition (those a preemption would be for).
        charged: set[str] = set()
        displaced: list[tuple[str, str]] = []
        free_total = sum(budget.values())
        for _key, item in heapq.merge(running_jobs, waiting, key=lambda pair: pair[0]):
            if isinstance(item, RunningJob):
                left -= 1
                g, partition = item.job.accelerators, item.placement.partition
                if budget.get(partition, 0) >= g:
                    budget[partition] -= g
                    free_total -= g
                else:
                    displaced.append((item.job.job_id, partition))
                continue
            if free_total <= 0 or (left == 0 and all(p in wanted for _, p in displaced)):
                break  # no waiting job can be charged any more, or none would change the outcome
            g = item.accelerators
            room = [(budget[p.name], p.name) for p in snapshot.partitions if item.allows(p) and budget.get(p.name, 0) >= g]
            if room:
                _, partition = max(room)
                budget[partition] -= g
                free_total -= g
                wanted.add(partition)
                charged.add(item.job_id)
        if left:  # the walk stopped with no budget left: no running job not yet reached fits
            displaced.extend((r.job.job_id, r.placement.partition) for _, r in running_jobs[len(running_jobs) - left:])
        preempt = [job_id for job_id, partition in displaced if partition in wanted]
        if preempt:
            started_s = {r.job.job_id: r.start_time_s for r in snapshot.running}
            preempt = [job_id for job_id in preempt if now_s - started_s[job_id] >= self.preempt_exempt_s]
        if not preempt:
            return self.dispatch_queue(snapshot, now_s, state, pending)
        decision, needed = requeues_that_make_room(
            snapshot, preempt, charged, lambda view: self.dispatch_queue(view, now_s, state, pending))
        return replace(decision, preempts=tuple(needed))

