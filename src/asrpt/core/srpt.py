"""Online preemptive SRPT on A-SRPT's virtual single machine.

The whole cluster is folded into one machine that does G accelerator-seconds of work per
second, so job i takes ``p_i = (g_i / G) * n_i * alpha_i_min`` seconds on it. Preemptive SRPT
is optimal for total completion time on one machine; the order in which it completes jobs is
the order A-SRPT dispatches them in (the pending queue Q), and its total completion time with
true sizes is a lower bound on any real schedule's.

The machine is advanced event by event (arrivals, completions), so a daemon that looks every
30 s and a simulator that looks at every arrival compute the same virtual schedule.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Iterable

_INF = math.inf


def id_sort_key(job_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order (Slurm's ``9`` before ``10``), then the rest by text."""
    if job_id.isdigit():
        return (0, int(job_id), "")
    return (1, 0, job_id)


def tie_rounded(value: float) -> float:
    """``value`` rounded to a relative 2**-30 (about 1e-9), for keys that rank jobs by size.

    Iterations are derived as duration / alpha (a trace gives durations), so two jobs of the
    same duration come back as 25.0 s and 24.999999999999996 s, and the later one would go
    first. Rounded, such sizes tie and the tie goes by arrival. Sizes closer than 1e-9 are not
    a difference a schedule should act on; one ulp still lands across a rounding boundary about
    once in 4 million pairs, which the tie-break then decides.
    """
    if value == 0.0 or not math.isfinite(value):
        return value
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(mantissa * _TIE_SCALE), exponent - _TIE_BITS)


_TIE_BITS = 30
_TIE_SCALE = float(1 << _TIE_BITS)


def virtual_size_s(accelerators: int, iterations: float, alpha_min_s: float, capacity: int) -> float:
    """A job's length on the virtual machine: (g / G) * n * alpha_min, tie-rounded so that equal
    durations tie (and go by release) instead of being ordered by float noise."""
    if capacity <= 0:
        raise ValueError(f"virtual machine capacity must be positive, got {capacity}")
    return tie_rounded((accelerators / capacity) * max(iterations, 0.0) * alpha_min_s)


# A heap entry is a list [remaining_s, release_s, tie, job_id, valid] so that heap operations
# and sorting compare in C; ``valid`` is cleared instead of deleting (lazy removal). The tie
# key embeds the job id, so two live entries never compare equal.
_REMAINING, _RELEASE, _TIE, _ID, _VALID = range(5)
_Entry = list


