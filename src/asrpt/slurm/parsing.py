"""Pure parsers for what Slurm prints, for Slurm 22.05 and 24.11 alike.

Every parser raises :class:`~asrpt.exceptions.SlurmOutputMalformed` with the offending text
when its input is not what Slurm prints; none returns a partial result for bad input.

The version differences handled here (verified on Debian 12's 22.05.8; 24.11 from its
data_parser v0.0.42 schema, see ``tests/unit/slurm/fixtures/README.md``):

* numbers: 22.05 prints plain ints (``null`` when unset); 24.11 prints
  ``{"set": bool, "infinite": bool, "number": n}`` (:func:`json_number`);
* states: ``"PENDING"`` vs ``["PENDING", "REQUEUED"]`` (:func:`json_state`);
* GRES requests: ``gres:gpu:a100:3`` vs ``gres/gpu:a100:3`` (:func:`parse_gres`);
* exit codes: a raw wait status (768 = exit 3) vs ``{"return_code": ..., "signal": ...}``;
* ``squeue --json`` lists finished jobs in 22.05 (the caller filters by state);
* nodes: 22.05's ``sinfo --json`` and 24.11's ``scontrol show node --json`` both have
  ``nodes[]`` with ``gres``/``gres_used``; 22.05's state is ``"mixed"`` plus
  ``state_flags``, 24.11's is ``["MIXED", "DRAIN"]``;
* a poll that could not reach slurmctld: 22.05's ``squeue --json`` and ``sinfo --json``
  exit 0 after about 9 s with an ``errors`` list and no jobs/nodes. The JSON parsers raise
  :class:`~asrpt.exceptions.SlurmUnreachable` for any answer with errors, so an empty list
  is never mistaken for an empty queue.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from asrpt.exceptions import SlurmOutputMalformed, SlurmUnreachable
from asrpt.slurm.records import FinishedJob, GresItem, SlurmJob, SlurmNode

__all__ = [
    "malformed",
    "parse_version",
    "parse_job_id",
    "parse_job_ids",
    "expand_nodelist",
    "compress_nodelist",
    "parse_gres",
    "parse_tres",
    "parse_duration_s",
    "parse_timestamp_s",
    "json_number",
    "json_state",
    "json_errors",
    "json_version",
    "parse_exit_code",
    "load_json",
    "parse_squeue_json",
    "parse_array_tasks",
    "MAX_ARRAY_TASKS",
    "parse_nodes_json",
    "parse_jobcomp_line",
    "parse_jobcomp_lines",
    "RejectedJobcomp",
    "iter_jobcomp",
    "SACCT_FIELDS",
    "parse_sacct",
    "failed_job_ids",
]

_EVIDENCE_CHARS = 400


def malformed(what: str, raw: object, detail: str = "") -> SlurmOutputMalformed:
    """The error for unparseable ``raw``: says what was being parsed and shows the text."""
    text = raw if isinstance(raw, str) else repr(raw)
    if len(text) > _EVIDENCE_CHARS:
        text = text[:_EVIDENCE_CHARS] + f"... ({len(text)} chars)"
    suffix = f": {detail}" if detail else ""
    return SlurmOutputMalformed(f"cannot parse {what}{suffix}; got {text!r}")


# -- small values -------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` (``scontrol --version``) -> (22, 5, 8)."""
    match = _VERSION_RE.search(text or "")
    if not match:
        raise malformed("Slurm version", text)
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


_JOB_ID_RE = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-%]+\]))?(?:\+\d+)?$")


def parse_job_id(text: str) -> str:
    """One job id as sbatch/squeue print it: ``42``, ``42;cluster`` (federation), ``42_7``."""
    value = (text or "").strip().split(";", 1)[0].strip()
    if not _JOB_ID_RE.match(value):
        raise malformed("job id", text)
    return value


#: Sorts ids that do not start with a Slurm job number after every id that does.
_AFTER_EVERY_JOB_ID = 2**63


def job_id_order_key(job_id: str) -> tuple[int, int, str]:
    """The one order of job ids: by job number, an array's tasks by task number after the
    array itself (``42`` < ``42_2`` < ``42_10`` < ``43``, a het job's ``42+1`` with ``42``),
    and ids that are not Slurm's (no leading number) after all of Slurm's, by their text."""
    head, _, task = job_id.split("+", 1)[0].partition("_")
    if not head.isdigit():
        return (_AFTER_EVERY_JOB_ID, 0, job_id)
    return (int(head), int(task) if task.isdigit() else -1, job_id)


