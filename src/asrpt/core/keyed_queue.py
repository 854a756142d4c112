"""Job ids kept in key order as they come and go, so a policy never re-sorts its queue."""

from __future__ import annotations

import bisect
from typing import Any, Iterator


class KeyedQueue:
    """Ids sorted by ``(key, id)``: put, re-key and discard cost a binary search and a list
    shift, iteration is in order. Keys must be mutually comparable and never NaN or None."""

    __slots__ = ("_entries", "_key_of")

    def __init__(self) -> None:
        self._entries: list[tuple[Any, str]] = []
        self._key_of: dict[str, Any] = {}

    def put(self, job_id: str, key: Any) -> None:
        """File ``job_id`` under ``key`` (moving it if it was filed under another)."""
        if job_id in self._key_of:
            self.discard(job_id)
        self._key_of[job_id] = key
        bisect.insort(self._entries, (key, job_id))

    def discard(self, job_id: str) -> None:
        """Drop ``job_id`` if it is filed; nothing happens otherwise."""
        if job_id not in self._key_of:
            return
        key = self._key_of.pop(job_id)
        del self._entries[bisect.bisect_left(self._entries, (key, job_id))]

    def key_of(self, job_id: str) -> Any:
        """The key ``job_id`` is filed under, or None."""
        return self._key_of.get(job_id)

    def clear(self) -> None:
        self._entries.clear()
        self._key_of.clear()

    def first(self) -> tuple[Any, str] | None:
        """The (key, id) that comes first, or None when empty."""
        return self._entries[0] if self._entries else None

    def items(self) -> Iterator[tuple[Any, str]]:
        """(key, id) pairs in order."""
        return iter(self._entries)

    def ids(self) -> tuple[str, ...]:
        return tuple(j for _, j in self._entries)

    def __iter__(self) -> Iterator[str]:
        return (j for _, j in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._key_of
