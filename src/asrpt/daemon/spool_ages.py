"""How long spool records have waited for their job, on a clock that survives wall-clock steps.

A record's age is its file's change time against the wall clock, which NTP may step: two days
ahead, and every record still waiting for Slurm to list its job expired at once (issue 16).
The daemon therefore also times each record itself, on the monotonic clock, from the moment
it first saw it, and takes the smaller of the two ages: a step forward ages nothing, a step
back delays an expiry (it never loses a record). After a restart the count starts again from
the wall-clock age, which is all there is to go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable


class SpoolWaitAges:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        #: file id -> (monotonic time first seen, wall-clock age then)
        self._first_seen: dict[Hashable, tuple[float, float]] = {}

    def age_s(self, file_id: Hashable, spooled_at_s: float, now_s: float) -> float:
        """Seconds the record ``file_id`` (written at ``spooled_at_s`` by the wall clock) has waited."""
        wall_age_s = max(now_s - spooled_at_s, 0.0)
        mono_s = self._monotonic()
        first = self._first_seen.setdefault(file_id, (mono_s, wall_age_s))
        return min(wall_age_s, first[1] + (mono_s - first[0]))

    def keep_only(self, file_ids: Iterable[Hashable]) -> None:
        """Forget records that are gone (stored, expired or removed)."""
        live = set(file_ids)
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in live}

    @property
    def tracked(self) -> int:
        return len(self._first_seen)