def parse_job_ids(text: str) -> tuple[str, ...]:
    """Job ids separated by newlines, spaces or commas (``squeue -h -o %i``); empty -> ()."""
    return tuple(parse_job_id(token) for token in re.split(r"[\s,]+", text or "") if token)


_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")


def expand_nodelist(expr: str) -> tuple[str, ...]:
    """Slurm host list -> node names: ``node[1-3,5],gpu-a[01-02]`` -> node1, node2, node3,
    node5, gpu-a01, gpu-a02. Zero padding is kept; several bracket groups
    (``rack[1-2]-n[1-2]``) expand as a product. ``""``, ``(null)`` and ``None`` give ()."""
    text = (expr or "").strip()
    if text in ("", "(null)", "None", "N/A"):
        return ()
    names: list[str] = []
    for item in _split_top_level(text, expr):
        names.extend(_expand_item(item, expr))
    return tuple(names)


def _split_top_level(text: str, raw: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise malformed("node list", raw, "nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise malformed("node list", raw, "unbalanced ']'")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise malformed("node list", raw, "unbalanced '['")
    items.append(text[start:])
    if any(not item.strip() for item in items):
        raise malformed("node list", raw, "empty item")
    return [item.strip() for item in items]


def _expand_item(item: str, raw: str) -> list[str]:
    match = _BRACKET_RE.search(item)
    if not match:
        if re.search(r"[\[\]\s]", item):
            raise malformed("node list", raw)
        return [item]
    prefix, suffix = item[: match.start()], item[match.end():]
    out: list[str] = []
    for part in match.group(1).split(","):
        bounds = part.split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            numbers = [bounds[0]]
        elif len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit() and int(bounds[0]) <= int(bounds[1]):
            width = len(bounds[0])
            numbers = [str(n).zfill(width) for n in range(int(bounds[0]), int(bounds[1]) + 1)]
        else:
            raise malformed("node list", raw, f"bad range {part!r}")
        for number in numbers:
            out.extend(_expand_item(prefix + number + suffix, raw))
    return out


_TRAILING_NUMBER_RE = re.compile(r"^(.*?)(\d+)$")


def compress_nodelist(names: Iterable[str]) -> str:
    """The inverse of :func:`expand_nodelist` for simple names: node1, node2, node4 ->
    ``node[1-2,4]``. Order and duplicates do not matter; names without a trailing number stay
    as they are. The result is sorted, so the same set always gives the same text."""
    numbered: list[tuple[str, str]] = []
    plain: set[str] = set()
    for name in set(names):
        match = _TRAILING_NUMBER_RE.match(name)
        if match:
            numbered.append((match.group(1), match.group(2)))
        else:
            plain.add(name)
    # Zero-padded numbers fix a width (n08); unpadded ones (n10) join a width they fill.
    padded: dict[str, set[int]] = {}
    for prefix, digits in numbered:
        if digits.startswith("0") and len(digits) > 1:
            padded.setdefault(prefix, set()).add(len(digits))
    groups: dict[tuple[str, int], set[int]] = {}
    for prefix, digits in numbered:
        if digits.startswith("0") and len(digits) > 1:
            width = len(digits)
        else:
            width = max((w for w in padded.get(prefix, ()) if w <= len(digits)), default=0)
        groups.setdefault((prefix, width), set()).add(int(digits))
    parts: list[str] = sorted(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        ordered = sorted(numbers)
        if len(ordered) == 1:
            parts.append(f"{prefix}{str(ordered[0]).zfill(width)}")
            continue
        ranges: list[str] = []
        start = prev = ordered[0]
        for n in ordered[1:] + [None]:  # type: ignore[list-item]
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


_GRES_ITEM_RE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.\-]*)"
    r"(?::(?P<type>[\w.\-]*[A-Za-z_.\-][\w.\-]*))?"  # a type is not all digits
    r"(?::(?P<count>\d+)(?P<unit>[KMGTP])?)?"
    r"(?:\((?P<detail>[^()]*)\))?$"
)
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def parse_gres(text: str | None) -> tuple[GresItem, ...]:
    """GRES as squeue/sinfo/scontrol print them, in either version:

    ``gpu:a100:8``, ``gpu:a100:8(IDX:0-7),npu:0`` (used), ``gpu:a100:8(S:0-1)`` (sockets),
    ``npu(CNT:4)`` and ``npu:4`` (untyped), ``gres:gpu:a100:3`` (22.05 request),
    ``gres/gpu:a100:3`` (24.11 request), ``gres/gpu=1`` and ``gres/gpu:a100=2`` (24.11's TRES
    form, e.g. for ``--gpus-per-task``), ``gpu`` (count 1). ``""``, ``(null)`` and ``N/A``
    give ().
    """
    raw = text
    value = (text or "").strip()
    if value in ("", "(null)", "N/A", "None"):
        return ()
    items: list[GresItem] = []
    for token in _split_gres(value, raw):
        if token.startswith(("gres:", "gres/")):
            token = token[5:]
        if "=" in token and "(" not in token:
            name_type, _, count_text = token.partition("=")
            token = f"{name_type}:{count_text}"
        match = _GRES_ITEM_RE.match(token)
        if not match:
            raise malformed("GRES", raw, f"bad item {token!r}")
        count_text = match.group("count")
        detail = match.group("detail") or ""
        if count_text is not None:
            count = int(count_text) * _UNITS.get(match.group("unit") or "", 1)
        elif detail.startswith("CNT:") and detail[4:].isdigit():
            count = int(detail[4:])
        else:
            count = 1
        items.append(GresItem(match.group("name"), match.group("type") or None, count))
    return tuple(items)