class VirtualSRPT:
    """The virtual machine's state: released jobs' remaining work and the completion order.

    Ties break by earlier release, then smaller job id. Only the job at the top of the heap
    runs, so only its remaining time changes while time advances.
    """

    def __init__(self, clock_s: float = -_INF, *, keep_completed: bool = True) -> None:
        self.clock_s = clock_s
        self._heap: list[_Entry] = []
        self._entries: dict[str, _Entry] = {}
        #: Virtual completions in order: (completion time, job id); only with ``keep_completed``
        #: (a long-running daemon does not keep them: ``advance_to`` returns each batch).
        self.keep_completed = keep_completed
        self.completed: list[tuple[float, str]] = []
        self._pending_arrivals: list[tuple[float, tuple[int, int, str], str, float]] = []
        self._arriving: set[str] = set()

    # -- feeding ---------------------------------------------------------------------------
    def release(self, job_id: str, release_s: float, size_s: float) -> None:
        """Announce a job; it joins the machine at ``release_s`` (clamped to the clock)."""
        if job_id in self._entries or job_id in self._arriving:
            raise ValueError(f"job {job_id} already released")
        if size_s < 0 or math.isnan(size_s):
            raise ValueError(f"job {job_id}: virtual size must be >= 0, got {size_s}")
        heapq.heappush(
            self._pending_arrivals, (max(release_s, self.clock_s), id_sort_key(job_id), job_id, size_s)
        )
        self._arriving.add(job_id)

    def resize(self, job_id: str, new_size_s: float, old_size_s: float) -> None:
        """A prediction changed: shift the remaining work by the difference (never below 0)."""
        if job_id in self._arriving:
            for i, (rel, tie, jid, _size) in enumerate(self._pending_arrivals):
                if jid == job_id:
                    self._pending_arrivals[i] = (rel, tie, jid, new_size_s)
                    return
        entry = self._entries.get(job_id)
        if entry is None:
            return  # already virtually complete: its place in Q stays
        remaining = max(entry[_REMAINING] + (new_size_s - old_size_s), 0.0)
        entry[_VALID] = False
        self._push(job_id, remaining, entry[_RELEASE])

    def remove(self, job_id: str) -> None:
        """Forget a job (cancelled, or started in the real cluster before its virtual end)."""
        entry = self._entries.pop(job_id, None)
        if entry is not None:
            entry[_VALID] = False
        if job_id in self._arriving:
            self._arriving.discard(job_id)
            self._pending_arrivals = [a for a in self._pending_arrivals if a[2] != job_id]
            heapq.heapify(self._pending_arrivals)

    # -- running ---------------------------------------------------------------------------
    def advance_to(self, now_s: float) -> list[tuple[float, str]]:
        """Run the machine up to ``now_s``; returns the completions that happened on the way."""
        if now_s < self.clock_s:
            raise ValueError(f"virtual clock cannot go back from {self.clock_s} to {now_s}")
        done: list[tuple[float, str]] = []
        while True:
            next_arrival_s = self._pending_arrivals[0][0] if self._pending_arrivals else _INF
            head = self._head()
            if self.clock_s == -_INF:
                self.clock_s = min(next_arrival_s, now_s)
            if head is not None:
                finish_s = self.clock_s + head[_REMAINING]
                if finish_s <= min(next_arrival_s, now_s):
                    self.clock_s = finish_s
                    heapq.heappop(self._heap)
                    del self._entries[head[_ID]]
                    done.append((finish_s, head[_ID]))
                    continue
            step_to_s = min(next_arrival_s, now_s)
            if head is not None:
                head[_REMAINING] -= step_to_s - self.clock_s  # key only shrinks: heap stays valid
            self.clock_s = step_to_s
            if self._pending_arrivals and next_arrival_s <= now_s:
                rel, _tie, job_id, size = heapq.heappop(self._pending_arrivals)
                self._arriving.discard(job_id)
                self._push(job_id, size, rel)
                continue
            break
        if self.keep_completed:
            self.completed.extend(done)
        return done

    def next_completion_s(self) -> float:
        """When the head completes if nothing else arrives (the policy's next wake-up)."""
        head = self._head()
        return _INF if head is None else self.clock_s + head[_REMAINING]

    def remaining_s(self, job_id: str) -> float | None:
        """Remaining virtual work; 0 once complete, None if unknown."""
        entry = self._entries.get(job_id)
        if entry is not None:
            return entry[_REMAINING]
        for rel, _tie, jid, size in self._pending_arrivals:
            if jid == job_id:
                return size
        return 0.0 if any(jid == job_id for _, jid in self.completed) else None

    def active_ids(self) -> list[str]:
        """Released, not yet virtually complete, in SRPT order."""
        live = sorted(e for e in self._heap if e[_VALID])
        waiting = [a[2] for a in sorted(self._pending_arrivals)]
        return [e[_ID] for e in live] + waiting

    def _head(self) -> _Entry | None:
        while self._heap and not self._heap[0][_VALID]:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def _push(self, job_id: str, remaining_s: float, release_s: float) -> None:
        entry: _Entry = [remaining_s, release_s, id_sort_key(job_id), job_id, True]
        self._entries[job_id] = entry
        heapq.heappush(self._heap, entry)

    # -- persistence -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "clock_s": None if self.clock_s == -_INF else self.clock_s,
            "active": [[e[_ID], e[_REMAINING], e[_RELEASE]] for e in self._heap if e[_VALID]],
            "arrivals": [[jid, rel, size] for rel, _t, jid, size in self._pending_arrivals],
            "keep_completed": self.keep_completed,
            "completed": [[t, jid] for t, jid in self.completed],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VirtualSRPT":
        clock = data.get("clock_s")
        machine = cls(-_INF if clock is None else float(clock), keep_completed=bool(data.get("keep_completed", True)))
        for job_id, remaining, release in data.get("active", []):
            machine._push(str(job_id), float(remaining), float(release))
        for job_id, release, size in data.get("arrivals", []):
            heapq.heappush(
                machine._pending_arrivals, (float(release), id_sort_key(str(job_id)), str(job_id), float(size))
            )
            machine._arriving.add(str(job_id))
        machine.completed = [(float(t), str(j)) for t, j in data.get("completed", [])]
        return machine


def srpt_completion_times(jobs: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Virtual completion time of each ``(job_id, release_s, size_s)`` under preemptive SRPT."""
    machine = VirtualSRPT()
    for job_id, release_s, size_s in jobs:
        machine.release(job_id, release_s, size_s)
    machine.advance_to(_INF)
    return {job_id: t for t, job_id in machine.completed}


def srpt_lower_bound_total_jct_s(jobs: Iterable[tuple[str, float, float]]) -> float:
    """Sum over jobs of (virtual completion - release) with true sizes.

    Any real schedule on G accelerators can be turned into a single-machine schedule of speed G
    in which no job finishes later, and SRPT minimises total completion time there, so this is a
    lower bound on the real total JCT.
    """
    listed = list(jobs)
    done = srpt_completion_times(listed)
    return sum(done[job_id] - release_s for job_id, release_s, _ in listed)
