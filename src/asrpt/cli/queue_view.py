"""How forecasts look: squeue-style columns, ``--format`` codes and the JSON shape.

Shared by ``asrpt queue/eta/explain`` (reading the database) and the daemon's HTTP endpoint
(serving the last cycle from memory), so both speak the same JSON. Standard library only:
this module is imported on the CLI's start-up path.

``--format`` codes (a subset of squeue's, with squeue's meaning where one exists; width and
justification as in squeue: ``%.10i`` right-justified in 10 columns, ``%-8u`` or ``%8u``
left-justified; a value longer than the width is cut, as squeue does):

======  ==========  ==========================================================================
code    header      value
======  ==========  ==========================================================================
``%i``  JOBID       Slurm job id
``%j``  NAME        job name
``%u``  USER        user name
``%P``  PARTITION   partition it runs in or is predicted to start in (else the ones it allows)
``%t``  ST          compact state: ``R`` or ``PD``
``%T``  STATE       ``RUNNING`` or ``PENDING``
``%S``  START       predicted start (actual start of a running job), local time
``%e``  END         predicted end, local time; ``<=`` the time limit's end when the job's length is unknown
``%L``  TIME_LEFT   predicted time until the end, ``[days-]hours:minutes:seconds`` (``<=`` as for ``%e``)
``%b``  ACCEL       accelerators (all of them: the job is gang-scheduled)
``%Q``  POS         place in asrpt's order of pending jobs (squeue: priority; here 1 = next)
``%r``  REASON      the policy's reason (asrpt's words, not Slurm's reason code)
``%%``              a literal ``%``
======  ==========  ==========================================================================
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Protocol, Sequence

from asrpt.escaping import printable

DEFAULT_FORMAT = "%.10i %.9P %.16j %.8u %.2t %.19S %.19e %.5b"
UNKNOWN = "N/A"


class ForecastLike(Protocol):
    """What a forecast row offers (``ForecastRecord`` and ``StoredForecast`` both do)."""

    slurm_job_id: str
    user: str
    policy: str
    running: bool
    accelerators: int
    predicted_start_s: float | None
    predicted_end_s: float | None
    position: int | None
    held: bool
    job_name: str | None
    partition: str | None
    partitions: tuple[str, ...]
    predicted_iterations: float | None
    expected_iterations: float | None
    virtual_remaining_s: float | None
    virtual_size_s: float | None
    reason: str | None
    #: ``predicted_end_s`` is only the time limit's bound (the job's length is unknown).
    end_unknown: bool


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def iso_utc(t_s: float | None) -> str | None:
    """``2025-06-15T13:20:00Z``; None for an unknown (or infinite) time."""
    value = finite(t_s)
    if value is None:
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def local_time(t_s: float | None) -> str:
    """squeue's look: local time ``2025-06-15T15:20:00``, ``N/A`` when unknown."""
    value = finite(t_s)
    if value is None:
        return UNKNOWN
    return datetime.fromtimestamp(value).strftime("%Y-%m-%dT%H:%M:%S")


def slurm_duration(seconds: float | None) -> str:
    """squeue's time format: ``[days-]hours:minutes:seconds`` (``N/A`` when unknown)."""
    value = finite(seconds)
    if value is None:
        return UNKNOWN
    total = max(int(round(value)), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}" if days or hours else f"{minutes:d}:{secs:02d}"
    return f"{days}-{text}" if days else text