def _split_gres(value: str, raw: str | None) -> list[str]:
    tokens, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise malformed("GRES", raw, "unbalanced ')'")
        elif ch == "," and depth == 0:
            tokens.append(value[start:i].strip())
            start = i + 1
    if depth != 0:
        raise malformed("GRES", raw, "unbalanced '('")
    tokens.append(value[start:].strip())
    if any(not t for t in tokens):
        raise malformed("GRES", raw, "empty item")
    return tokens


def parse_tres(text: str | None) -> dict[str, str]:
    """``cpu=2,mem=125G,node=2,billing=2,gres/gpu:a100=2`` -> {"cpu": "2", ..., "gres/gpu:a100": "2"}."""
    value = (text or "").strip()
    if value in ("", "(null)", "N/A"):
        return {}
    out: dict[str, str] = {}
    for token in value.split(","):
        key, sep, val = token.partition("=")
        if not sep or not key.strip():
            raise malformed("TRES", text, f"bad item {token!r}")
        out[key.strip()] = val.strip()
    return out


_NO_LIMIT = {"UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NOT_SET", "NONE", "N/A", ""}


def parse_duration_s(text: str | None) -> float | None:
    """A Slurm time string in seconds; None for no limit.

    Accepts ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (a bare
    number is minutes, as in ``--time`` and the job completion log's TimeLimit) and the
    no-limit words ``UNLIMITED``, ``INFINITE``, ``Partition_Limit``, ``NOT_SET``.
    """
    value = (text or "").strip()
    if value.upper() in _NO_LIMIT:
        return None
    days = 0
    rest = value
    if "-" in value:
        day_text, _, rest = value.partition("-")
        if not day_text.isdigit() or not rest:
            raise malformed("time", text)
        days = int(day_text)
        parts = rest.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise malformed("time", text)
        hours, minutes, seconds = (int(p) for p in (parts + ["0", "0"])[:3])
        return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise malformed("time", text)
    numbers = [int(p) for p in parts]
    if len(numbers) == 1:
        return float(numbers[0] * 60)
    if len(numbers) == 2:
        return float(numbers[0] * 60 + numbers[1])
    return float((numbers[0] * 60 + numbers[1]) * 60 + numbers[2])


_NO_TIME = {"", "UNKNOWN", "NONE", "N/A", "(NULL)", "0"}


