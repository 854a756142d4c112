"""Features of a job known at its submission, including causal history aggregates.

Pure: rows in, a float matrix out; no clock, no database, no fitted state. Categorical
values (user, job name, group, ...) are turned into stable hash codes rather than a learned
vocabulary, so the same job gets the same features in every process and an unseen value
needs no special case. The predictor (:mod:`asrpt.predict.predictor`) reads columns by the
names in :data:`FEATURE_NAMES`.

History aggregates of a job use only jobs that **finished strictly before it was
submitted** (a job finishing at the very second of a submission does not count): that is
what the daemon knows when the job arrives, and anything else leaks the future into
training. They are computed with one time-ordered sweep over submit and finish events,
O(n log n) for n rows, or, one submission at a time as the clock moves, by
:class:`CausalHistory`, which gives the same rows.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Value of a feature that does not exist for a row (no hint, no history, no time limit).
#: Log-scale features are >= 0 and codes lie in [0, 1), so -1 cannot be mistaken for data.
MISSING = -1.0

_SECONDS_PER_HOUR = 3600.0
_SECONDS_PER_DAY = 86_400.0
# 1970-01-01 was a Thursday; weekday 0 is Monday.
_EPOCH_WEEKDAY = 3

#: Keys the history aggregates are grouped by.
HISTORY_KEYS: tuple[str, ...] = ("group", "user", "group_accel")
#: Statistics of log1p(iterations) kept per key.
HISTORY_STATS: tuple[str, ...] = ("count", "mean", "median", "last")

CATEGORICAL_FEATURES: tuple[str, ...] = (
    "user_code",
    "job_name_code",
    "group_code",
    "accelerator_type_code",
    "model_name_code",
    "partition_code",
)

FEATURE_NAMES: tuple[str, ...] = (
    *CATEGORICAL_FEATURES,
    "accelerators",
    "parallel_data",
    "parallel_pipeline",
    "parallel_tensor",
    "log_time_limit",
    "submit_hour",
    "submit_weekday",
    "log_hint",
    "user_hint_count",
    "user_hint_log_ratio",
    "log_hint_adjusted",
    *(f"{key}_{stat}" for key in HISTORY_KEYS for stat in HISTORY_STATS),
)

#: Column index of each feature.
COLUMN: dict[str, int] = {name: i for i, name in enumerate(FEATURE_NAMES)}


class JobLike(Protocol):
    """What features need from a row; :class:`JobRecord` and the DB's ``HistoryRow`` fit it.

    ``end_time_s`` and ``iterations`` are the outcome: they feed other rows' aggregates
    (and are the training target) and never this row's own features.
    """

    @property
    def user(self) -> str: ...
    @property
    def job_name(self) -> str | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def partitions(self) -> tuple[str, ...]: ...
    @property
    def accelerators(self) -> float | None: ...
    @property
    def accelerator_type(self) -> str | None: ...
    @property
    def parallel_data(self) -> int | None: ...
    @property
    def parallel_pipeline(self) -> int | None: ...
    @property
    def parallel_tensor(self) -> int | None: ...
    @property
    def model_name(self) -> str | None: ...
    @property
    def time_limit_s(self) -> float | None: ...
    @property
    def submit_time_s(self) -> float: ...
    @property
    def iterations_hint(self) -> float | None: ...
    @property
    def end_time_s(self) -> float | None: ...
    @property
    def iterations(self) -> float | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """A job for the predictor, from a trace or built by the daemon from the history.

    ``iterations`` is the prediction target: training iterations when the job reports them;
    for traces without iterations (PAI) the run time in seconds stands in for it.
    """

    job_id: str
    user: str
    submit_time_s: float
    job_name: str | None = None
    #: Recurrence group (script hash, trace group); None when unknown.
    group: str | None = None
    partitions: tuple[str, ...] = ()
    accelerators: float | None = None
    #: Accelerator type requested (and, in traces, the one the job ran on).
    accelerator_type: str | None = None
    parallel_data: int | None = None
    parallel_pipeline: int | None = None
    parallel_tensor: int | None = None
    model_name: str | None = None
    time_limit_s: float | None = None
    iterations_hint: float | None = None
    #: When the job finished (epoch seconds); None while it has not.
    end_time_s: float | None = None
    iterations: float | None = None
    #: Accelerator type it actually ran on, when known (history keys use it).
    accelerator_type_used: str | None = None


def stable_code(value: str | None) -> float:
    """A category as a number in [0, 1), the same in every process; None -> MISSING."""
    if value is None or value == "":
        return MISSING
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=6).digest()
    return int.from_bytes(digest, "big") / float(1 << 48)


def _number(value: float | None) -> float:
    if value is None:
        return MISSING
    value = float(value)
    return value if math.isfinite(value) else MISSING


def _log(value: float | None) -> float:
    if value is None:
        return MISSING
    value = float(value)
    if not math.isfinite(value) or value < 0:
        return MISSING
    return math.log1p(value)


def target_of(row: JobLike) -> float | None:
    """log1p of the row's iterations, if it finished with a usable count."""
    if row.end_time_s is None or row.iterations is None:
        return None
    value = float(row.iterations)
    if not math.isfinite(value) or value < 0:
        return None
    return math.log1p(value)