def human_delta(seconds: float, *, future: bool = True) -> str:
    """``in 1 h 12 min`` / ``3 min ago``: the distance between now and a predicted time."""
    magnitude = abs(seconds)
    if magnitude < 60:
        text = f"{magnitude:.0f} s"
    elif magnitude < 3600:
        text = f"{magnitude / 60:.0f} min"
    elif magnitude < 86400:
        hours, minutes = divmod(int(magnitude // 60), 60)
        text = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    else:
        days, hours = divmod(int(magnitude // 3600), 24)
        text = f"{days} d {hours} h" if hours else f"{days} d"
    if future and seconds >= 0:
        return f"in {text}"
    return f"{text} ago"


_EPOCH_IN_REASON = re.compile(r"t=(\d{9,11}(?:\.\d+)?)s")


def readable_reason(reason: str | None) -> str | None:
    """The policy's reason with epoch times (``t=1750000000s``) shown in local time."""
    if reason is None:
        return None
    return _EPOCH_IN_REASON.sub(lambda m: local_time(float(m.group(1))), reason)


def partition_text(row: ForecastLike) -> str:
    if row.partition:
        return row.partition
    return ",".join(row.partitions) if row.partitions else UNKNOWN




# -- JSON --------------------------------------------------------------------------------------


def job_json(row: ForecastLike, *, made_at_s: float | None = None) -> dict[str, Any]:
    """One job as ``asrpt queue --json``, ``asrpt eta --json`` and ``GET /queue`` show it.

    Times come twice: ISO 8601 UTC strings for people and epoch seconds for programs; an
    unknown (never placeable) time is null in both.
    """
    start_s, end_s = finite(row.predicted_start_s), finite(row.predicted_end_s)
    # A bound is not a forecast: a program reading predicted_end must not take it for one.
    latest_end_s, end_s = (end_s, None) if row.end_unknown else (None, end_s)
    out: dict[str, Any] = {
        "job_id": row.slurm_job_id,
        "name": row.job_name,
        "user": row.user,
        "state": "RUNNING" if row.running else "PENDING",
        "held": row.held,
        "position": row.position,
        "partition": row.partition,
        "partitions": list(row.partitions),
        "accelerators": row.accelerators,
        "predicted_start": iso_utc(start_s),
        "predicted_end": iso_utc(end_s),
        "predicted_start_s": start_s,
        "predicted_end_s": end_s,
        "end_unknown": bool(row.end_unknown),
        "latest_end": iso_utc(latest_end_s),
        "latest_end_s": latest_end_s,
        "predicted_iterations": finite(row.predicted_iterations),
        "expected_iterations": finite(row.expected_iterations),
        "virtual_remaining_s": finite(row.virtual_remaining_s),
        "virtual_size_s": finite(row.virtual_size_s),
        "reason": row.reason,
        "policy": row.policy,
    }
    made = getattr(row, "made_at_s", made_at_s)
    out["made_at"] = iso_utc(made)
    if hasattr(row, "current"):
        out["current"] = bool(getattr(row, "current"))
    return out


def queue_json(rows: Sequence[ForecastLike], *, made_at_s: float | None, policy: str | None) -> dict[str, Any]:
    """The whole queue: when the forecast was made, by which policy, and the jobs in order."""
    return {
        "made_at": iso_utc(made_at_s),
        "made_at_s": finite(made_at_s),
        "policy": policy,
        "jobs": [job_json(row, made_at_s=made_at_s) for row in rows],
    }


# -- squeue-style columns -------------------------------------------------------------------------


def at_most(row: ForecastLike, text: str) -> str:
    """An end that is only the time limit's bound reads ``<=`` it (``N/A`` stays ``N/A``)."""
    return f"<={text}" if row.end_unknown and text != "N/A" else text


_Field = Callable[[ForecastLike, float], str]

FORMAT_CODES: dict[str, tuple[str, _Field]] = {
    "i": ("JOBID", lambda r, now: r.slurm_job_id),
    "j": ("NAME", lambda r, now: r.job_name or ""),
    "u": ("USER", lambda r, now: r.user),
    "P": ("PARTITION", lambda r, now: partition_text(r)),
    "t": ("ST", lambda r, now: "R" if r.running else "PD"),
    "T": ("STATE", lambda r, now: "RUNNING" if r.running else "PENDING"),
    "S": ("START", lambda r, now: local_time(r.predicted_start_s)),
    "e": ("END", lambda r, now: at_most(r, local_time(r.predicted_end_s))),
    "L": (
        "TIME_LEFT",
        lambda r, now: at_most(r, slurm_duration(None if finite(r.predicted_end_s) is None else r.predicted_end_s - now)),  # type: ignore[operator]
    ),
    "b": ("ACCEL", lambda r, now: str(r.accelerators)),
    "Q": ("POS", lambda r, now: "" if r.position is None else str(r.position)),
    "r": ("REASON", lambda r, now: readable_reason(r.reason) or ("running" if r.running else "")),
}

_SPEC = re.compile(r"%(?P<dot>\.)?(?P<left>-)?(?P<width>\d+)?(?P<code>[A-Za-z%])")


class FormatError(ValueError):
    """A ``--format`` string with a code asrpt does not know."""


#: (literal text, None) or (code, (right_justified, width or None)).
_Piece = tuple[str, "tuple[bool, int | None] | None"]


def parse_format(fmt: str) -> list[_Piece]:
    """Split a squeue-style format into literal text and fields; unknown codes raise."""
    pieces: list[_Piece] = []
    at = 0
    for match in _SPEC.finditer(fmt):
        if match.start() > at:
            pieces.append((fmt[at : match.start()], None))
        code = match.group("code")
        if code == "%":
            pieces.append(("%", None))
        elif code not in FORMAT_CODES:
            known = " ".join(f"%{c}" for c in FORMAT_CODES)
            raise FormatError(f"unknown format code %{code} in {fmt!r}; known: {known} %%")
        else:
            width = int(match.group("width")) if match.group("width") else None
            pieces.append((code, (bool(match.group("dot")), width)))
        at = match.end()
    if at < len(fmt):
        pieces.append((fmt[at:], None))
    if "%" in "".join(text for text, spec in pieces if spec is None and text != "%"):
        raise FormatError(f"incomplete format code in {fmt!r}")
    return pieces


def _fit(text: str, spec: tuple[bool, int | None]) -> str:
    right, width = spec
    if width is None:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def render_table(rows: Iterable[ForecastLike], fmt: str, now_s: float, *, header: bool = True) -> list[str]:
    """Lines of an squeue-style listing (trailing blanks stripped, like squeue's); values are
    shown :func:`printable` (widths count the escapes)."""
    pieces = parse_format(fmt)
    lines: list[str] = []
    if header:
        lines.append(
            "".join(
                text if spec is None else _fit(FORMAT_CODES[text][0], spec) for text, spec in pieces
            ).rstrip()
        )
    for row in rows:
        lines.append(
            "".join(
                text if spec is None else _fit(printable(FORMAT_CODES[text][1](row, now_s)), spec) for text, spec in pieces
            ).rstrip()
        )
    return lines
