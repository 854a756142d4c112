"""Why each job sits where it does, formatted only when someone reads it.

A busy queue yields a reason per examined job per cycle, and almost none are ever shown (the
simulator reads none; `asrpt explain` reads one), so the text is built on access.
"""

from __future__ import annotations

from typing import Iterator, Mapping


class Reasons(Mapping[str, str]):
    def __init__(self) -> None:
        self._notes: dict[str, tuple[str, tuple[object, ...]]] = {}

    def note(self, job_id: str, template: str, *args: object) -> None:
        """Record (or replace) ``job_id``'s reason: ``template.format(*args)``, built lazily."""
        self._notes[job_id] = (template, args)

    def prefix(self, job_id: str, template: str, *args: object) -> None:
        """Put ``template.format(*args)`` in front of ``job_id``'s reason (or make it the reason)."""
        old = self._notes.get(job_id)
        if old is None:
            self._notes[job_id] = (template, args)
        else:
            self._notes[job_id] = (template + "; {}", args + (old[0].format(*old[1]),))

    def merge(self, other: "Reasons") -> None:
        self._notes.update(other._notes)

    def __getitem__(self, job_id: str) -> str:
        template, args = self._notes[job_id]
        return template.format(*args)

    def __iter__(self) -> Iterator[str]:
        return iter(self._notes)

    def __len__(self) -> int:
        return len(self._notes)