class RunningStats:
    """Count, mean, median and last of a stream, median in O(log n) per value (two heaps)."""

    __slots__ = ("count", "total", "last", "_low", "_high")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.last = MISSING
        self._low: list[float] = []  # max-heap of the lower half, negated
        self._high: list[float] = []  # min-heap of the upper half

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.last = value
        if not self._low or value <= -self._low[0]:
            heapq.heappush(self._low, -value)
        else:
            heapq.heappush(self._high, value)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else MISSING

    @property
    def median(self) -> float:
        if not self.count:
            return MISSING
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2.0


def _history_keys(row: JobLike, *, finished: bool) -> tuple[Hashable | None, ...]:
    """(group, user, group x accelerator type) keys of a row.

    For a finished row the accelerator type is the one it ran on, if recorded; for the row
    being featurised it is the type requested.
    """
    accel = row.accelerator_type
    if finished:
        accel = getattr(row, "accelerator_type_used", None) or accel
    group = row.group or None
    return (
        group,
        row.user,
        None if group is None else (group, (accel or "").lower()),
    )


def build_features(rows: Sequence[JobLike]) -> np.ndarray:
    """The feature matrix of ``rows``, one row each, columns :data:`FEATURE_NAMES`.

    Rows may come in any order and may include unfinished jobs (their outcome is simply
    not known yet). Aggregates of row i use only rows j with
    ``end_time_s[j] < submit_time_s[i]`` and a usable ``iterations[j]``.
    """
    n = len(rows)
    out = np.full((n, len(FEATURE_NAMES)), MISSING, dtype=np.float64)
    if n == 0:
        return out

    for i, row in enumerate(rows):
        _fill_static(row, out[i])

    _sweep_history(rows, out)
    return out


def _fill_static(row: JobLike, values: np.ndarray) -> None:
    """The columns that depend on the row alone (request, submit time, hint)."""
    values[COLUMN["user_code"]] = stable_code(row.user)
    values[COLUMN["job_name_code"]] = stable_code(row.job_name)
    values[COLUMN["group_code"]] = stable_code(row.group)
    values[COLUMN["accelerator_type_code"]] = stable_code(
        row.accelerator_type.lower() if row.accelerator_type else None
    )
    values[COLUMN["model_name_code"]] = stable_code(row.model_name)
    values[COLUMN["partition_code"]] = stable_code(",".join(sorted(row.partitions)))
    values[COLUMN["accelerators"]] = _number(row.accelerators)
    values[COLUMN["parallel_data"]] = _number(row.parallel_data)
    values[COLUMN["parallel_pipeline"]] = _number(row.parallel_pipeline)
    values[COLUMN["parallel_tensor"]] = _number(row.parallel_tensor)
    values[COLUMN["log_time_limit"]] = _log(row.time_limit_s)
    t = float(row.submit_time_s)
    values[COLUMN["submit_hour"]] = math.floor(t / _SECONDS_PER_HOUR) % 24
    values[COLUMN["submit_weekday"]] = (math.floor(t / _SECONDS_PER_DAY) + _EPOCH_WEEKDAY) % 7
    values[COLUMN["log_hint"]] = _log(row.iterations_hint)


def _sweep_history(rows: Sequence[JobLike], out: np.ndarray) -> None:
    """Fill the history columns with one pass over submit (query) and finish (update) events."""
    targets = [target_of(row) for row in rows]
    # Event kind 0 = a submission asks, 1 = a finish updates; at equal times asks go first,
    # so "finished before submitted" is strict. Index last keeps the order deterministic.
    events: list[tuple[float, int, int]] = []
    for i, row in enumerate(rows):
        events.append((float(row.submit_time_s), 0, i))
        if targets[i] is not None:
            events.append((float(row.end_time_s), 1, i))  # type: ignore[arg-type]
    events.sort()

    history = CausalHistory()
    for _, kind, i in events:
        if kind == 1:
            history._add(rows[i], targets[i])  # type: ignore[arg-type]
        else:
            history._fill(rows[i], out[i])


_HISTORY_COLUMNS = [[COLUMN[f"{key}_{stat}"] for stat in HISTORY_STATS] for key in HISTORY_KEYS]