def parse_timestamp_s(text: str | int | float | None) -> float | None:
    """Seconds since the epoch; None for Slurm's "no time" values.

    ISO times without zone (``2026-12-02T11:32:03``, what squeue/sacct/jobcomp print) are
    local time of this process, which must share slurmctld's time zone. Numbers are epoch
    seconds already. ``Unknown``, ``None``, ``N/A`` and 0 mean not set.
    """
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if text > 0 else None
    value = str(text).strip()
    if value.upper() in _NO_TIME:
        return None
    if value.isdigit():
        return float(value) if int(value) > 0 else None
    try:
        return float(time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        raise malformed("timestamp", text) from None


# -- JSON -------------------------------------------------------------------------------------


def json_number(value: Any, what: str = "number") -> float | None:
    """A number in either version's JSON; None when unset (``null``, ``{"set": false}``)
    and ``math.inf`` for Slurm's INFINITE (``{"infinite": true}``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise malformed(what, value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return math.inf
        if value.get("set") is False:
            return None
        number = value.get("number")
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return number
        if number is None:
            return None
    raise malformed(what, value)


def _int_or_none(value: Any, what: str) -> int | None:
    number = json_number(value, what)
    if number is None or number == math.inf:
        return None
    return int(number)


def json_state(value: Any, what: str = "state") -> tuple[str, tuple[str, ...]]:
    """(base state, flags) from ``"PENDING"`` (22.05) or ``["PENDING", "REQUEUED"]`` (24.11);
    upper case. 22.05 node states come as ``"mixed"`` with flags in a separate field."""
    if isinstance(value, str) and value.strip():
        parts = [p for p in re.split(r"[+\s]", value.strip().upper()) if p]
        return parts[0], tuple(parts[1:])
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        upper = [v.upper() for v in value]
        return upper[0], tuple(upper[1:])
    raise malformed(what, value)


def json_errors(doc: Mapping[str, Any]) -> list[str]:
    """The ``errors`` of a JSON answer as readable strings (empty when there are none)."""
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        return [repr(errors)]
    out = []
    for err in errors:
        if isinstance(err, Mapping):
            bits = [str(err.get(k)) for k in ("source", "description", "error") if err.get(k)]
            out.append(": ".join(bits) or repr(dict(err)))
        else:
            out.append(str(err))
    return out


def json_version(doc: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """Slurm's version from a JSON answer's ``meta`` (``meta.Slurm`` in 22.05, ``meta.slurm``
    with string numbers in 24.11); None when absent."""
    meta = doc.get("meta")
    if not isinstance(meta, Mapping):
        return None
    for key in ("slurm", "Slurm"):
        block = meta.get(key)
        if isinstance(block, Mapping):
            version = block.get("version")
            if isinstance(version, Mapping):
                try:
                    return (int(version.get("major")), int(version.get("minor")), int(version.get("micro") or 0))  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    pass
            release = block.get("release")
            if isinstance(release, str) and _VERSION_RE.search(release):
                return parse_version(release)
    return None


def parse_exit_code(value: Any) -> tuple[int | None, int]:
    """(exit status, signal) from 22.05's raw wait status (768 = exit 3, 15 = SIGTERM),
    24.11's ``{"return_code": {"number": 3}, "signal": {"id": {"number": 15}}}`` or the text
    form ``3:0`` (jobcomp, sacct)."""
    if value is None:
        return None, 0
    if isinstance(value, bool):
        raise malformed("exit code", value)
    if isinstance(value, int):
        if value < 0:
            raise malformed("exit code", value)
        return (value >> 8) & 0xFF, value & 0x7F
    if isinstance(value, str):
        text = value.strip()
        match = re.fullmatch(r"(\d+)(?::(\d+))?", text)
        if not match:
            raise malformed("exit code", value)
        return int(match.group(1)), int(match.group(2) or 0)
    if isinstance(value, Mapping):
        rc = _int_or_none(value.get("return_code"), "exit code")
        signal_block = value.get("signal")
        sig = 0
        if isinstance(signal_block, Mapping):
            sig = _int_or_none(signal_block.get("id"), "exit signal") or 0
        elif signal_block is not None:
            sig = _int_or_none(signal_block, "exit signal") or 0
        return rc, sig
    raise malformed("exit code", value)


def load_json(text: str, what: str) -> Mapping[str, Any]:
    """Parse a JSON object; garbage, truncation or a non-object is malformed."""
    if not text or not text.strip():
        raise malformed(what, text, "empty output")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise malformed(what, text, f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise malformed(what, text, "not a JSON object")
    return doc


def _str(job: Mapping[str, Any], key: str) -> str:
    value = job.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise malformed(f"field {key!r}", value)


def _raise_for_errors(doc: Mapping[str, Any], what: str) -> None:
    errors = json_errors(doc)
    if errors:
        raise SlurmUnreachable(f"{what} reports errors (jobs and nodes unknown): {'; '.join(errors)[:400]}")


def parse_squeue_json(text: str) -> tuple[tuple[int, int, int] | None, tuple[SlurmJob, ...]]:
    """(Slurm version, jobs) from ``squeue --json`` of 22.05 or 24.11.

    Raises :class:`SlurmOutputMalformed` for output that is not a squeue answer, and
    :class:`SlurmUnreachable` for an answer with ``errors`` (22.05 exits 0 with
    "slurm_load_jobs: Failed while looking for jobs" and no jobs when slurmctld is down).
    """
    doc = load_json(text, "squeue --json output")
    _raise_for_errors(doc, "squeue --json")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise malformed("squeue --json output", text, "no 'jobs' list")
    out: list[SlurmJob] = []
    for raw in jobs:
        if not isinstance(raw, Mapping):
            raise malformed("squeue --json job", raw)
        try:
            out.extend(_array_tasks(raw, _job_from_json(raw)))
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed("squeue --json job", raw, str(exc)) from None
    return json_version(doc), tuple(out)


#: Most tasks listed from one pending array record. Slurm's MaxArraySize (1001 by default)
#: bounds a real array; the cap only keeps a forged or absurd range from costing a cycle.
#: Tasks beyond it stay with Slurm, which starts an array's tasks in task order.
MAX_ARRAY_TASKS = 10_000

_ARRAY_PART_RE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_array_tasks(text: str, limit: int = MAX_ARRAY_TASKS) -> tuple[int, ...]:
    """The task ids of squeue's ``array_task_string``: ``2-9``, ``2,4``, ``0-99:3`` (a step),
    ``1-9%2`` (a throttle, which does not change the ids); at most ``limit`` of them."""
    value = (text or "").strip().split("%", 1)[0]
    tasks: list[int] = []
    for part in value.split(","):
        match = _ARRAY_PART_RE.match(part.strip())
        if not match:
            raise malformed("array task list", text, f"bad item {part!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1:
            raise malformed("array task list", text, f"bad range {part!r}")
        tasks.extend(range(first, min(last, first + step * (limit - len(tasks) - 1)) + 1, step))
        if len(tasks) >= limit:
            return tuple(tasks[:limit])
    return tuple(tasks)


def _array_tasks(raw: Mapping[str, Any], job: SlurmJob) -> list[SlurmJob]:
    """A job array's record as one job per task, each named ``<array>_<task>``.

    squeue lists a task Slurm has split off (started, or updated on its own) as a record with
    its own ``job_id`` and ``array_task_id``, and every task still pending together as one
    record whose ``array_task_string`` is the range (``2-9``). Each task is its own work: it
    is predicted, ordered and forecast as a job, and written to as ``<array>_<task>``, an id
    scontrol accepts for both kinds of record."""
    array_id = _int_or_none(raw.get("array_job_id"), "array_job_id")
    if not array_id:
        return [job]
    task_id = _int_or_none(raw.get("array_task_id"), "array_task_id")
    if task_id is not None:
        return [replace(job, job_id=f"{array_id}_{task_id}", array_job_id=str(array_id), array_task_id=task_id)]
    task_text = _str(raw, "array_task_string")
    if not task_text:
        return [job]
    return [replace(job, job_id=f"{array_id}_{task}", array_job_id=str(array_id), array_task_id=task)
            for task in parse_array_tasks(task_text)]


def _job_from_json(job: Mapping[str, Any]) -> SlurmJob:
    job_id = job.get("job_id")
    if isinstance(job_id, Mapping):
        job_id = json_number(job_id, "job_id")
    if not isinstance(job_id, (int, float)) or isinstance(job_id, bool) or job_id <= 0:
        raise malformed("job_id", job.get("job_id"))
    state, flags = json_state(job.get("job_state"), "job_state")
    nodes = expand_nodelist(_str(job, "nodes"))
    gres_detail = job.get("gres_detail") or []
    if not isinstance(gres_detail, list):
        raise malformed("gres_detail", gres_detail)
    allocated = tuple(parse_gres(str(item)) for item in gres_detail)
    limit_min = json_number(job.get("time_limit"), "time_limit")
    submit = json_number(job.get("submit_time"), "submit_time")
    start = json_number(job.get("start_time"), "start_time")
    node_count = _int_or_none(job.get("node_count"), "node_count")
    tasks = _int_or_none(job.get("tasks"), "tasks")
    partitions = tuple(p for p in _str(job, "partition").split(",") if p)
    return SlurmJob(
        job_id=str(int(job_id)),
        state=state,
        state_flags=flags,
        reason=_str(job, "state_reason"),
        user=_str(job, "user_name"),
        name=_str(job, "name"),
        partitions=partitions,
        submit_time_s=float(submit or 0.0),
        # A pending job's start_time is 0 (22.05) or the backfill estimate (24.11): not a start.
        start_time_s=float(start) if start and state != "PENDING" else None,
        time_limit_s=None if limit_min is None or limit_min == math.inf else float(limit_min) * 60.0,
        priority=_int_or_none(job.get("priority"), "priority"),
        node_count=max(1, node_count or 1),
        tasks=max(1, tasks or 1),
        nodes=nodes,
        required_nodes=expand_nodelist(_str(job, "required_nodes")),
        gres_per_node=parse_gres(_str(job, "tres_per_node")),
        gres_per_job=parse_gres(_str(job, "tres_per_job")),
        gres_per_task=parse_gres(_str(job, "tres_per_task")),
        gres_allocated=allocated if len(allocated) == len(nodes) else (),
        comment=_str(job, "comment"),
        admin_comment=_str(job, "admin_comment"),
        requeue=job.get("requeue") is True,
    )


def parse_nodes_json(text: str) -> tuple[SlurmNode, ...]:
    """Nodes from 22.05's ``sinfo --json`` or 24.11's ``scontrol show node --json``
    (both have a top-level ``nodes`` list with ``gres`` and ``gres_used`` strings)."""
    doc = load_json(text, "node --json output")
    _raise_for_errors(doc, "node query")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise malformed("node --json output", text, "no 'nodes' list")
    out = []
    for raw in nodes:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise malformed("node --json node", raw)
        state, flags = json_state(raw.get("state"), "node state")
        extra_flags = raw.get("state_flags") or []
        if not isinstance(extra_flags, list):
            raise malformed("node state_flags", extra_flags)
        partitions = raw.get("partitions") or []
        if isinstance(partitions, str):
            partitions = [p for p in partitions.split(",") if p]
        if not isinstance(partitions, list) or not all(isinstance(p, str) for p in partitions):
            raise malformed("node partitions", partitions)
        out.append(SlurmNode(
            name=raw["name"],
            state=state,
            state_flags=flags + tuple(str(f).upper() for f in extra_flags),
            partitions=tuple(partitions),
            gres=parse_gres(_str(raw, "gres")),
            gres_used=parse_gres(_str(raw, "gres_used")),
            reason=_str(raw, "reason"),
        ))
    return tuple(out)


# -- job completion log (jobcomp/filetxt) ----------------------------------------------------------

# Exactly what jobcomp/filetxt writes (JOB_FORMAT in jobcomp_filetxt.c, the same in 22.05 and
# 24.11), one write per job:
#   JobId=%lu UserId=%s(%lu) GroupId=%s(%lu) Name=%s JobState=%s Partition=%s TimeLimit=%s
#   StartTime=%s EndTime=%s NodeList=%s NodeCnt=%u ProcCnt=%u WorkDir=%s ReservationName=%s
#   Tres=%s Account=%s QOS=%s WcKey=%s Cluster=%s SubmitTime=%s EligibleTime=%s
#   [ ArrayJobId=%u ArrayTaskId=%u][ HetJobId=%u HetJobOffset=%u] DerivedExitCode=%s ExitCode=%s \n
# Name and WorkDir are the user's free text, unescaped: spaces, "key=" runs and newlines included.
# Every other field is Slurm's and has no whitespace, so it is matched by its fixed place and
# shape around the two free fields, never searched for.
_JOBCOMP_HEAD = (r"JobId=(?P<job_id>\d+) UserId=(?P<user>[^\s()]*)\((?P<uid>\d+)\) "
                 r"GroupId=(?P<group>[^\s()]*)\((?P<gid>\d+)\) Name=")  # fmt: skip
_JOBCOMP_MIDDLE = (r" JobState=(?P<state>[A-Z_]+) Partition=(?P<partition>\S*) TimeLimit=(?P<time_limit>\d+|UNLIMITED)"
                   r" StartTime=(?P<start>\S+) EndTime=(?P<end>\S+) NodeList=(?P<nodelist>\S*)"
                   r" NodeCnt=\d+ ProcCnt=\d+ WorkDir=")  # fmt: skip
_JOBCOMP_TAIL = (r" ReservationName=\S* Tres=\S* Account=\S* QOS=\S* WcKey=\S* Cluster=\S*"
                 r" SubmitTime=(?P<submit>\S+) EligibleTime=\S+"
                 r"(?: ArrayJobId=(?P<array_job>\d+) ArrayTaskId=(?P<array_task>\d+))?(?: HetJobId=\d+ HetJobOffset=\d+)?"
                 r" DerivedExitCode=\d+:\d+ ExitCode=(?P<exit>\d+:\d+) \Z")  # fmt: skip
_JOBCOMP_HEAD_RE = re.compile(_JOBCOMP_HEAD)
# The shortest and the longest reading of the free fields: a line is taken only when they agree.
_JOBCOMP_SHORT_RE = re.compile(_JOBCOMP_HEAD + "(?P<name>.*?)" + _JOBCOMP_MIDDLE + "(?P<work_dir>.*?)" + _JOBCOMP_TAIL, re.S)
_JOBCOMP_LONG_RE = re.compile(_JOBCOMP_HEAD + "(?P<name>.*)" + _JOBCOMP_MIDDLE + "(?P<work_dir>.*)" + _JOBCOMP_TAIL, re.S)
#: A record spanning more lines or characters than this (a job name is at most 1024 characters
#: here in practice, a work dir a path) is not waited for: its first line is rejected.
MAX_JOBCOMP_RECORD_LINES = 64
MAX_JOBCOMP_RECORD_CHARS = 65536


def parse_jobcomp_line(line: str) -> FinishedJob:
    """One record of ``jobcomp/filetxt``'s log (same format in 22.05 and 24.11)::

        JobId=220 UserId=root(0) GroupId=root(0) Name=my job JobState=FAILED Partition=gpu
        TimeLimit=525600 StartTime=2026-12-02T11:32:03 EndTime=... NodeList=node1 NodeCnt=1
        ... SubmitTime=... EligibleTime=... DerivedExitCode=0:0 ExitCode=3:0 \\n

    The whole record must have Slurm's exact shape (the trailing space included); Name and
    WorkDir may hold anything, newlines too, as long as only one reading of the fixed fields
    around them exists: a name or work dir that repeats them in a way that moves them is
    ambiguous and raises, like any other mismatch. TimeLimit is in minutes or ``UNLIMITED``.
    """
    text = line[:-1] if line.endswith("\n") else line
    short = _JOBCOMP_SHORT_RE.match(text)
    if not short:
        raise malformed("job completion log line", line, "not the shape jobcomp/filetxt writes")
    long = _JOBCOMP_LONG_RE.match(text)
    if long is None or long.span("name") != short.span("name") or long.span("work_dir") != short.span("work_dir"):
        raise malformed("job completion log line", line, "ambiguous: the job name or work dir repeats the fields after it")
    end = parse_timestamp_s(short["end"])
    if end is None:
        raise malformed("job completion log line", line, "no EndTime")
    start = parse_timestamp_s(short["start"])
    nodes = expand_nodelist(short["nodelist"])
    rc, sig = parse_exit_code(short["exit"])
    # An array task is known as <array>_<task> everywhere else (squeue, sacct, asrpt's history).
    job_id = f"{short['array_job']}_{short['array_task']}" if short["array_job"] else short["job_id"]
    return FinishedJob(
        job_id=parse_job_id(job_id),
        user=short["user"],
        state=short["state"],
        end_time_s=end,
        # A job cancelled while pending has StartTime == EndTime and no nodes.
        start_time_s=start if nodes else None,
        submit_time_s=parse_timestamp_s(short["submit"]),
        nodes=nodes,
        exit_code=rc,
        signal=sig,
        name=short["name"],
        partition=short["partition"],
        time_limit_s=parse_duration_s(short["time_limit"]),
        source="jobcomp",
    )


@dataclass(frozen=True)
class RejectedJobcomp:
    """Lines of the job completion log that were not used: ``line_count`` lines from index
    ``first_line`` of the lines given, ``text`` (joined by newlines) and why."""

    first_line: int
    line_count: int
    reason: str
    text: str


def _parses(text: str) -> bool:
    try:
        parse_jobcomp_line(text)
    except SlurmOutputMalformed:
        return False
    return True


def parse_jobcomp_lines(lines: Sequence[str], *, at_end: bool) -> tuple[list[FinishedJob], list[RejectedJobcomp], int]:
    """Records of consecutive job completion log lines (without their newlines).

    A line that is a whole record is one. A newline in a job name or work dir splits a record:
    a line that starts like a record but is not whole is joined with the lines after it until
    they complete it. If one of those lines is a whole record by itself, the lines could be one
    record or a forgery (``-J $'x\\nJobId=<another job> ...'`` makes bob's record end in a line
    that reads as another job's): neither reading is trusted and all of them are rejected.
    Other lines that do not parse are rejected one by one.

    Returns (records, rejected, consumed): ``consumed`` lines were dealt with; the rest start a
    record that is not complete yet (only when not ``at_end``) and are for the next call.

    Not caught here: a name whose first line is itself a whole record (all fixed fields forged
    inside the name) reads as two whole records; telling that apart needs what squeue says of
    the named job.
    """
    records: list[FinishedJob] = []
    rejected: list[RejectedJobcomp] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        try:
            records.append(parse_jobcomp_line(line))
            i += 1
            continue
        except SlurmOutputMalformed as exc:
            alone = str(exc)
        if not _JOBCOMP_HEAD_RE.match(line):
            rejected.append(RejectedJobcomp(i, 1, alone, line))
            i += 1
            continue
        j, size, record, reason = i + 1, len(line), None, None
        while j < n and record is None and reason is None:
            size += len(lines[j]) + 1
            if size > MAX_JOBCOMP_RECORD_CHARS or j - i >= MAX_JOBCOMP_RECORD_LINES:
                reason = "too long"
            elif _parses(lines[j]):
                reason = (f"ambiguous: these {j - i + 1} lines read as one record whose job name or work dir "
                          "holds a newline, and the last one also as a record by itself; neither is trusted")  # fmt: skip
            else:
                try:
                    record = parse_jobcomp_line("\n".join(lines[i : j + 1]))
                except SlurmOutputMalformed:
                    j += 1
        if record is not None:
            records.append(record)
            i = j + 1
        elif reason is not None and reason != "too long":
            rejected.append(RejectedJobcomp(i, j - i + 1, reason, "\n".join(lines[i : j + 1])))
            i = j + 1
        elif reason is None and not at_end:
            return records, rejected, i  # the rest of this record is still being written
        else:  # too long, or cut short at the end: only its first line goes
            rejected.append(RejectedJobcomp(i, 1, alone, line))
            i += 1
    return records, rejected, n


def iter_jobcomp(text: str) -> Iterator[FinishedJob]:
    """Every record of a complete job completion log; raises SlurmOutputMalformed on the first
    lines that are not used (see :func:`parse_jobcomp_lines`)."""
    records, rejected, _ = parse_jobcomp_lines(text.splitlines(), at_end=True)
    if rejected:
        raise malformed("job completion log line", rejected[0].text, rejected[0].reason)
    yield from records


# -- sacct ------------------------------------------------------------------------------------------

#: Fields asked of ``sacct -P``; JobName last, because it may contain the delimiter.
SACCT_FIELDS = ("JobIDRaw", "User", "Partition", "State", "Submit", "Start", "End", "NodeList", "ExitCode", "Timelimit", "JobName")


def parse_sacct(text: str) -> tuple[FinishedJob, ...]:
    """Finished jobs from ``sacct -X -n -P -o <SACCT_FIELDS>``; jobs still pending or
    running are left out. ``CANCELLED by 0`` becomes CANCELLED."""
    out = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS):
            raise malformed("sacct line", line, f"{len(parts)} fields, expected {len(SACCT_FIELDS)}")
        head = parts[: len(SACCT_FIELDS) - 1]
        name = "|".join(parts[len(SACCT_FIELDS) - 1:])
        job_id, user, partition, state, submit, start, end, nodelist, exit_code, limit = head
        base = state.split()[0].upper() if state.strip() else ""
        if not base:
            raise malformed("sacct line", line, "no State")
        end_s = parse_timestamp_s(end)
        if base in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "RESIZING") or end_s is None:
            continue
        nodes = expand_nodelist("" if nodelist.strip() in ("None assigned", "") else nodelist)
        rc, sig = parse_exit_code(exit_code) if exit_code.strip() else (None, 0)
        start_s = parse_timestamp_s(start)
        out.append(FinishedJob(
            job_id=parse_job_id(job_id),
            user=user,
            state=base,
            end_time_s=end_s,
            start_time_s=start_s if nodes else None,
            submit_time_s=parse_timestamp_s(submit),
            nodes=nodes,
            exit_code=rc,
            signal=sig,
            name=name,
            partition=partition,
            time_limit_s=parse_duration_s(limit),
            source="sacct",
        ))
    return tuple(out)


# -- scontrol errors -----------------------------------------------------------------------------------

_FOR_JOB_RE = re.compile(r"for job (\d+(?:_\d+)?)")


def failed_job_ids(stderr: str) -> set[str]:
    """Job ids that a multi-job ``scontrol update JobId=a,b,c`` names in its errors
    (``Invalid job id specified for job 99999``); the other jobs were updated."""
    return set(_FOR_JOB_RE.findall(stderr or ""))
