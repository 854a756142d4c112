"""Readers that turn job traces into one neutral record type, :class:`TraceRecord`.

Every supported trace says when a job arrived, how many accelerators it held and (most of
them) how long it ran; few say more. The readers keep what a trace has and nothing it does
not: model type and iteration counts only where the trace carries them (Gavel's msr traces,
Sia's workloads), accelerator type only where the trace names one (PAI, typed Slurm GRES).
Turning records into scheduler jobs (workload class, parallel layout, iterations, time
limits) is :mod:`asrpt.sim.workload`'s business.

Formats (``fmt``):

``pai``
    Alibaba PAI 2020 simulator sample (``pai_job_duration_estimate_*.csv``). Fractional GPU
    shares are rounded up (``fractional="ceil"``) or dropped (``"drop"``); CPU-only rows
    (0 GPUs or ``gpu_type`` CPU) are skipped and counted.
``philly``
    Pollux's one-row-per-job Philly trace (``philly.csv``): submit timestamps become seconds
    after the earliest one; the virtual cluster (VC) id goes into ``user``; the trace has no
    job ids, so a job's id is its 0-based data-row index.
``gavel``
    Gavel's msr traces (``*.trace``, 7 tab-separated fields, no header) and, recognised by
    their 10 fields, its ``physical_cluster`` traces. The job type's model becomes the workload
    class, ``total_steps`` the iterations and the job type's batch size is kept; there is no
    duration (it follows from the speed model). The file name (the VC id) goes into ``user``.
``sia``
    Sia's workloads (``name,time,application,num_replicas,batch_size``). No durations either:
    iterations are the steps Sia's validation profiles need to reach the target metric at the
    job's batch size (:data:`SIA_STEPS_TO_TARGET`).
``csv``
    Any CSV with a header, plus a column mapping (:data:`CSV_COLUMN_KEYS`): submit time in
    seconds or ISO 8601, duration in seconds or Slurm's ``[D-]HH:MM:SS``.
``sacct``
    ``sacct -P`` (or ``-p``) output with its header, so admins replay their own history.
    Job steps (``123.batch``, ``123.0``) and jobs that have not finished are skipped.

Rows are either *used*, *skipped* on purpose (CPU-only, job steps...) or *bad* (unparseable,
negative duration, wrong number of fields, a job id seen on an earlier row: the first row of
an id is kept). Skips and bad rows are counted by reason in :attr:`TraceReadResult.skipped`;
bad rows also log one warning with the first line numbers, or, with ``strict=True``, raise
:class:`~asrpt.exceptions.TraceFormatError` at the first one (for repeated ids: naming every
repeated id). A file that cannot be read at all (missing, no header, a required column
absent) always raises. Messages quote the file only as short escaped excerpts, so a binary
file is named as one, never echoed. A UTF-8 byte-order mark is ignored. Line numbers are
1-based physical lines of the file, header included.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Mapping, TextIO

from asrpt.escaping import excerpt, looks_binary
from asrpt.exceptions import ConfigError, TraceFormatError

__all__ = [
    "FORMATS",
    "TRACE_FORMATS",
    "CSV_COLUMN_KEYS",
    "SIA_STEPS_TO_TARGET",
    "GAVEL_V100_STEP_TIME_S",
    "TraceRecord",
    "TraceReadResult",
    "TraceFileNotFound",
    "read_trace",
    "parse_columns",
    "parse_slurm_duration_s",
    "workload_class_name",
]

_LOG = logging.getLogger(__name__)

#: Names accepted by :func:`read_trace`'s ``fmt``.
FORMATS: tuple[str, ...] = ("pai", "philly", "gavel", "sia", "csv", "sacct")
#: Alias of :data:`FORMATS` for callers that prefer the longer name.
TRACE_FORMATS = FORMATS

#: Keys of the ``csv`` column mapping; the first three are required.
CSV_COLUMN_KEYS: tuple[str, ...] = (
    "submit", "duration", "gpus", "job_id", "user", "name", "group", "gpu_type", "time_limit",
)
_CSV_REQUIRED = ("submit", "duration", "gpus")

#: How many bad-row line numbers a result keeps (and the warning shows).
MAX_BAD_LINES = 10

_FRACTIONAL_MODES = ("ceil", "drop")

#: Steps to reach the target metric per (application, global batch size): the last ``iteration``
#: of Sia's ``validation-<batch>.csv`` profiles (siasosp23/artifacts, our shared copy in
#: traces/sia-throughput-profiles). Other batch sizes scale from the nearest profiled one.
SIA_STEPS_TO_TARGET: Mapping[str, Mapping[int, int]] = {
    "bert": {12: 14774, 24: 7427, 48: 3732, 96: 1885, 192: 940, 384: 480},
    "cifar10": {128: 39062, 256: 20377, 512: 10615, 1024: 5722, 2048: 3178, 4096: 2011},
    "deepspeech2": {20: 28536, 40: 14711, 80: 7683, 160: 4041, 320: 2264, 640: 1423},
    "imagenet": {200: 576525, 400: 292995, 800: 150231, 1600: 78453, 3200: 42123, 6400: 23972, 12800: 14461},
    "yolov3": {8: 103444, 16: 52905, 32: 27430, 64: 14577, 128: 8075, 256: 4809, 512: 3143},
}

#: Seconds per training step on one V100, alone, per (workload class, batch size): Gavel's
#: measured isolated throughputs (``simulation_throughputs.json``, worker type v100, scale
#: factor 1; stanford-futuredata/gavel, MIT), inverted. Gavel's traces count steps at these batch
#: sizes while the speed table has one batch size per class; this converts between them.
GAVEL_V100_STEP_TIME_S: Mapping[str, Mapping[int, float]] = {
    "resnet18": {16: 0.03091, 32: 0.03339, 64: 0.04151, 128: 0.05557, 256: 0.09708},
    "resnet50": {16: 0.08775, 32: 0.12841, 64: 0.22754, 128: 0.40052},
    "transformer": {16: 0.09038, 32: 0.09415, 64: 0.11604, 128: 0.18362, 256: 0.62690},
    "lm": {5: 0.00916, 10: 0.01225, 20: 0.01545, 40: 0.02211, 80: 0.03541},
    "recommendation": {512: 0.04289, 1024: 0.07529, 2048: 0.13388, 4096: 0.25601, 8192: 0.35193},
}

#: sacct states of jobs that have not finished: their elapsed time is not a duration yet.
_UNFINISHED_STATES = frozenset({
    "PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED",
    "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})
#: Generic resources counted as accelerators in sacct TRES strings.
_ACCELERATOR_GRES = ("gpu", "npu")


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRecord:
    """One job of a trace, as the trace tells it (nothing invented here)."""

    #: The trace's job id; a 0-based data-row index where the trace has none.
    job_id: str
    #: Seconds from the trace's start; the first job is at >= 0.
    submit_time_s: float
    #: Wall time the job ran, seconds. None only when the trace gives iterations instead
    #: (gavel, sia); the duration then follows from the speed model.
    duration_s: float | None
    #: Accelerators held at once (fractional shares already resolved).
    accelerators: int
    user: str = ""
    name: str = ""
    #: Recurrence group (PAI's ``group``; sacct: user/job name); "" when the trace has none.
    group: str = ""
    #: Accelerator type as the trace spells it ("V100M32", "a100"); None = any.
    accelerator_type: str | None = None
    #: Requested wall-time limit, seconds; None when the trace has none.
    time_limit_s: float | None = None
    #: Workload class (speed-table spelling) where the trace names the model, else None.
    workload_class: str | None = None
    #: True iterations where the trace has them (gavel, sia), else None; in the trace's own
    #: units (steps at ``batch_size``), which :mod:`asrpt.sim.workload` converts.
    iterations: float | None = None
    #: Batch size the iterations are counted at, where the trace says (gavel: per worker,
    #: sia: global), else None.
    batch_size: int | None = None
    #: 1-based line of the trace file the record came from.
    source_line: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.accelerators, int) or self.accelerators < 1:
            raise ValueError(f"job {self.job_id}: accelerators must be a positive integer, got {self.accelerators!r}")
        if not math.isfinite(self.submit_time_s) or self.submit_time_s < 0:
            raise ValueError(f"job {self.job_id}: submit_time_s must be finite and >= 0, got {self.submit_time_s!r}")
        if self.duration_s is None:
            if self.iterations is None:
                raise ValueError(f"job {self.job_id}: needs a duration or iterations")
        elif not math.isfinite(self.duration_s) or self.duration_s < 0:
            raise ValueError(f"job {self.job_id}: duration_s must be finite and >= 0, got {self.duration_s!r}")
        if self.iterations is not None and (not math.isfinite(self.iterations) or self.iterations <= 0):
            raise ValueError(f"job {self.job_id}: iterations must be finite and > 0, got {self.iterations!r}")


@dataclass(frozen=True, slots=True)
class TraceReadResult:
    """What a reader produced: records sorted by submit time, and what it left out and why."""

    records: list[TraceRecord]
    #: Rows left out, by reason (skips on purpose and bad rows alike).
    skipped: dict[str, int] = field(default_factory=dict)
    #: First few (:data:`MAX_BAD_LINES`) line numbers of bad rows.
    bad_lines: list[int] = field(default_factory=list)
    #: Number of bad rows (the part of ``skipped`` that is an error in the file).
    bad_rows: int = 0

    def summary(self) -> str:
        """One line for a report: records kept, rows skipped by reason, first bad lines."""
        parts = [f"{len(self.records)} jobs"]
        if self.skipped:
            reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(self.skipped.items()))
            parts.append(f"skipped {sum(self.skipped.values())} rows ({reasons})")
        if self.bad_lines:
            parts.append("first bad lines " + ", ".join(map(str, self.bad_lines)))
        return "; ".join(parts)


class TraceFileNotFound(TraceFormatError, FileNotFoundError):
    """The trace file does not exist."""


class _Skip(Exception):
    """A row deliberately not used (not an error in the file)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Bad(Exception):
    """A row that does not follow the format; ``reason`` is the count key, ``detail`` the evidence."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _Tally:
    """Counts skips and bad rows; raises on the first bad row when strict."""

    def __init__(self, path: Path, fmt: str, strict: bool) -> None:
        self.path = path
        self.fmt = fmt
        self.strict = strict
        self.skipped: dict[str, int] = {}
        self.bad_lines: list[int] = []
        self.bad_rows = 0
        self.bad_reasons: dict[str, int] = {}

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def bad(self, line: int, error: _Bad, raw: str) -> None:
        if self.strict:
            detail = f" ({error.detail})" if error.detail else ""
            row = f": {excerpt(raw, 80)}" if raw else ""
            raise TraceFormatError(f"{self.path}:{line}: bad {self.fmt} row: {error.reason}{detail}{row}")
        self.skip(error.reason)
        self.bad_reasons[error.reason] = self.bad_reasons.get(error.reason, 0) + 1
        self.bad_rows += 1
        if len(self.bad_lines) < MAX_BAD_LINES:
            self.bad_lines.append(line)

    def report(self) -> None:
        if self.bad_rows:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.bad_reasons.items()))
            _LOG.warning(
                "%s: skipped %d bad %s row(s) (%s); first at line(s) %s",
                self.path, self.bad_rows, self.fmt, reasons, ", ".join(map(str, self.bad_lines)),
            )
        deliberate = {r: n for r, n in self.skipped.items() if r not in self.bad_reasons}
        if deliberate:
            _LOG.info(
                "%s: left out %s", self.path, ", ".join(f"{n} row(s): {r}" for r, n in sorted(deliberate.items()))
            )


# -- public entry point ------------------------------------------------------------------------


def read_trace(
    path: str | os.PathLike[str],
    fmt: str,
    *,
    columns: Mapping[str, str] | None = None,
    strict: bool = False,
    limit: int | None = None,
    fractional: str = "ceil",
) -> TraceReadResult:
    """Read a trace file into :class:`TraceRecord` s sorted by (submit time, line).

    Parameters
    ----------
    path
        The trace file (``.gz`` is decompressed).
    fmt
        One of :data:`FORMATS`.
    columns
        ``csv`` only (required there): maps :data:`CSV_COLUMN_KEYS` to the file's column names,
        e.g. ``{"submit": "t", "duration": "runtime", "gpus": "n"}``; see :func:`parse_columns`.
    strict
        Raise :class:`~asrpt.exceptions.TraceFormatError` at the first bad row instead of
        skipping it.
    limit
        Keep only the first ``limit`` records in submit order. Traces need not be sorted, so the
        whole file is read either way, and the skip counts cover the whole file.
    fractional
        What to do with a fractional accelerator count (a GPU share): "ceil" rounds it up to
        whole accelerators, "drop" skips the row.

    Raises
    ------
    ConfigError
        Unknown ``fmt``, ``fractional`` or column-mapping key, or a mapping given to a format
        that takes none.
    TraceFileNotFound
        The file does not exist.
    TraceFormatError
        The file cannot be read as ``fmt`` (no header, a required column missing), or a bad row
        with ``strict``.
    """
    fmt_key = fmt.strip().lower() if isinstance(fmt, str) else fmt
    if fmt_key not in FORMATS:
        raise ConfigError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    if fractional not in _FRACTIONAL_MODES:
        raise ConfigError(f"unknown fractional mode {fractional!r}; valid: {', '.join(_FRACTIONAL_MODES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer, got {limit!r}")
    if fmt_key == "csv":
        if not columns:
            raise ConfigError(
                "the csv format needs a column mapping, e.g. submit=COL,duration=COL,gpus=COL; "
                f"keys: {', '.join(CSV_COLUMN_KEYS)}"
            )
        mapping = _check_columns(columns)
    elif columns:
        raise ConfigError(f"a column mapping applies only to the csv format, not {fmt_key!r}")
    else:
        mapping = {}

    file_path = Path(path)
    if not file_path.exists():
        raise TraceFileNotFound(f"trace file not found: {file_path}")
    if file_path.is_dir():
        raise TraceFormatError(f"trace path is a directory, not a file: {file_path}")

    tally = _Tally(file_path, fmt_key, strict)
    with _open_text(file_path) as stream:
        if fmt_key == "pai":
            records = _read_pai(stream, tally, fractional)
        elif fmt_key == "philly":
            records = _read_philly(stream, tally, fractional)
        elif fmt_key == "gavel":
            records = _read_gavel(stream, tally, vc=_stem(file_path))
        elif fmt_key == "sia":
            records = _read_sia(stream, tally)
        elif fmt_key == "csv":
            records = _read_csv(stream, tally, mapping, fractional)
        else:
            records = _read_sacct(stream, tally)
    records = _first_row_of_each_id(records, tally)
    tally.report()
    records.sort(key=lambda r: (r.submit_time_s, r.source_line))
    if limit is not None:
        records = records[:limit]
    return TraceReadResult(records=records, skipped=dict(tally.skipped), bad_lines=sorted(tally.bad_lines),
                           bad_rows=tally.bad_rows)


def parse_columns(text: str) -> dict[str, str]:
    """Parse a command-line column mapping ``"submit=COL,duration=COL,gpus=COL[,user=COL...]"``.

    Keys are checked against :data:`CSV_COLUMN_KEYS`; column names are kept as written (they
    must match the CSV header exactly, spaces at either end removed).
    """
    mapping: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, column = part.partition("=")
        key, column = key.strip().lower(), column.strip()
        if not sep or not key or not column:
            raise ConfigError(f"column mapping entry {part!r} is not KEY=COLUMN (keys: {', '.join(CSV_COLUMN_KEYS)})")
        if key in mapping:
            raise ConfigError(f"column mapping names {key!r} twice")
        mapping[key] = column
    return _check_columns(mapping)


def parse_slurm_duration_s(text: str) -> float | None:
    """Seconds in a Slurm time string; None for "UNLIMITED", "Partition_Limit", "INVALID" or "".

    Accepts what Slurm prints and takes: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS`` (seconds may carry a fraction, as in sacct's CPU times). A bare number is
    minutes here, as in ``sbatch --time``; callers with plain seconds parse those themselves.

    Raises
    ------
    ValueError
        The string is none of these.
    """
    s = text.strip()
    if not s or s.upper() in ("UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE", "UNKNOWN"):
        return None
    days = 0
    if "-" in s:
        day_text, _, s = s.partition("-")
        if not day_text.isdigit() or not s:
            raise ValueError(f"not a Slurm time: {text!r}")
        days = int(day_text)
        parts = s.split(":")
        if len(parts) > 3:
            raise ValueError(f"not a Slurm time: {text!r}")
        hours, minutes, seconds = (parts + ["0", "0"])[:3]
    else:
        parts = s.split(":")
        if len(parts) == 1:
            hours, minutes, seconds = "0", parts[0], "0"
        elif len(parts) == 2:
            hours, minutes, seconds = "0", parts[0], parts[1]
        elif len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            raise ValueError(f"not a Slurm time: {text!r}")
    if not (hours.isdigit() and minutes.isdigit() and re.fullmatch(r"\d+(\.\d+)?", seconds)):
        raise ValueError(f"not a Slurm time: {text!r}")
    return days * 86400.0 + int(hours) * 3600.0 + int(minutes) * 60.0 + float(seconds)


def workload_class_name(model: str) -> str:
    """Speed-table spelling of a model name: lower case, letters and digits only ("ResNet-50" -> "resnet50")."""
    return re.sub(r"[^0-9a-z]", "", model.lower())


# -- shared helpers ----------------------------------------------------------------------------


def _check_columns(columns: Mapping[str, str]) -> dict[str, str]:
    mapping = {str(k).strip().lower(): str(v) for k, v in columns.items()}
    unknown = sorted(k for k in mapping if k not in CSV_COLUMN_KEYS)
    if unknown:
        raise ConfigError(f"unknown column mapping key(s) {', '.join(unknown)}; valid keys: {', '.join(CSV_COLUMN_KEYS)}")
    missing = [k for k in _CSV_REQUIRED if not mapping.get(k)]
    if missing:
        raise ConfigError(
            f"column mapping lacks {', '.join(missing)}; required: {', '.join(_CSV_REQUIRED)} "
            f"(optional: {', '.join(k for k in CSV_COLUMN_KEYS if k not in _CSV_REQUIRED)})"
        )
    return mapping


def _first_row_of_each_id(records: list[TraceRecord], tally: _Tally) -> list[TraceRecord]:
    """The records without repeats of a job id (records come in file order): the first row of an
    id is kept and later ones are bad rows, or, with strict, the whole file is rejected naming
    every repeated id (a trace that says two things about one job cannot be trusted)."""
    first_line: dict[str, int] = {}
    kept: list[TraceRecord] = []
    repeats: list[tuple[TraceRecord, int]] = []
    for record in records:
        line = first_line.setdefault(record.job_id, record.source_line)
        if line == record.source_line:
            kept.append(record)
        else:
            repeats.append((record, line))
    if repeats and tally.strict:
        shown = "; ".join(f"{excerpt(r.job_id, 40)} at lines {line} and {r.source_line}"
                          for r, line in repeats[:MAX_BAD_LINES])
        more = f"; and {len(repeats) - MAX_BAD_LINES} more" if len(repeats) > MAX_BAD_LINES else ""
        raise TraceFormatError(f"{tally.path}: {len(repeats)} duplicate job id(s), each id must appear once: {shown}{more}")
    for record, line in repeats:
        tally.bad(record.source_line, _Bad("duplicate job id", f"first at line {line}"), "")
    return kept


def _header_shown(header: list[str]) -> str:
    """What a rejected header held, short and escaped; a binary file is called one."""
    text = ", ".join(header)
    if looks_binary(text):
        return f"the file looks binary, not a text trace; it begins {excerpt(text, 40)}"
    return f"the header has: {excerpt(text, 200)}"


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".trace", ".csv", ".txt"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _open_text(path: Path) -> TextIO:
    # Undecodable bytes become U+FFFD so a damaged line is a bad row, not a crash mid-file;
    # utf-8-sig drops the byte-order mark spreadsheet programs put before the header.
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="replace", newline="")
    return open(path, encoding="utf-8-sig", errors="replace", newline="")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Bad(f"unparseable {what}", excerpt(text)) from None
    if not math.isfinite(value):
        raise _Bad(f"unparseable {what}", excerpt(text))
    return value


def _duration(text: str) -> float:
    """Seconds: a plain number, or a Slurm ``[D-]HH:MM:SS`` string."""
    text = text.strip()
    if not text:
        raise _Bad("missing duration")
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = parse_slurm_duration_s(text)
        except ValueError:
            raise _Bad("unparseable duration", excerpt(text)) from None
        if parsed is None:
            raise _Bad("unparseable duration", excerpt(text))
        value = parsed
    if not math.isfinite(value):
        raise _Bad("unparseable duration", excerpt(text))
    if value < 0:
        raise _Bad("negative duration", excerpt(text))
    if value == 0:
        raise _Skip("zero duration")
    return value


def _time_limit(text: str) -> float | None:
    """Seconds: plain number, or Slurm time; "" / UNLIMITED / Partition_Limit mean none."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            return parse_slurm_duration_s(text)
        except ValueError:
            raise _Bad("unparseable time limit", excerpt(text)) from None
    if not math.isfinite(value) or value <= 0:
        raise _Bad("unparseable time limit", excerpt(text))
    return value


def _accelerator_count(text: str, fractional: str) -> int:
    value = _number(text.strip(), "accelerator count")
    if value < 0:
        raise _Bad("negative accelerator count", excerpt(text))
    if value == 0:
        raise _Skip("cpu-only")
    whole = round(value)
    if abs(value - whole) <= 1e-9:
        return int(whole)
    if fractional == "drop":
        raise _Skip("fractional accelerator share")
    return math.ceil(value)


def _epoch_s(text: str) -> float:
    """Seconds since the epoch of an ISO 8601 timestamp; one without a zone is read as UTC."""
    text = text.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _Bad("unparseable timestamp", excerpt(text)) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _submit_offset(text: str, what: str = "submit time") -> float:
    value = _number(text.strip(), what)
    if value < 0:
        raise _Bad(f"negative {what}", excerpt(text))
    return value


class _RawRecord:
    """A record before absolute submit times are shifted (TraceRecord wants them >= 0)."""

    __slots__ = ("values",)

    def __init__(self, **values: object) -> None:
        self.values = values


def _finish(raws: list[_RawRecord], shift: bool) -> list[TraceRecord]:
    if not raws:
        return []
    start = min(float(r.values["submit_time_s"]) for r in raws) if shift else 0.0  # type: ignore[arg-type]
    out = []
    for raw in raws:
        values = dict(raw.values)
        values["submit_time_s"] = float(values["submit_time_s"]) - start  # type: ignore[arg-type]
        out.append(TraceRecord(**values))  # type: ignore[arg-type]
    return out


def _csv_rows(stream: TextIO, tally: _Tally, what: str, delimiter: str = ",") -> tuple[list[str], Iterator[tuple[int, list[str], str]]]:
    """Header and (line, fields, raw) rows of a delimited file; rows of the wrong width are bad."""
    reader = csv.reader(stream, delimiter=delimiter)
    header: list[str] | None = None
    for fields in reader:
        if fields and any(f.strip() for f in fields):
            header = [f.strip() for f in fields]
            break
    if header is None:
        raise TraceFormatError(f"{tally.path}: empty file, expected a {what} header")

    def rows() -> Iterator[tuple[int, list[str], str]]:
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                tally.bad(reader.line_num, _Bad("unreadable row", str(exc)), "")
                continue
            if not fields or not any(f.strip() for f in fields):
                continue
            raw = delimiter.join(fields)
            if len(fields) != len(header):
                tally.bad(reader.line_num, _Bad("wrong number of fields", f"expected {len(header)}, got {len(fields)}"), raw)
                continue
            yield reader.line_num, fields, raw

    return header, rows()


def _require(header: list[str], wanted: tuple[str, ...], tally: _Tally) -> dict[str, int]:
    index = {name: i for i, name in enumerate(header)}
    found = {w: index.get(w) for w in wanted}
    missing = [w for w, i in found.items() if i is None]
    if missing:
        raise TraceFormatError(
            f"{tally.path}: not a {tally.fmt} trace: column(s) {', '.join(missing)} missing; "
            f"{_header_shown(header)}"
        )
    return {w: i for w, i in found.items() if i is not None}


def _each(rows: Iterator[tuple[int, list[str], str]], tally: _Tally,
          parse: Callable[[int, list[str], int], _RawRecord]) -> list[_RawRecord]:
    out: list[_RawRecord] = []
    for index, (line, fields, raw) in enumerate(rows):
        try:
            out.append(parse(line, fields, index))
        except _Skip as skip:
            tally.skip(skip.reason)
        except _Bad as bad:
            tally.bad(line, bad, raw)
    return out


# -- formats -----------------------------------------------------------------------------------


def _read_pai(stream: TextIO, tally: _Tally, fractional: str) -> list[TraceRecord]:
    header, rows = _csv_rows(stream, tally, "pai")
    col = _require(header, ("job_id", "user", "num_gpu", "duration", "job_name", "submit_time", "group", "gpu_type"), tally)

    def parse(line: int, f: list[str], index: int) -> _RawRecord:
        job_id = f[col["job_id"]].strip()
        if not job_id:
            raise _Bad("missing job id")
        gpu_type = f[col["gpu_type"]].strip()
        if gpu_type.upper() == "CPU":
            # Validate the count anyway so garbage is reported as garbage, not as a CPU job.
            _number(f[col["num_gpu"]].strip(), "accelerator count")
            raise _Skip("cpu-only")
        accelerators = _accelerator_count(f[col["num_gpu"]], fractional)
        duration = _duration(f[col["duration"]])
        return _RawRecord(
            job_id=job_id,
            submit_time_s=_submit_offset(f[col["submit_time"]]),
            duration_s=duration,
            accelerators=accelerators,
            user=f[col["user"]].strip(),
            name=f[col["job_name"]].strip(),
            group=f[col["group"]].strip(),
            accelerator_type=gpu_type or None,
            source_line=line,
        )

    return _finish(_each(rows, tally, parse), shift=False)


def _read_philly(stream: TextIO, tally: _Tally, fractional: str) -> list[TraceRecord]:
    header, rows = _csv_rows(stream, tally, "philly")
    col = _require(header, ("timestamp", "duration", "num_gpus"), tally)
    vc_col = header.index("cluster") if "cluster" in header else None

    def parse(line: int, f: list[str], index: int) -> _RawRecord:
        submit = _epoch_s(f[col["timestamp"]])
        accelerators = _accelerator_count(f[col["num_gpus"]], fractional)
        duration = _duration(f[col["duration"]])
        return _RawRecord(
            job_id=str(index),
            submit_time_s=submit,
            duration_s=duration,
            accelerators=accelerators,
            # The virtual cluster is the closest thing Philly has to an account.
            user=f[vc_col].strip() if vc_col is not None else "",
            source_line=line,
        )

    return _finish(_each(rows, tally, parse), shift=True)


_GAVEL_JOB_TYPE = re.compile(r"^\s*(?P<model>.*?)\s*(?:\(\s*batch size\s+(?P<batch>\d+)\s*\))?\s*$")


def _read_gavel(stream: TextIO, tally: _Tally, vc: str) -> list[TraceRecord]:
    raws: list[_RawRecord] = []
    data_index = -1
    for line, raw_line in enumerate(stream, start=1):
        text = raw_line.rstrip("\r\n")
        if not text.strip():
            continue
        data_index += 1
        fields = text.split("\t")
        try:
            if len(fields) == 7:
                # msr traces: job_type, command, num_steps_arg, needs_data_dir, total_steps,
                # arrival_time, scale_factor
                job_type, steps_text, arrival_text, scale_text = fields[0], fields[4], fields[5], fields[6]
            elif len(fields) == 10:
                # physical_cluster traces: job_type, command, working_directory, num_steps_arg,
                # needs_data_dir, total_steps, scale_factor, priority_weight, SLO, arrival_time
                job_type, steps_text, scale_text, arrival_text = fields[0], fields[5], fields[6], fields[9]
            else:
                raise _Bad("wrong number of fields", f"expected 7 or 10 tab-separated, got {len(fields)}")
            match = _GAVEL_JOB_TYPE.match(job_type)
            model = match.group("model") if match else ""
            batch = int(match.group("batch")) if match and match.group("batch") else None
            workload_class = workload_class_name(model)
            if not workload_class:
                raise _Bad("missing job type", excerpt(job_type))
            steps = _number(steps_text.strip(), "total steps")
            if steps < 0:
                raise _Bad("negative total steps", excerpt(steps_text))
            if steps == 0:
                raise _Skip("zero iterations")
            scale = _number(scale_text.strip(), "scale factor")
            if scale != int(scale) or scale < 1:
                raise _Bad("unparseable scale factor", excerpt(scale_text))
            raws.append(_RawRecord(
                job_id=str(data_index),
                submit_time_s=_submit_offset(arrival_text, "arrival time"),
                duration_s=None,
                accelerators=int(scale),
                user=vc,
                name=job_type.strip(),
                workload_class=workload_class,
                iterations=steps,
                batch_size=batch,
                source_line=line,
            ))
        except _Skip as skip:
            tally.skip(skip.reason)
        except _Bad as bad:
            tally.bad(line, bad, text)
    return _finish(raws, shift=False)


def _sia_steps(application: str, batch_size: int) -> float:
    profile = SIA_STEPS_TO_TARGET.get(application)
    if profile is None:
        raise _Bad("unknown application", f"{excerpt(application)}; known: {', '.join(sorted(SIA_STEPS_TO_TARGET))}")
    if batch_size in profile:
        return float(profile[batch_size])
    # Nearest profiled batch size (in log scale); steps scale inversely with the batch.
    nearest = min(profile, key=lambda b: abs(math.log(b / batch_size)))
    return profile[nearest] * nearest / batch_size


def _read_sia(stream: TextIO, tally: _Tally) -> list[TraceRecord]:
    header, rows = _csv_rows(stream, tally, "sia")
    col = _require(header, ("name", "time", "application", "num_replicas", "batch_size"), tally)

    def parse(line: int, f: list[str], index: int) -> _RawRecord:
        job_id = f[col["name"]].strip()
        if not job_id:
            raise _Bad("missing job id")
        application = workload_class_name(f[col["application"]])
        replicas = _accelerator_count(f[col["num_replicas"]], "ceil")
        batch = _number(f[col["batch_size"]].strip(), "batch size")
        if batch < 1 or batch != int(batch):
            raise _Bad("unparseable batch size", excerpt(f[col["batch_size"]]))
        return _RawRecord(
            job_id=job_id,
            submit_time_s=_submit_offset(f[col["time"]]),
            duration_s=None,
            accelerators=replicas,
            name=application,
            workload_class=application,
            iterations=_sia_steps(application, int(batch)),
            batch_size=int(batch),
            source_line=line,
        )

    return _finish(_each(rows, tally, parse), shift=False)


class _SubmitClock:
    """Submit times of a generic file: all numbers (seconds) or all ISO timestamps, per the first."""

    def __init__(self) -> None:
        self.kind: str | None = None

    def __call__(self, text: str) -> float:
        text = text.strip()
        if not text:
            raise _Bad("missing submit time")
        try:
            value, kind = float(text), "seconds"
        except ValueError:
            value, kind = _epoch_s(text), "timestamp"
        if not math.isfinite(value):
            raise _Bad("unparseable submit time", excerpt(text))
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise _Bad("mixed submit time formats", f"{excerpt(text)} is not a {self.kind}")
        return value


def _read_csv(stream: TextIO, tally: _Tally, mapping: dict[str, str], fractional: str) -> list[TraceRecord]:
    header, rows = _csv_rows(stream, tally, "csv")
    wanted = tuple(dict.fromkeys(mapping.values()))
    index = _require(header, wanted, tally)
    col = {key: index[column] for key, column in mapping.items()}
    submit_of = _SubmitClock()

    def text(f: list[str], key: str) -> str:
        return f[col[key]].strip() if key in col else ""

    def parse(line: int, f: list[str], row_index: int) -> _RawRecord:
        gpu_type = text(f, "gpu_type")
        if gpu_type.lower() == "cpu":
            raise _Skip("cpu-only")
        accelerators = _accelerator_count(text(f, "gpus"), fractional)
        duration = _duration(text(f, "duration"))
        submit = submit_of(text(f, "submit"))
        job_id = text(f, "job_id") if "job_id" in col else str(row_index)
        if not job_id:
            raise _Bad("missing job id")
        return _RawRecord(
            job_id=job_id,
            submit_time_s=submit,
            duration_s=duration,
            accelerators=accelerators,
            user=text(f, "user"),
            name=text(f, "name"),
            group=text(f, "group"),
            accelerator_type=gpu_type or None,
            time_limit_s=_time_limit(text(f, "time_limit")) if "time_limit" in col else None,
            source_line=line,
        )

    return _finish(_each(rows, tally, parse), shift=True)


def _tres_accelerators(tres: str) -> tuple[int, str | None]:
    """(count, type) of accelerators in a TRES string such as ``cpu=8,gres/gpu:a100=2,gres/gpu=2``.

    The untyped total wins over the sum of typed entries; the type is known only when exactly one
    typed entry is present. An ``npu`` GRES without a type makes the type "npu", since such a job
    cannot run on GPUs. (count, None) with count 0 for a CPU-only job.
    """
    totals: dict[str, int] = {}
    typed: dict[str, dict[str, int]] = {}
    for item in tres.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not key.startswith("gres/"):
            continue
        name, _, gres_type = key[len("gres/"):].partition(":")
        if name not in _ACCELERATOR_GRES:
            continue
        try:
            count = int(value)
        except ValueError:
            raise _Bad("unparseable TRES", excerpt(item)) from None
        if count < 0:
            raise _Bad("unparseable TRES", excerpt(item))
        if gres_type:
            per_type = typed.setdefault(name, {})
            per_type[gres_type] = per_type.get(gres_type, 0) + count
        else:
            totals[name] = totals.get(name, 0) + count
    count = 0
    kinds: list[str] = []
    for name in _ACCELERATOR_GRES:
        by_type = typed.get(name, {})
        n = totals.get(name, sum(by_type.values()))
        if n:
            count += n
            kinds.extend(by_type or ([name] if name != "gpu" else [""]))
    named = [k for k in kinds if k]
    kind = named[0] if len(named) == 1 and len(kinds) == 1 else None
    return count, kind


def _read_sacct(stream: TextIO, tally: _Tally) -> list[TraceRecord]:
    lines = iter(enumerate(stream, start=1))
    header: list[str] | None = None
    for _, raw in lines:
        if raw.strip():
            header = raw.rstrip("\r\n").split("|")
            break
    if header is None:
        raise TraceFormatError(f"{tally.path}: empty file, expected sacct -P output with a header")
    # `sacct -p` ends every line with the delimiter; `-P` does not.
    trailing = len(header) > 1 and header[-1] == ""
    if trailing:
        header = header[:-1]
    names = {h.strip().lower(): i for i, h in enumerate(header)}
    if "jobid" not in names:
        hint = " (was it run with --noheader?)" if header and re.fullmatch(r"\d+([_.+].*)?", header[0].strip()) else ""
        raise TraceFormatError(f"{tally.path}: not sacct -P output: no JobID column in the header{hint}; "
                               f"{_header_shown(header)}")
    missing = []
    if "submit" not in names:
        missing.append("Submit")
    if not ({"elapsedraw", "elapsed"} & names.keys() or {"start", "end"} <= names.keys()):
        missing.append("ElapsedRaw, Elapsed or Start+End")
    if not {"alloctres", "reqtres"} & names.keys():
        missing.append("AllocTRES or ReqTRES")
    if missing:
        raise TraceFormatError(f"{tally.path}: sacct output lacks {'; '.join(missing)}; "
                               f"run sacct -P -o JobID,User,JobName,Submit,ElapsedRaw,AllocTRES,ReqTRES,Timelimit,State. "
                               f"{_header_shown(header)}")

    def get(fields: list[str], name: str) -> str:
        i = names.get(name)
        return fields[i].strip() if i is not None else ""

    raws: list[_RawRecord] = []
    for line, raw in lines:
        text = raw.rstrip("\r\n")
        if not text.strip():
            continue
        fields = text.split("|")
        if trailing and fields and fields[-1] == "":
            fields = fields[:-1]
        try:
            if len(fields) != len(header):
                raise _Bad("wrong number of fields", f"expected {len(header)}, got {len(fields)}")
            job_id = get(fields, "jobid")
            if not job_id:
                raise _Bad("missing job id")
            if "." in job_id:
                raise _Skip("job step")
            state = get(fields, "state").split(" ")[0].upper()
            if state in _UNFINISHED_STATES:
                raise _Skip("not finished")
            raws.append(_sacct_record(line, fields, get))
        except _Skip as skip:
            tally.skip(skip.reason)
        except _Bad as bad:
            tally.bad(line, bad, text)
    return _finish(raws, shift=True)


def _sacct_record(line: int, fields: list[str], get: Callable[[list[str], str], str]) -> _RawRecord:
    job_id = get(fields, "jobid")
    submit_text = get(fields, "submit")
    if not submit_text or submit_text.lower() in ("unknown", "none"):
        raise _Bad("missing submit time")
    submit = _epoch_s(submit_text)
    tres = get(fields, "alloctres") or get(fields, "reqtres")
    accelerators, kind = _tres_accelerators(tres)
    if accelerators == 0:
        raise _Skip("cpu-only")
    if get(fields, "elapsedraw"):
        duration = _number(get(fields, "elapsedraw"), "elapsed time")
    elif get(fields, "elapsed"):
        try:
            parsed = parse_slurm_duration_s(get(fields, "elapsed"))
        except ValueError:
            raise _Bad("unparseable elapsed time", excerpt(get(fields, "elapsed"))) from None
        if parsed is None:
            raise _Bad("unparseable elapsed time", excerpt(get(fields, "elapsed")))
        duration = parsed
    else:
        start, end = get(fields, "start"), get(fields, "end")
        if start.lower() in ("", "unknown", "none"):
            raise _Skip("never started")
        if end.lower() in ("", "unknown", "none"):
            raise _Skip("not finished")
        duration = _epoch_s(end) - _epoch_s(start)
    if duration < 0:
        raise _Bad("negative duration", f"{duration:g} s")
    if duration == 0:
        raise _Skip("zero duration")
    limit_text = get(fields, "timelimit")
    try:
        limit = parse_slurm_duration_s(limit_text) if limit_text else None
    except ValueError:
        raise _Bad("unparseable time limit", excerpt(limit_text)) from None
    user, name = get(fields, "user"), get(fields, "jobname")
    return _RawRecord(
        job_id=job_id,
        submit_time_s=submit,
        duration_s=duration,
        accelerators=accelerators,
        user=user,
        name=name,
        # Slurm has no recurrence tag; the same user submitting the same job name is the proxy.
        group=f"{user}/{name}" if user or name else "",
        accelerator_type=kind,
        time_limit_s=limit,
        source_line=line,
    )