class CausalHistory:
    """The history aggregates of :func:`build_features`, kept up to date as jobs finish.

    For a caller that featurises each job once, as it is submitted, while time only moves
    forward (the simulator's predictor): :meth:`features` then costs O(1) instead of the
    O(n log n) rebuild over every finished row, and returns exactly the row
    ``build_features([*finished, row])[-1]`` would. Finished rows must be added in
    non-decreasing ``end_time_s`` (the order a clock delivers them); a row finished at or
    after a submission is held back until a later submission, as the sweep's strict
    "finished before submitted" requires.
    """

    __slots__ = ("_stats", "_hint_ratios", "_held", "_applied_end_s", "_added_end_s")

    def __init__(self) -> None:
        self._stats: list[dict[Hashable, RunningStats]] = [{} for _ in HISTORY_KEYS]
        self._hint_ratios: dict[str, RunningStats] = {}
        #: Finished rows not yet folded in (end time >= the last submission asked about).
        self._held: deque[tuple[float, JobLike, float]] = deque()
        self._applied_end_s = -math.inf
        self._added_end_s = -math.inf

    def add_finished(self, row: JobLike) -> None:
        """Record a finished row (one without a usable outcome is ignored, as in the sweep)."""
        value = target_of(row)
        if value is None:
            return
        end_s = float(row.end_time_s)  # type: ignore[arg-type]
        if end_s < self._added_end_s:
            raise ValueError(
                f"finished rows must come in end-time order: {end_s} after {self._added_end_s}"
            )
        self._added_end_s = end_s
        self._held.append((end_s, row, value))

    def features(self, row: JobLike) -> np.ndarray | None:
        """The feature row of ``row`` against the rows finished before its submission.

        None when that cannot be answered any more: a row finished at or after this
        submission has already been folded in for a later one (the caller rebuilds).
        """
        submit_s = float(row.submit_time_s)
        held = self._held
        while held and held[0][0] < submit_s:
            end_s, finished, value = held.popleft()
            self._add(finished, value)
            self._applied_end_s = end_s
        if self._applied_end_s >= submit_s:
            return None
        values = np.full(len(FEATURE_NAMES), MISSING, dtype=np.float64)
        _fill_static(row, values)
        self._fill(row, values)
        return values

    def _add(self, row: JobLike, value: float) -> None:
        """Fold in one finished row whose target (log1p iterations) is ``value``."""
        for table, key in zip(self._stats, _history_keys(row, finished=True)):
            if key is not None:
                table.setdefault(key, RunningStats()).add(value)
        log_hint = _log(row.iterations_hint)
        if log_hint != MISSING:
            self._hint_ratios.setdefault(row.user, RunningStats()).add(value - log_hint)

    def _fill(self, row: JobLike, values: np.ndarray) -> None:
        """Write the history columns of ``row`` (its static columns already filled)."""
        for table, key, cols in zip(self._stats, _history_keys(row, finished=False), _HISTORY_COLUMNS):
            running = None if key is None else table.get(key)
            if running is None:
                values[cols[0]] = 0.0
                continue
            values[cols[0]] = running.count
            values[cols[1]] = running.mean
            values[cols[2]] = running.median
            values[cols[3]] = running.last
        ratio = self._hint_ratios.get(row.user)
        values[_C_HINT_COUNT] = 0.0 if ratio is None else ratio.count
        log_ratio = 0.0 if ratio is None else ratio.median
        values[_C_HINT_RATIO] = log_ratio
        if values[_C_LOG_HINT] != MISSING:
            values[_C_HINT_ADJUSTED] = max(0.0, values[_C_LOG_HINT] + log_ratio)


_C_HINT_COUNT = COLUMN["user_hint_count"]
_C_HINT_RATIO = COLUMN["user_hint_log_ratio"]
_C_HINT_ADJUSTED = COLUMN["log_hint_adjusted"]
_C_LOG_HINT = COLUMN["log_hint"]


@dataclass(frozen=True, slots=True)
class HintAccuracy:
    """How a user's iteration hints compared with what their jobs then ran."""

    #: Finished jobs that carried a hint.
    count: int
    #: Median of actual / hint (in log1p space); 4.0 means the user states a quarter.
    median_ratio: float


def hint_accuracy(rows: Sequence[JobLike], *, as_of_s: float | None = None) -> dict[str, HintAccuracy]:
    """Per-user accuracy of iteration hints over jobs finished before ``as_of_s`` (all if None).

    The same statistic that feeds ``user_hint_log_ratio``, for display (`asrpt explain`).
    """
    ratios: dict[str, RunningStats] = {}
    for row in rows:
        value = target_of(row)
        log_hint = _log(row.iterations_hint)
        if value is None or log_hint == MISSING:
            continue
        if as_of_s is not None and float(row.end_time_s) >= as_of_s:  # type: ignore[arg-type]
            continue
        ratios.setdefault(row.user, RunningStats()).add(value - log_hint)
    return {
        user: HintAccuracy(count=r.count, median_ratio=math.exp(r.median))
        for user, r in ratios.items()
    }


def adjust_hint(hint: float, log_ratio: float) -> float:
    """A hint scaled by the user's track record (``log_ratio`` from ``user_hint_log_ratio``)."""
    return max(0.0, math.expm1(math.log1p(max(0.0, hint)) + log_ratio))
