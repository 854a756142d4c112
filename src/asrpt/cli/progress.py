"""Progress of a long command on stderr: done/total, rate and time left.

On a terminal one line redrawn in place; off a terminal (a batch job's log, a pipe) a plain
log line every ``log_every_s`` seconds, so a long replay in a job log shows it is alive
without filling the log. A dozen lines of our own rather than tqdm: tqdm writes carriage
returns into logs and would be one more dependency on login nodes.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def human_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.2 h``, ``4.1 d``: what a person reads at a glance."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "unknown"
    magnitude = abs(seconds)
    if magnitude < 90:
        return f"{seconds:.0f} s"
    if magnitude < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if magnitude < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def progress_line(label: str, done: int, total: int, elapsed_s: float, unit: str = "jobs") -> str:
    """``fifo seed 0: 1200/2000 jobs (60%), 150 jobs/s, 5 s left``."""
    percent = done * 100 // total if total > 0 else 100
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    left = f"{human_duration((total - done) / rate)} left" if rate > 0 else "time left unknown"
    return f"{label}: {done}/{total} {unit} ({percent}%), {rate:.0f} {unit}/s, {left}"


class Progress:
    """Call :meth:`update` with (done, total) as often as you like; :meth:`close` at the end."""

    def __init__(self, label: str, *, stream: TextIO | None = None, unit: str = "jobs", log_every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.unit = unit
        self.log_every_s = log_every_s
        self.clock = clock
        self.terminal = self.stream.isatty()
        self.started_s = clock()
        self._last_shown_s = self.started_s
        self._drawn = False

    def update(self, done: int, total: int) -> None:
        now_s = self.clock()
        interval_s = 0.2 if self.terminal else self.log_every_s
        if now_s - self._last_shown_s < interval_s and done < total:
            return
        if not self.terminal and done >= total and not self._drawn:
            return  # finished before the first log line was due: nothing to report
        self._last_shown_s = now_s
        line = progress_line(self.label, done, total, now_s - self.started_s, self.unit)
        self.stream.write(f"\r{line:<78}" if self.terminal else f"asrpt: {line}\n")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.terminal and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
