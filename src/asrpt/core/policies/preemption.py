"""A-SRPT with requeue-based preemption: a running job whose predicted remaining work is many
times that of the jobs waiting for its accelerators is stopped and requeued (issue 15).

Why: on Philly, a few jobs of hundreds of hours hold a large share of a small cluster, and
every non-preemptive order, the oracles included, ends at 7-11x the lower bound while
Tiresias, which preempts, is near 1.2-1.4x. Slurm cannot pause a GPU job for another; it can
requeue one, which restarts from its last checkpoint. So the simulator charges a preemption
what a requeue costs (:class:`asrpt.sim.cluster.RequeueCost`), and this policy only preempts
when the gain is large: a waiting job must have at most ``1 / preempt_ratio`` of the victim's
predicted remaining work (4 by default), and a job is never stopped in its first
``preempt_exempt_s`` (10 minutes; like Slurm's PreemptExemptTime); both are ASRPTOptions. Only
jobs Slurm may requeue are candidates (``Job.requeueable``). With a ratio above 1 a requeued job can never preempt back the
job that displaced it (that job's remaining work only shrinks).

The victims are chosen as Tiresias chooses its own (a walk over running and waiting jobs by
priority, charging accelerators to partition budgets), with the A-SRPT work of a waiting job
and the remaining work of a running job as the priorities, and then cut to the jobs whose
nodes a start of a job that displaced them really takes.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Callable, Mapping

from asrpt.core.dispatch import expected_end_s
from asrpt.core.model import ClusterSnapshot, Decision, Job, Node, RunningJob
from asrpt.core.placement import alpha_min_s
from asrpt.core.policies.asrpt import ASRPTOptions, ASRPTPolicy, ASRPTState
from asrpt.core.reasons import Reasons
from asrpt.core.speed import SpeedTable

#: A job is requeued only if every accelerator type it may restart on runs it at most this
#: much slower than where it runs: on Gavel's V100/P100/K80 mix a job requeued from a V100
#: restarted on a K80 and took up to 9x as long (total JCT 1.28x -> 2.29x the bound at load 0.5).
RESTART_SLOWDOWN_MAX = 1.25
#: Waiting jobs (the head of Q) the preemption walk considers per decision.
PREEMPT_CANDIDATES = 64


def without_running(snapshot: ClusterSnapshot, job_ids: set[str]) -> ClusterSnapshot:
    """The snapshot as it is once ``job_ids`` have been stopped and requeued."""
    freed: dict[str, int] = {}
    kept = []
    for r in snapshot.running:
        if r.job.job_id in job_ids:
            for name, count in r.placement.node_counts.items():
                freed[name] = freed.get(name, 0) + count
        else:
            kept.append(r)
    nodes: list[Node] = [
        replace(n, accelerators_free=n.accelerators_free + freed[n.name]) if n.name in freed else n for n in snapshot.nodes
    ]
    # Requeued jobs are not started again in the same cycle: they wait behind what displaced them.
    return replace(snapshot, nodes=tuple(nodes), running=tuple(kept))


def requeues_that_make_room(snapshot: ClusterSnapshot, victims: list[str], charged: set[str],
                            decide_on: Callable[[ClusterSnapshot], Decision]) -> tuple[Decision, list[str]]:
    """(the decision, the victims really requeued): decide on the snapshot without ``victims``,
    keep only those whose nodes a start of a job in ``charged`` (the jobs they were displaced
    for) takes, and decide again without just those, or on the unchanged snapshot when none is
    (its identity lets the dispatcher's memo recognise it). Slots freed for a job whose shape
    they do not form would only be churn: taken by a lower job, the victim displacing it again
    at the next event."""
    decision = decide_on(without_running(snapshot, set(victims)))
    used = {name for p in decision.starts if p.job_id in charged for name in p.node_counts}
    nodes_of = {r.job.job_id: r.placement.node_counts for r in snapshot.running}
    needed = [job_id for job_id in victims if used.intersection(nodes_of[job_id])]
    if not needed:
        return decide_on(snapshot), []
    if len(needed) != len(victims):
        decision = decide_on(without_running(snapshot, set(needed)))
    return decision, needed


class PreemptiveASRPTPolicy(ASRPTPolicy):
    """A-SRPT's order and placement, plus requeues of running jobs much larger than the
    waiting jobs that want their accelerators (see the module docstring)."""

    def __init__(self, speed: SpeedTable, options: ASRPTOptions = ASRPTOptions(), name: str = "asrpt-preempt", *,
                 preempt_candidates: int = PREEMPT_CANDIDATES) -> None:
        super().__init__(speed, options, name)
        self.preempt_candidates = preempt_candidates

    @property
    def preempt_ratio(self) -> float:
        return self.options.preempt_ratio

    @property
    def preempt_exempt_s(self) -> float:
        return self.options.preempt_exempt_s

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: ASRPTState) -> Decision:
        pending, update_reasons = self._update(snapshot, now_s, state)
        if len(state.requeues) > 2 * (len(pending) + len(snapshot.running)) + 16:  # drop jobs that left
            live = pending.keys() | {r.job.job_id for r in snapshot.running}
            state.requeues = {j: n for j, n in state.requeues.items() if j in live}
            state.requeued_at_s = {j: t for j, t in state.requeued_at_s.items() if j in live}
        if len(state.restarts_as_fast) > 2 * len(snapshot.running) + 16:
            running_ids = {r.job.job_id for r in snapshot.running}
            state.restarts_as_fast = {j: v for j, v in state.restarts_as_fast.items() if j in running_ids}
        remaining: dict[str, float] = {}  # predicted remaining work per running job, this decision

        def decision_on(view: ClusterSnapshot) -> Decision:
            reasons = Reasons()
            reasons.merge(update_reasons)
            return self._decision(view, now_s, state, pending, reasons)

        victims, charged, wake_at_s = self._victims(snapshot, now_s, state, pending, remaining)
        if snapshot.running:  # a job completing on the virtual machine, or becoming overdue, may
            # displace one, even on a full cluster
            wake_at_s = min(wake_at_s, self._next_dispatchable_s(state, accelerators_free=1),
                            state.overdue_at[0][0] if state.overdue_at else math.inf)
        # The starvation guard's jobs, longest-waiting first, each get a place in its shape,
        # made by requeues if need be, on nodes no other of them was given.
        taken: set[str] = set()
        for rank, (_key, job_id) in enumerate(state.overdue.items()):
            if rank >= self.preempt_candidates:
                break
            job = pending.get(job_id)
            if job is None:
                continue
            room, nodes = self._room_for(job, snapshot, now_s, set(victims), taken, state, remaining)
            taken.update(nodes)
            if room:
                victims.extend(room)
                charged.add(job_id)
        if not victims:
            return self._wake(decision_on(snapshot), wake_at_s)
        decision, needed = requeues_that_make_room(snapshot, victims, charged, decision_on)
        if not needed:
            return self._wake(decision, wake_at_s)
        for job_id in needed:
            state.requeues[job_id] = state.requeues.get(job_id, 0) + 1
            state.requeued_at_s[job_id] = now_s
            decision.reasons.note(job_id, "requeued: jobs of far less predicted work wait for its accelerators")
        return replace(self._wake(decision, wake_at_s), preempts=tuple(needed))

    @staticmethod
    def _wake(decision: Decision, wake_at_s: float) -> Decision:
        if math.isinf(wake_at_s) or (decision.wake_at_s is not None and decision.wake_at_s <= wake_at_s):
            return decision
        return replace(decision, wake_at_s=wake_at_s)

    def _room_for(self, job: Job, snapshot: ClusterSnapshot, now_s: float, chosen: set[str],
                  taken: set[str], state: ASRPTState, remaining: dict[str, float]) -> tuple[list[str], list[str]]:
        """(running jobs to requeue, the nodes) so that ``job`` fits in its shape: on the nodes
        of one allowed partition, outside ``taken``, that cost the least predicted remaining
        work to clear (only jobs :meth:`may_requeue` allows); no jobs when it fits already,
        and nothing at all when it cannot be made to fit."""
        on_node: dict[str, list[RunningJob]] = {}
        for r in snapshot.running:
            if r.job.job_id not in chosen:
                for name in r.placement.node_counts:
                    on_node.setdefault(name, []).append(r)
        freed_by_chosen: dict[str, int] = {}
        for r in snapshot.running:
            if r.job.job_id in chosen:
                for name, count in r.placement.node_counts.items():
                    freed_by_chosen[name] = freed_by_chosen.get(name, 0) + count
        best: tuple[float, list[str], list[str]] | None = None
        for partition in snapshot.partitions:
            if not job.allows(partition):
                continue
            nodes = [n for n in snapshot.nodes if n.partition == partition.name]
            if not nodes:
                continue
            shape = job.request_shape.on(job.accelerators, max(n.accelerators_total for n in nodes))
            if shape is None:  # spread over any nodes: judged as whole nodes' worth
                size = max(n.accelerators_total for n in nodes)
                shape = (-(-job.accelerators // size), min(job.accelerators, size))
            count, per_node = shape
            options: list[tuple[float, str, list[str]]] = []
            for node in nodes:
                if node.accelerators_total < per_node or node.name in taken:
                    continue
                free = node.accelerators_free + freed_by_chosen.get(node.name, 0)
                cost, victims = 0.0, []
                for r in sorted(on_node.get(node.name, ()), key=lambda r: -self._remaining(r, now_s, remaining)):
                    if free >= per_node:
                        break
                    if not self.may_requeue(r, now_s, state, snapshot):
                        continue
                    victims.append(r.job.job_id)
                    cost += self._remaining(r, now_s, remaining)
                    free += r.placement.node_counts[node.name]
                if free >= per_node:
                    options.append((cost, node.name, victims))
            if len(options) < count:
                continue
            options.sort(key=lambda option: option[0])
            cost = sum(option[0] for option in options[:count])
            picked = list(dict.fromkeys(j for option in options[:count] for j in option[2]))
            if best is None or cost < best[0]:
                best = (cost, picked, [option[1] for option in options[:count]])
        return (best[1], best[2]) if best is not None else ([], [])

    def may_requeue(self, running: RunningJob, now_s: float, state: ASRPTState, snapshot: ClusterSnapshot, *,
                    exempt_ends: bool = False) -> bool:
        """Slurm may requeue it, it restarts nowhere much slower (``RESTART_SLOWDOWN_MAX``),
        it was requeued fewer than ``max_requeues`` times, it is past
        its exempt time since the (re)start (or ``exempt_ends``: will be), and it is not a job
        that waited past the starvation guard before it started: that one is never sent back
        to wait again (a guard that lets its own jobs be displaced by smaller ones bounds
        nothing)."""
        job_id = running.job.job_id
        if not running.job.requeueable or state.requeues.get(job_id, 0) >= self.options.max_requeues:
            return False
        if not exempt_ends and now_s - running.start_time_s < self.preempt_exempt_s:
            return False
        waited_since_s = max(running.job.submit_time_s, state.requeued_at_s.get(job_id, -math.inf))
        if waited_since_s + self.options.overdue_after_s <= running.start_time_s:
            return False
        return self._restarts_as_fast(running, snapshot, state)

    def _remaining(self, running: RunningJob, now_s: float, remaining: dict[str, float]) -> float:
        value = remaining.get(running.job.job_id)
        if value is None:
            value = remaining[running.job.job_id] = self.remaining_work_s(running, now_s)
        return value

    def _restarts_as_fast(self, running: RunningJob, snapshot: ClusterSnapshot, state: ASRPTState) -> bool:
        alpha_s = running.placement.iteration_time_s
        known = state.restarts_as_fast.get(running.job.job_id)
        if known is not None and known[0] == alpha_s:
            return known[1]
        answer = self._restarts_within(running, snapshot, alpha_s * RESTART_SLOWDOWN_MAX)
        state.restarts_as_fast[running.job.job_id] = (alpha_s, answer)
        return answer

    def _restarts_within(self, running: RunningJob, snapshot: ClusterSnapshot, limit_s: float) -> bool:
        for partition in snapshot.partitions:
            if running.job.allows(partition):
                alpha_s = alpha_min_s(running.job, (partition,), snapshot.nodes, self.speed)
                if math.isfinite(alpha_s) and alpha_s > limit_s:
                    return False
        return True

    def remaining_work_s(self, running: RunningJob, now_s: float) -> float:
        """Predicted accelerator-seconds a running job still needs where it runs."""
        runtime_s = self.runtime_s(running.job, running.placement.iteration_time_s)
        end_s = expected_end_s(running, now_s, runtime_s)
        return running.job.accelerators * max(end_s - now_s, 0.0)

    def _victims(self, snapshot: ClusterSnapshot, now_s: float, state: ASRPTState,
                 pending: Mapping[str, Job], remaining: dict[str, float]) -> tuple[list[str], set[str], float]:
        """(running jobs to requeue, the waiting jobs they are requeued for, when a job
        displaced now but still in its exempt time may be requeued: a moment to look again)."""
        if not snapshot.running or not pending:
            return [], set(), math.inf
        waiting: list[tuple[float, int, str, Job]] = []
        for rank, job_id in enumerate(self._dispatchable(state)):
            if rank >= self.preempt_candidates:
                break
            job = pending.get(job_id)
            work_s = state.work_s.get(job_id)
            if job is not None and work_s is not None:
                waiting.append((work_s, rank, job_id, job))
        if not waiting:
            return [], set(), math.inf
        smallest_waiting_s = min(w[0] for w in waiting)
        running: list[tuple[float, int, str, RunningJob]] = []
        for rank, r in enumerate(snapshot.running):
            remaining_s = self._remaining(r, now_s, remaining)
            # Only a job that could be displaced at all is worth ranking (most are not); the
            # others are charged first, so that their accelerators count as taken.
            displaceable = remaining_s > smallest_waiting_s * self.preempt_ratio and self.may_requeue(
                r, now_s, state, snapshot, exempt_ends=True)
            running.append((remaining_s / self.preempt_ratio if displaceable else -math.inf, rank, r.job.job_id, r))
        waiting.sort(key=lambda w: (w[0], w[1]))
        running.sort(key=lambda r: (r[0], r[1]))
        budget: dict[str, int] = {}
        for node in snapshot.nodes:
            budget[node.partition] = budget.get(node.partition, 0) + node.accelerators_total
        wanted: set[str] = set()
        charged: set[str] = set()
        displaced: list[tuple[str, str, RunningJob]] = []
        for key, _rank, job_id, item in heapq.merge(running, waiting, key=lambda entry: entry[0]):
            if isinstance(item, RunningJob):
                g, partition = item.job.accelerators, item.placement.partition
                if budget.get(partition, 0) >= g:
                    budget[partition] -= g
                else:
                    displaced.append((job_id, partition, item))
                continue
            g = item.accelerators
            room = [(budget[p.name], p.name) for p in snapshot.partitions if item.allows(p) and budget.get(p.name, 0) >= g]
            if room:
                _, partition = max(room)
                budget[partition] -= g
                wanted.add(partition)
                charged.add(job_id)
        victims: list[str] = []
        wake_at_s = math.inf
        for job_id, partition, r in displaced:
            if partition not in wanted:
                continue
            if self.may_requeue(r, now_s, state, snapshot):
                victims.append(job_id)
            elif now_s - r.start_time_s < self.preempt_exempt_s:
                wake_at_s = min(wake_at_s, r.start_time_s + self.preempt_exempt_s)
        return victims, charged, wake_at_s
