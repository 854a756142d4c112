"""A-SRPT: dispatch real jobs in the completion order of a virtual single-machine SRPT."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterable, Iterator, Literal, Mapping

from asrpt.core.dispatch import DispatchMemo, DispatchOptions, dispatch
from asrpt.core.keyed_queue import KeyedQueue
from asrpt.core.model import ClusterSnapshot, Decision, Job, LazyOrder, PendingJobs, pending_by_id
from asrpt.core.placement import alpha_min_s
from asrpt.core.reasons import Reasons
from asrpt.core.speed import SpeedTable
from asrpt.core.srpt import VirtualSRPT, id_sort_key, tie_rounded, virtual_size_s

QueueOrder = Literal["work", "virtual_completion", "remaining"]
QUEUE_ORDERS: tuple[str, ...] = ("work", "virtual_completion", "remaining")
VirtualMachine = Literal["cluster", "pool"]
VIRTUAL_MACHINES: tuple[str, ...] = ("cluster", "pool")
#: Default starvation guard of the ``work`` order: a week, Slurm's default PriorityMaxAge.
#: It never fires on a cluster whose queue drains within the week; on a chronically
#: overloaded one it trades total JCT for a bounded wait (bench/README.md).
OVERDUE_AFTER_S = 7 * 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ASRPTOptions:
    """Tunables of A-SRPT (each is a config key of the daemon and a simulator option).

    ``queue_order``: ``work`` (the default: a job becomes dispatchable when the virtual SRPT
    completes it, as in the paper, but Q is ordered by the job's predicted work g x n x
    alpha_min, ties by virtual completion), ``virtual_completion`` (the paper: Q in virtual
    completion order) or ``remaining`` (every released job is dispatchable, Q first, then the
    rest by remaining virtual work, no release gating). Why ``work`` is the default: once the
    real cluster falls behind the virtual machine (fragmentation, gangs that wait for whole
    nodes), nearly every pending job is virtually complete and completion order decays into
    first-come-first-served among them; on the first 20,000 Philly jobs that made A-SRPT 15.7x
    the lower bound against 3.1x with ``work`` (bench/README.md).
    ``use_true_iterations``: the oracle variant; reads ``Job.true_iterations``.
    ``virtual_machine``: ``cluster`` (the paper: one virtual machine of all G accelerators) or
    ``pool`` (one virtual machine per set of partitions jobs may use, of that set's size, so
    contention for a scarce accelerator type shows up in the virtual schedule; with ``cluster``
    a lightly loaded cluster whose one type is saturated orders jobs almost first-come).
    """

    dispatch: DispatchOptions = DispatchOptions()
    queue_order: QueueOrder = "work"
    #: ``work`` order only: once jobs have been pending this long since their submission
    #: (in Q or not yet virtually complete), the longest-waiting of them goes to the head of
    #: the dispatch order (the head is the job the backfill reservation protects), so a large
    #: job cannot starve behind a stream of smaller ones; the rest keep the work order.
    #: ``math.inf`` turns the guard off.
    overdue_after_s: float = OVERDUE_AFTER_S
    use_true_iterations: bool = False
    virtual_machine: VirtualMachine = "cluster"
    #: Cap every belief at what fits in the job's requested time limit (iterations <=
    #: time_limit_s / alpha_min, runtime <= time_limit_s): Slurm ends a job at its limit, so a
    #: longer prediction is certainly wrong. False is the paper's unbounded prediction.
    time_limit_cap: bool = True
    #: ``asrpt-preempt`` only: a waiting job displaces a running one only with at most
    #: 1/ratio of its predicted remaining work (>= 1, so no job displaces a larger one) ...
    preempt_ratio: float = 4.0
    #: ... and never in its first ``preempt_exempt_s`` after a (re)start (Slurm's PreemptExemptTime) ...
    preempt_exempt_s: float = 600.0
    #: ... and at most this many times: a requeued job restarts in whatever gap Slurm finds,
    #: and without a bound the next smaller job displaces it again, losing its work each time.
    max_requeues: int = 3

    def __post_init__(self) -> None:
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(f"queue_order {self.queue_order!r} is not one of {', '.join(QUEUE_ORDERS)}")
        if not self.overdue_after_s >= 0:
            raise ValueError(f"overdue_after_s must be >= 0, got {self.overdue_after_s}")
        if not self.preempt_ratio >= 1.0 or math.isinf(self.preempt_ratio):
            raise ValueError(f"preempt_ratio must be a finite number >= 1 (a job never displaces a larger one), got {self.preempt_ratio}")
        if self.max_requeues < 0:
            raise ValueError(f"max_requeues must be >= 0, got {self.max_requeues}")
        if not self.preempt_exempt_s >= 0 or math.isinf(self.preempt_exempt_s):
            raise ValueError(f"preempt_exempt_s must be a finite number >= 0, got {self.preempt_exempt_s}")
        if self.virtual_machine not in VIRTUAL_MACHINES:
            raise ValueError(f"virtual_machine {self.virtual_machine!r} is not one of {', '.join(VIRTUAL_MACHINES)}")


@dataclass(slots=True)
class ASRPTState:
    """Survives between cycles (and, serialised, across daemon restarts)."""

    #: Virtual machines by pool key ("" is the whole cluster).
    machines: dict[str, VirtualSRPT] = field(default_factory=dict)
    #: Which machine each known pending job is on.
    pool_of: dict[str, str] = field(default_factory=dict)
    #: Current virtual size of every known pending job, seconds.
    sizes_s: dict[str, float] = field(default_factory=dict)
    #: Q: virtually complete, not yet started, in virtual completion order (a dict used as
    #: an ordered set: a job leaves Q from anywhere in O(1)).
    queue: dict[str, None] = field(default_factory=dict)
    #: Q again, ordered by (predicted work, place in Q), for ``queue_order = "work"``; derived,
    #: rebuilt from ``queue`` after a restore.
    queue_by_work: KeyedQueue = field(default_factory=KeyedQueue)
    #: Predicted work g x n x alpha_min of every known pending job, accelerator-seconds; derived.
    work_s: dict[str, float] = field(default_factory=dict)
    #: How many jobs have entered Q (the tie-break that keeps virtual completion order); derived.
    queue_entries: int = 0
    #: Pending jobs past ``overdue_after_s``, longest-waiting first (those in Q stay in
    #: ``queue_by_work`` too), and a heap of (when each pending job becomes overdue, id); derived.
    overdue: KeyedQueue = field(default_factory=KeyedQueue)
    overdue_at: list[tuple[float, str]] = field(default_factory=list)
    first_blocked_s: dict[str, float] = field(default_factory=dict)
    #: ``asrpt-preempt``: how often each live job has been requeued (kept while it runs), and
    #: when it last was: its wait for the starvation guard counts from then, not from its
    #: submission (it was served meanwhile).
    requeues: dict[str, int] = field(default_factory=dict)
    requeued_at_s: dict[str, float] = field(default_factory=dict)
    #: ``asrpt-preempt``: per running job, (its per-iteration time, whether it restarts nowhere
    #: much slower); derived, not serialised.
    restarts_as_fast: dict[str, tuple[float, bool]] = field(default_factory=dict)
    #: alpha_min per job; derived, so not serialised.
    alpha_min_cache_s: dict[str, float] = field(default_factory=dict)
    #: The Job object last seen per pending id, to skip unchanged jobs; derived, not serialised.
    seen: dict[str, Job] = field(default_factory=dict)
    #: Pending jobs no allowed partition can ever hold (they stay last); derived.
    never_fits: set[str] = field(default_factory=set)
    #: The backend change log ``seen`` was last brought up to date from, and where in it; derived.
    change_log: object = None
    change_cursor: int = 0
    #: Bumped by every decision, so a decision's lazy order knows when it went stale; derived.
    version: int = 0

    @property
    def machine(self) -> VirtualSRPT:
        """The whole-cluster virtual machine (``virtual_machine = "cluster"``)."""
        return self.machines.setdefault("", VirtualSRPT(keep_completed=False))

    def to_dict(self) -> dict[str, Any]:
        return {
            "machines": {key: m.to_dict() for key, m in self.machines.items()},
            "pool_of": dict(self.pool_of),
            "sizes_s": dict(self.sizes_s),
            "queue": list(self.queue),
            "first_blocked_s": dict(self.first_blocked_s),
            "requeues": dict(self.requeues),
            "requeued_at_s": dict(self.requeued_at_s),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ASRPTState":
        return cls(
            machines={str(k): VirtualSRPT.from_dict(v) for k, v in data.get("machines", {}).items()},
            pool_of={str(k): str(v) for k, v in data.get("pool_of", {}).items()},
            sizes_s={str(k): float(v) for k, v in data.get("sizes_s", {}).items()},
            queue=dict.fromkeys(str(j) for j in data.get("queue", [])),
            first_blocked_s={str(k): float(v) for k, v in data.get("first_blocked_s", {}).items()},
            requeues={str(k): int(v) for k, v in data.get("requeues", {}).items()},
            requeued_at_s={str(k): float(v) for k, v in data.get("requeued_at_s", {}).items()},
        )


class ASRPTPolicy:
    """Virtual SRPT for the order, Heavy-Edge for the place, the dispatcher for the rules."""

    def __init__(self, speed: SpeedTable, options: ASRPTOptions = ASRPTOptions(), name: str = "asrpt") -> None:
        self.speed = speed
        self.options = options
        self.name = name
        #: What this policy's dispatches reuse between decisions (only saves work).
        self.dispatch_memo: DispatchMemo | None = DispatchMemo()

    def new_state(self) -> ASRPTState:
        return ASRPTState()

    def restore_state(self, data: dict[str, Any]) -> ASRPTState:
        return ASRPTState.from_dict(data)

    def iterations(self, job: Job) -> float:
        """What the policy believes the job's iteration count is (unknown counts as 0: the
        paper's treatment of unseen jobs, which lets them go first)."""
        n = job.true_iterations if self.options.use_true_iterations else job.predicted_iterations
        return float(n) if n is not None and n > 0 else 0.0

    def capped_iterations(self, job: Job, alpha_min_s: float) -> float:
        """:meth:`iterations`, at most what the job's time limit allows at its best speed
        ``alpha_min_s`` per iteration (``time_limit_cap``); a job with no prediction at all
        (None, not the paper's 0) is believed to run that long."""
        n = self.iterations(job)
        limit_s = job.time_limit_s
        if self.options.time_limit_cap and limit_s is not None and limit_s > 0 and alpha_min_s > 0:
            if self._unknown(job):
                return limit_s / alpha_min_s  # no prediction at all: as long as the limit allows
            return min(n, limit_s / alpha_min_s)
        return n

    def _unknown(self, job: Job) -> bool:
        return not self.options.use_true_iterations and job.predicted_iterations is None

    def runtime_s(self, job: Job, iteration_time_s: float) -> float:
        """What the policy believes the job runs at ``iteration_time_s`` per iteration (never
        past its time limit with ``time_limit_cap``)."""
        limit_s = job.time_limit_s
        runtime_s = self.iterations(job) * iteration_time_s
        if self.options.time_limit_cap and limit_s is not None and limit_s > 0:
            return limit_s if self._unknown(job) else min(runtime_s, limit_s)
        return runtime_s

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: ASRPTState) -> Decision:
        pending, reasons = self._update(snapshot, now_s, state)
        return self._decision(snapshot, now_s, state, pending, reasons)

    def _update(self, snapshot: ClusterSnapshot, now_s: float, state: ASRPTState) -> tuple[dict[str, Job], Reasons]:
        """Bring the state up to ``now_s``: new and changed jobs onto the virtual machine(s),
        the jobs it completed into Q. Returns the pending jobs by id and the reasons so far."""
        pending = pending_by_id(snapshot.pending)
        reasons = Reasons()
        capacity_by_partition: dict[str, int] | None = None
        for job_id in self._touched_ids(snapshot, pending, state):
            job = pending.get(job_id)
            if job is None:
                self._forget(job_id, state)
                continue
            previous = state.seen.get(job_id)
            if previous is job:
                continue  # unchanged since the last cycle
            state.seen[job_id] = job
            if previous is None:  # new, or first seen since a restore
                self._watch_wait(job, state)
            ideal_s = self._alpha_min_s(job, snapshot, state)
            if math.isinf(ideal_s):
                state.never_fits.add(job_id)
                reasons.note(job_id, "no partition it allows can ever hold it")
                continue
            if capacity_by_partition is None:
                capacity_by_partition = _capacity_by_partition(snapshot)
            pool, capacity = self._pool(job, snapshot, capacity_by_partition)
            iterations = self.capped_iterations(job, ideal_s)
            size_s = virtual_size_s(job.accelerators, iterations, ideal_s, capacity)
            work_s = tie_rounded(job.accelerators * iterations * ideal_s)  # equal sizes tie, by arrival
            if state.work_s.get(job_id) != work_s:
                state.work_s[job_id] = work_s
                key = state.queue_by_work.key_of(job_id)
                if key is not None:
                    state.queue_by_work.put(job_id, (work_s, key[1]))
            old_s = state.sizes_s.get(job_id)
            if old_s is None:
                machine = state.machines.get(pool)
                if machine is None:
                    machine = state.machines[pool] = VirtualSRPT(keep_completed=False)
                machine.release(job_id, job.submit_time_s, size_s)
                state.sizes_s[job_id] = size_s
                state.pool_of[job_id] = pool
            elif old_s != size_s:
                state.machines[state.pool_of[job_id]].resize(job_id, size_s, old_s)
                state.sizes_s[job_id] = size_s

        done: list[tuple[float, tuple[int, int, str], str]] = []
        for machine in state.machines.values():
            done.extend((t, id_sort_key(j), j) for t, j in machine.advance_to(now_s))
        done.sort()
        by_work = self.options.queue_order == "work"
        if by_work and len(state.queue_by_work) != len(state.queue):
            self._file_by_work(state.queue, state)  # restored state: Q was not filed yet
        entered = [j for _, _, j in done if j in pending]
        state.queue.update(dict.fromkeys(entered))
        if by_work:
            self._file_by_work(entered, state)
            self._move_overdue(now_s, state)
        return pending, reasons

    def _dispatchable(self, state: ASRPTState) -> Iterable[str]:
        """The ids the dispatcher may start, most urgent first."""
        if self.options.queue_order == "work":
            return self._work_order(state)
        if self.options.queue_order == "remaining":
            return chain(state.queue, self._still_virtual(state))
        return state.queue

    def _decision(self, snapshot: ClusterSnapshot, now_s: float, state: ASRPTState, pending: Mapping[str, Job],
                  reasons: Reasons) -> Decision:
        """Dispatch the dispatchable jobs on ``snapshot`` (the state is already up to date)."""
        by_work = self.options.queue_order == "work"
        result = dispatch(
            (pending[j] for j in self._dispatchable(state)),
            snapshot,
            now_s,
            speed=self.speed,
            options=self.options.dispatch,
            runtime_s=self.runtime_s,
            alpha_min_s=lambda job: state.alpha_min_cache_s[job.job_id],
            first_blocked_s=state.first_blocked_s,
            memo=self.dispatch_memo,
        )
        reasons.merge(result.reasons)
        if by_work and (oldest := state.overdue.first()) is not None:
            reasons.prefix(
                oldest[1],
                "pending for {:.1f} days, over the starvation guard's {:.1f}: heads the queue",
                (now_s - oldest[0][0]) / 86400.0,
                self.options.overdue_after_s / 86400.0,
            )
        state.version += 1
        version = state.version
        return Decision(
            order=LazyOrder(lambda: self._order(state), lambda: state.version == version),
            starts=tuple(result.starts),
            holds=tuple(result.holds),
            reasons=reasons,
            wake_at_s=min(result.wake_at_s, self._next_dispatchable_s(state, result.accelerators_free_after)),
        )

    def _touched_ids(self, snapshot: ClusterSnapshot, pending: Mapping[str, Job], state: ASRPTState) -> Iterable[str]:
        """Ids that may have arrived, changed or left since the last decision: the backend's
        change log when it keeps one for this state, else every pending and every known id."""
        if isinstance(snapshot.pending, PendingJobs):
            changed, cursor = snapshot.pending.changes_since(state.change_log, state.change_cursor)
            state.change_log, state.change_cursor = snapshot.pending.log, cursor
            if changed is not None:
                return dict.fromkeys(changed)
        else:
            state.change_log = None
        known = state.seen.keys() | state.sizes_s.keys()  # sizes_s: restored, not yet seen
        return chain(pending, (j for j in known if j not in pending))

    @staticmethod
    def _work_order(state: ASRPTState) -> Iterable[str]:
        """Q by work, behind the longest-waiting overdue job if there is one."""
        oldest = state.overdue.first()
        if oldest is None:
            return state.queue_by_work
        head = oldest[1]
        return chain((head,), (j for j in state.queue_by_work if j != head))

    def _file_by_work(self, job_ids: Iterable[str], state: ASRPTState) -> None:
        """File jobs that entered Q (in virtual completion order) under their predicted work."""
        for job_id in job_ids:
            if job_id not in state.queue_by_work:
                state.queue_by_work.put(job_id, (state.work_s[job_id], state.queue_entries))
                state.queue_entries += 1

    def _watch_wait(self, job: Job, state: ASRPTState) -> None:
        """Note when a pending job becomes overdue for the starvation guard (``work`` order).
        Every pending job is watched, not only those in Q: a job believed huge may never
        complete on the virtual machine, and the guard exists for exactly such jobs."""
        if self.options.queue_order != "work" or job.job_id in state.never_fits:
            return
        due_s = max(job.submit_time_s, state.requeued_at_s.get(job.job_id, -math.inf)) + self.options.overdue_after_s
        if not math.isinf(due_s):
            heapq.heappush(state.overdue_at, (due_s, job.job_id))

    def _move_overdue(self, now_s: float, state: ASRPTState) -> None:
        """Pending jobs whose wait reached the guard join the overdue list."""
        while state.overdue_at and state.overdue_at[0][0] <= now_s:
            _, job_id = heapq.heappop(state.overdue_at)
            job = state.seen.get(job_id)
            if job is None or job_id in state.never_fits:
                continue  # it started or left meanwhile
            waiting_since_s = max(job.submit_time_s, state.requeued_at_s.get(job_id, -math.inf))
            if waiting_since_s + self.options.overdue_after_s > now_s:
                continue  # an entry from before a requeue: the later one is still queued
            state.overdue.put(job_id, (waiting_since_s, id_sort_key(job_id)))

    @staticmethod
    def _forget(job_id: str, state: ASRPTState) -> None:
        """A job left the queue (started, cancelled): drop it from Q and its virtual machine."""
        state.seen.pop(job_id, None)
        state.never_fits.discard(job_id)
        state.alpha_min_cache_s.pop(job_id, None)
        state.first_blocked_s.pop(job_id, None)
        state.queue.pop(job_id, None)
        state.queue_by_work.discard(job_id)
        state.overdue.discard(job_id)
        state.work_s.pop(job_id, None)
        if state.sizes_s.pop(job_id, None) is not None:
            state.machines[state.pool_of.pop(job_id)].remove(job_id)

    def _still_virtual(self, state: ASRPTState) -> list[str]:
        """Released jobs the virtual machine(s) have not completed, by remaining work."""
        if len(state.machines) == 1:
            return next(iter(state.machines.values())).active_ids()
        return sorted(
            (j for m in state.machines.values() for j in m.active_ids()),
            key=lambda j: (state.machines[state.pool_of[j]].remaining_s(j) or 0.0, id_sort_key(j)),
        )

    def _order(self, state: ASRPTState) -> Iterator[str]:
        """Q, then the jobs still on the virtual machine, then those that can never run; each
        part worked out only when reached (``LazyOrder.stream`` may stop early)."""
        if self.options.queue_order != "work":
            yield from state.queue
            yield from self._still_virtual(state)
        else:
            yield from self._work_order(state)
            oldest = state.overdue.first()
            head = oldest[1] if oldest is not None else None  # may be still on the virtual machine
            yield from (j for j in self._still_virtual(state) if j != head)
        yield from sorted(state.never_fits, key=id_sort_key)

    def _next_dispatchable_s(self, state: ASRPTState, accelerators_free: int) -> float:
        """When the next job becomes dispatchable, if that can change anything: with no free
        accelerator, the next job end is the earliest moment a start is possible anyway."""
        if self.options.queue_order == "remaining" or accelerators_free <= 0:
            return math.inf
        return min((m.next_completion_s() for m in state.machines.values()), default=math.inf)

    def _pool(self, job: Job, snapshot: ClusterSnapshot, capacity_by_partition: dict[str, int]) -> tuple[str, int]:
        """The virtual machine a job runs on, and its capacity G."""
        if self.options.virtual_machine == "cluster":
            return "", sum(capacity_by_partition.values())
        allowed = sorted(p.name for p in snapshot.partitions if job.allows(p))
        return ",".join(allowed), sum(capacity_by_partition.get(p, 0) for p in allowed)

    def _alpha_min_s(self, job: Job, snapshot: ClusterSnapshot, state: ASRPTState) -> float:
        cached = state.alpha_min_cache_s.get(job.job_id)
        if cached is None:
            cached = alpha_min_s(job, snapshot.partitions, snapshot.nodes, self.speed,
                                 None if self.dispatch_memo is None else self.dispatch_memo.placement)
            state.alpha_min_cache_s[job.job_id] = cached
        return cached


def _capacity_by_partition(snapshot: ClusterSnapshot) -> dict[str, int]:
    capacity: dict[str, int] = {}
    for node in snapshot.nodes:
        capacity[node.partition] = capacity.get(node.partition, 0) + node.accelerators_total
    return capacity
