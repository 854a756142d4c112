"""The daemon's side of ``contrib/slurm/job_submit.lua``: read its records, match them to jobs.

The Lua plugin runs inside slurmctld. For every submission (sbatch, srun, salloc; through the
wrapper or not) it writes one JSON record into its own spool directory and puts
``asrpt-rec:<token>`` at the front of the job's AdminComment; the record carries the same
token. The job id does not exist yet while the plugin runs, so the token is how a record
finds its job: :func:`match_plugin_records` looks the token up in the AdminComments of the
jobs squeue reports (AdminComment can only be set by Slurm administrators, never by the job's
owner).

Trust model
-----------
Everything in a record comes from slurmctld (the uid it authenticated, the request, the
script), so it is trusted *if slurmctld wrote it*: the spool directory must be owned by a
trusted uid (root, or the SlurmUser the plugin runs as) and writable by nobody else, and each
record file must be a regular, singly-linked file owned by a trusted uid. Anything else is
moved to ``rejected/`` (or deleted) and logged. A record whose user differs from the user
squeue reports for the matched job is not stored.

Life of a record::

    records = read_plugin_spool(plugin_dir)
    for job_id, record in match_plugin_records(records, jobs):
        repository.record_submission(to_submission_record(record, job_id, jobs[job_id]))
    ... remove(record) once stored; expire records no job carries after max_age_s

:func:`ingest_plugin_spool` is that cycle. The repository keeps one row per job: the
plugin's identity fields win over the wrapper's, and the wrapper adds what only it knows (see
:meth:`asrpt.db.repository.HistoryRepository.record_submission`).

Script identity: when the record holds the whole script, the daemon computes the same
``script_sha256`` and ``recurrence_group`` as the wrapper (sha256 of the bytes, and of
:func:`~asrpt.submit_wrapper.directives.recurrence_text`; for ``--wrap`` jobs of the command),
and reads ``#ASRPT`` directives with the wrapper's parser, so plugin-only and wrapper jobs
fall into the same recurrence groups. A record whose script was cut at the plugin's
SCRIPT_TEXT_LIMIT gets ``script_hash = "poly31x37:<hex>"`` (the plugin's hash of the first
``hash_bytes`` bytes, :func:`poly31x37`) and the directive words the plugin found.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pwd
import re
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asrpt.db.repository import SubmissionRecord
from asrpt.exceptions import AsrptError
from asrpt.slurm.parsing import job_id_order_key
from asrpt.submit_wrapper import directives
from asrpt.ingest.wrapper_spool import RecordFormatError, _discard, _get, _prune_rejected, read_record_file
from asrpt.ingest.wrapper_spool import reject as _reject_spool_file
from asrpt.ingest.wrapper_spool import remove as _remove_spool_file
from asrpt.ingest.wrapper_spool import set_aside
from asrpt.submit_wrapper.spool import BAD_DIR, REJECTED_DIR, RECORD_SUFFIX, TEMP_PREFIX

logger = logging.getLogger(__name__)

FORMAT = "asrpt-plugin-submission"
FORMAT_VERSION = 1
#: What the plugin puts in front of the AdminComment, followed by the record's token.
TAG = "asrpt-rec:"
_TAG_RE = re.compile(r"(?:^|\s)asrpt-rec:([0-9a-f]{16,64})(?![0-9A-Za-z])")
_TOKEN_RE = re.compile(r"[0-9a-f]{16,64}")
_HEX16_RE = re.compile(r"[0-9a-f]{16}")

#: The plugin's script hash (``script.hash_alg``); see :func:`poly31x37`.
HASH_ALG = "poly31x37"
#: The script sbatch generates for ``--wrap CMD`` (22.05 and 24.11).
WRAP_PREFIX = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"

#: Readers refuse larger record files (the plugin copies at most 64 KiB of script by default).
MAX_RECORD_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_RECORDS = 5_000
#: Unmatched records are discarded after this long (the submission failed, was only a
#: ``--test-only``, or its job left squeue while the daemon was away), seconds.
DEFAULT_MAX_AGE_S = 86_400.0
DEFAULT_TEMP_MAX_AGE_S = 3_600.0
DEFAULT_REJECTED_MAX_AGE_S = 7 * 86_400.0
#: The uids whose files are trusted: root (the test-bed's and most sites' SlurmUser).
DEFAULT_TRUSTED_UIDS: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginRecord:
    """One record of job_submit.lua (format version 1), as read from its spool."""

    #: Absolute path of the record file.
    path: str
    #: The file's owner (``fstat``); always one of the trusted uids.
    owner_uid: int
    #: (st_dev, st_ino, st_ctime_ns) of the file that was read; :func:`remove` checks it.
    file_id: tuple[int, int, int]
    #: When the file got its name (ctime), epoch seconds.
    spooled_at_s: float
    token: str
    #: slurmctld's clock when the plugin ran (whole seconds).
    submit_time_s: float | None = None
    #: The uid slurmctld authenticated for the request.
    submit_uid: int | None = None
    #: The job's user id and group id (differ from submit_uid only for root's ``--uid``).
    uid: int | None = None
    gid: int | None = None
    #: The user name slurmctld resolved (None if the plugin did not look it up).
    user: str | None = None
    account: str | None = None
    job_name: str | None = None
    partitions: tuple[str, ...] = ()
    qos: str | None = None
    work_dir: str | None = None
    #: TRES requests as Slurm holds them ("gres:gpu:a100:2" in 22.05, "gres/gpu:a100:2" in 24.11).
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    tres_per_task: str | None = None
    tres_per_socket: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    num_tasks: int | None = None
    cpus_per_task: int | None = None
    #: None: no limit given (the partition's default applies) or unlimited.
    time_limit_s: float | None = None
    time_limit_unlimited: bool = False
    #: ``--array`` specification, or None.
    array: str | None = None
    het_job_offset: int | None = None
    #: srun/salloc (no batch script); None for a heterogeneous batch job's later components
    #: (only the first carries the script).
    interactive: bool | None = False
    #: The priority the plugin's option set, or None.
    priority_set: int | None = None
    #: Length of the whole script in bytes (None without a script).
    script_bytes: int | None = None
    #: The plugin's :func:`poly31x37` (16 hex digits) of the first ``script_hash_bytes`` bytes.
    script_poly_hash: str | None = None
    script_hash_bytes: int | None = None
    #: The script's bytes as text (``surrogateescape`` keeps non-UTF-8 bytes exact).
    script_text: str | None = None
    script_truncated: bool = False
    #: Words of the ``#ASRPT`` header lines as the plugin split them.
    asrpt_words: tuple[str, ...] = ()
    plugin_version: str | None = None

    # -- what the daemon derives ------------------------------------------------------------

    @property
    def has_whole_script(self) -> bool:
        return self.script_text is not None and not self.script_truncated

    @property
    def script_data(self) -> bytes | None:
        """The exact script bytes, when the record holds all of them."""
        if not self.has_whole_script:
            return None
        assert self.script_text is not None
        return self.script_text.encode("utf-8", "surrogateescape")

    @property
    def wrap_command(self) -> str | None:
        """The ``--wrap`` command, if sbatch generated the script from one."""
        text = self.script_text
        if not self.has_whole_script or text is None:
            return None
        if text.startswith(WRAP_PREFIX) and text.endswith("\n"):
            return text[len(WRAP_PREFIX) : -1]
        return None

    def script_identity(self) -> tuple[str | None, str | None]:
        """(script hash, recurrence group), computed as the wrapper does when possible."""
        data = self.script_data
        if data is None:
            if self.script_poly_hash is not None:
                return f"{HASH_ALG}:{self.script_poly_hash}", None
            return None, None
        wrap = self.wrap_command
        text = self.script_text or ""
        if wrap is not None:
            script_hash = hashlib.sha256(wrap.encode("utf-8", "surrogateescape")).hexdigest()
            normalised = directives.wrap_recurrence_text(_clean(wrap))
        else:
            script_hash = hashlib.sha256(data).hexdigest()
            normalised = directives.recurrence_text(_clean(text))
        return script_hash, hashlib.sha256(normalised.encode("utf-8")).hexdigest()

    def asrpt_fields(self) -> dict[str, object]:
        """``#ASRPT`` fields, parsed by the wrapper's rules (bad values dropped)."""
        if self.has_whole_script and self.wrap_command is None:
            return dict(directives.scan_script(_clean(self.script_text or "")).asrpt)
        fields, _warnings = directives.parse_asrpt_words(list(self.asrpt_words), "plugin record")
        return fields


def poly31x37(data: bytes) -> str:
    """The plugin's script hash, for checks: two polynomial hashes of the bytes,
    ``sum(b_i * 31^(n-i)) mod 4294967291`` and ``sum(b_i * 37^(n-i)) mod 4294967279``, as 8 + 8
    hex digits (Lua 5.1 computes them exactly in doubles; see job_submit.lua)."""
    h1 = h2 = 0
    for byte in data:
        h1 = (h1 * 31 + byte) % 4294967291
        h2 = (h2 * 37 + byte) % 4294967279
    return f"{h1:08x}{h2:08x}"


def _clean(text: str) -> str:
    """Text with undecodable bytes replaced, as the wrapper's ``decode_script`` gives it."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# ---- reading ----------------------------------------------------------------------------------


def uids_of(owners: Iterable[str | int]) -> tuple[int, ...]:
    """User names (or numeric uids) -> uids; unknown names are logged and left out."""
    uids: list[int] = []
    for owner in owners:
        if isinstance(owner, int) or str(owner).isdigit():
            uids.append(int(owner))
            continue
        try:
            uids.append(pwd.getpwnam(str(owner)).pw_uid)
        except KeyError:
            logger.warning("plugin spool owner %r is not a user on this host", owner)
    return tuple(uids)


def _directory_problem(directory: str, trusted_uids: Sequence[int]) -> str | None:
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be examined: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory (or is a symbolic link)"
    if st.st_uid not in trusted_uids:
        return f"is owned by uid {st.st_uid}, not by a trusted uid {tuple(trusted_uids)}"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def read_plugin_spool(
    spool_dir: str | os.PathLike[str],
    *,
    trusted_uids: Sequence[int] = DEFAULT_TRUSTED_UIDS,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_bytes: int = MAX_RECORD_BYTES,
    now_s: float | None = None,
    temp_max_age_s: float = DEFAULT_TEMP_MAX_AGE_S,
    rejected_max_age_s: float = DEFAULT_REJECTED_MAX_AGE_S,
) -> list[PluginRecord]:
    """Parse the plugin's records in ``spool_dir``, oldest first.

    A directory that is missing, a symbolic link, not owned by a trusted uid or writable by
    others is logged and yields nothing (its files are left alone). Files not owned by a
    trusted uid, symlinks, FIFOs, hard links, malformed or oversized files are moved to
    ``rejected/`` (or deleted) and logged. Valid records stay until :func:`remove`.
    """
    directory = os.fspath(spool_dir)
    now = time.time() if now_s is None else now_s
    problem = _directory_problem(directory, trusted_uids)
    if problem is not None:
        logger.warning("plugin spool %s %s; its records are not read", directory, problem,
                       extra={"action": "plugin_spool_unsafe", "path": directory})
        return []
    try:
        entries = list(os.scandir(directory))
    except OSError as exc:
        logger.warning("cannot list plugin spool %s: %s", directory, exc.strerror)
        return []
    candidates: list[tuple[float, str]] = []
    for entry in entries:
        if entry.name in (REJECTED_DIR, BAD_DIR):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if entry.name.startswith("."):
            # The plugin's temp files: a slurmctld that died between write and rename.
            if entry.name.startswith(TEMP_PREFIX) and now - st.st_mtime > temp_max_age_s:
                _discard(directory, entry.name, "stale temporary file of the plugin")
            continue
        candidates.append((st.st_ctime, entry.name))
    candidates.sort()
    records: list[PluginRecord] = []
    for _, name in candidates[:max_records]:
        if not name.endswith(RECORD_SUFFIX):
            _discard(directory, name, "not a plugin record (name does not end in .json)")
            continue
        try:
            records.append(_read_one(os.path.join(directory, name), trusted_uids, max_bytes))
        except FileNotFoundError:
            continue
        except RecordFormatError as exc:
            _discard(directory, name, str(exc))
    _prune_rejected(directory, now, rejected_max_age_s)
    return records


def _read_one(path: str, trusted_uids: Sequence[int], max_bytes: int) -> PluginRecord:
    data, st = read_record_file(path, max_bytes, trusted_uids)
    try:
        # surrogateescape: a script that is not UTF-8 keeps its exact bytes.
        document = json.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise RecordFormatError(f"not JSON: {exc}") from exc
    except RecursionError:
        raise RecordFormatError("JSON nested too deeply") from None
    return parse_plugin_record(
        document,
        path=path,
        owner_uid=st.st_uid,
        file_id=(st.st_dev, st.st_ino, st.st_ctime_ns),
        spooled_at_s=st.st_ctime,
    )


def _text(document: Mapping[str, Any], key: str, limit: int = 4096) -> str | None:
    value = _get(document, key, str)
    if value is None or value == "":
        return None
    if len(value) > limit:
        raise RecordFormatError(f"{key} is too long")
    return value


def _count(document: Mapping[str, Any], key: str) -> int | None:
    value = _get(document, key, (int, float))
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or value != int(value) or value >= 2**32:
        raise RecordFormatError(f"{key} is not a count: {value!r}")
    return int(value)


def _flag(document: Mapping[str, Any], key: str) -> bool:
    return bool(_get(document, key, bool))


def parse_plugin_record(
    document: Any,
    *,
    path: str,
    owner_uid: int,
    file_id: tuple[int, int, int],
    spooled_at_s: float,
) -> PluginRecord:
    """Validate a decoded plugin record into a :class:`PluginRecord` (RecordFormatError if bad)."""
    if not isinstance(document, dict):
        raise RecordFormatError("not a JSON object")
    if document.get("format") != FORMAT:
        raise RecordFormatError(f"format is not {FORMAT!r}")
    version = document.get("version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise RecordFormatError(f"unsupported version {version!r}")
    token = _get(document, "token", str)
    if token is None or not _TOKEN_RE.fullmatch(token):
        raise RecordFormatError(f"token {str(token)[:70]!r} is not 16-64 lowercase hex digits")
    submit_time = _get(document, "submit_time_s", (int, float))
    if submit_time is not None and not math.isfinite(submit_time):
        raise RecordFormatError("submit_time_s is not finite")
    limit_min = _count(document, "time_limit_min")
    script = _get(document, "script", dict)
    script_text = script_hash = None
    script_bytes = hash_bytes = None
    truncated = False
    if script is not None:
        script_bytes = _count(script, "bytes")
        alg = _get(script, "hash_alg", str)
        script_hash = _get(script, "hash", str)
        if script_hash is not None and (alg != HASH_ALG or not _HEX16_RE.fullmatch(script_hash)):
            raise RecordFormatError(f"script.hash is not a {HASH_ALG} hex digest")
        hash_bytes = _count(script, "hash_bytes")
        script_text = _get(script, "text", str)
        truncated = _flag(script, "truncated")
    words = document.get("asrpt_directives") or []
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words) or len(words) > 1024:
        raise RecordFormatError("asrpt_directives must be a list of strings")
    partition = _text(document, "partition")
    return PluginRecord(
        path=path,
        owner_uid=owner_uid,
        file_id=file_id,
        spooled_at_s=spooled_at_s,
        token=token,
        submit_time_s=None if submit_time is None else float(submit_time),
        submit_uid=_count(document, "submit_uid"),
        uid=_count(document, "uid"),
        gid=_count(document, "gid"),
        user=_text(document, "user", 256),
        account=_text(document, "account", 256),
        job_name=_text(document, "name"),
        partitions=tuple(p for p in (partition or "").split(",") if p),
        qos=_text(document, "qos", 256),
        work_dir=_text(document, "work_dir"),
        tres_per_node=_text(document, "tres_per_node"),
        tres_per_job=_text(document, "tres_per_job"),
        tres_per_task=_text(document, "tres_per_task"),
        tres_per_socket=_text(document, "tres_per_socket"),
        min_nodes=_count(document, "min_nodes"),
        max_nodes=_count(document, "max_nodes"),
        num_tasks=_count(document, "num_tasks"),
        cpus_per_task=_count(document, "cpus_per_task"),
        time_limit_s=None if limit_min is None else limit_min * 60.0,
        time_limit_unlimited=_flag(document, "time_limit_unlimited"),
        array=_text(document, "array", 1024),
        het_job_offset=_count(document, "het_job_offset"),
        interactive=_get(document, "interactive", bool),
        priority_set=_count(document, "priority_set"),
        script_bytes=script_bytes,
        script_poly_hash=script_hash,
        script_hash_bytes=hash_bytes,
        script_text=script_text,
        script_truncated=truncated,
        asrpt_words=tuple(words),
        plugin_version=_text(document, "plugin_version", 64),
    )


# ---- matching -----------------------------------------------------------------------------


def tokens_in(admin_comment: str | None) -> list[str]:
    """The plugin tokens an AdminComment carries (normally none or one)."""
    return _TAG_RE.findall(admin_comment or "")


def match_plugin_records(records: Iterable[PluginRecord], jobs: Mapping[str, Any]) -> list[tuple[str, PluginRecord]]:
    """(job id, record) for every job whose AdminComment carries a record's token.

    ``jobs`` maps job ids to :class:`~asrpt.slurm.records.SlurmJob` (anything with
    ``admin_comment`` and ``user``). One record normally matches one job; the tasks of a job
    array share their submission's token, so an array record matches every task squeue
    lists. A pair whose record names a user other than the one squeue reports is left out
    (and logged): the token was copied by hand, or the record is not what it claims. Pairs
    come in record order, job ids in numeric order.
    """
    by_token: dict[str, list[str]] = {}
    for job_id, job in jobs.items():
        for token in tokens_in(getattr(job, "admin_comment", "")):
            by_token.setdefault(token, []).append(job_id)
    pairs: list[tuple[str, PluginRecord]] = []
    for record in records:
        for job_id in sorted(by_token.get(record.token, ()), key=job_id_order_key):
            slurm_user = getattr(jobs[job_id], "user", "") or ""
            if record.user and slurm_user and record.user != slurm_user:
                logger.warning(
                    "plugin record %s names user %s but Slurm says job %s belongs to %s; not stored",
                    record.path, record.user, job_id, slurm_user,
                    extra={"action": "plugin_user_mismatch", "job_id": job_id, "path": record.path},
                )
                continue
            pairs.append((job_id, record))
    return pairs


# ---- the history row ------------------------------------------------------------------------


_TRES_ITEM_RE = re.compile(r"(?:gres[:/])?(?P<name>[A-Za-z0-9_.\-]+)(?::(?P<type>[^:=,]+?))??(?:[:=](?P<count>\d+))?")


def parse_tres_request(text: str | None) -> list[tuple[str, str | None, int]]:
    """(name, type, count) of each GRES in a request as job_desc holds it: ``gres:gpu:a100:2``
    (22.05), ``gres/gpu:a100:2`` and ``gres/gpu=1`` (24.11's tres_per_task), ``gpu``
    (count 1). Other TRES (``cpu=2``) and items that do not parse are skipped."""
    items = []
    for raw in (text or "").split(","):
        raw = raw.strip()
        if not raw.startswith(("gres:", "gres/")):
            continue
        match = _TRES_ITEM_RE.fullmatch(raw)
        if match:
            count = int(match.group("count")) if match.group("count") else 1
            items.append((match.group("name"), match.group("type"), count))
    return items


def _accelerators(record: PluginRecord, job: Any, accelerator_gres: Sequence[str]) -> tuple[int | None, str | None]:
    """(total accelerators, type) from the record's TRES requests, like the backend's rule:
    per node x nodes, else per job, else per task x tasks."""
    names = {name.lower() for name in accelerator_gres}
    nodes = record.min_nodes or (getattr(job, "node_count", None) if job is not None else None) or 1
    tasks = record.num_tasks or (getattr(job, "tasks", None) if job is not None else None) or 1
    for text, factor in ((record.tres_per_node, nodes), (record.tres_per_job, 1), (record.tres_per_task, tasks)):
        for name, type_, count in parse_tres_request(text):
            if name.lower() in names and count > 0:
                return count * factor, type_
    return None, None


def _user_name(record: PluginRecord, job: Any) -> str:
    if record.user:
        return record.user
    slurm_user = getattr(job, "user", "") if job is not None else ""
    if slurm_user:
        return slurm_user
    if record.uid is not None:
        try:
            return pwd.getpwuid(record.uid).pw_name
        except KeyError:
            return str(record.uid)
    return "unknown"


def to_submission_record(
    record: PluginRecord,
    job_id: str,
    job: Any = None,
    *,
    accelerator_gres: Sequence[str] = ("gpu", "npu"),
) -> SubmissionRecord:
    """The repository's :class:`~asrpt.db.repository.SubmissionRecord` (``source="plugin"``).

    ``job`` is the matched :class:`~asrpt.slurm.records.SlurmJob` (optional): it supplies the
    submit time to the second (Slurm's own), the partition Slurm chose when the request named
    none, and node/task counts the request left unset.
    """
    asrpt = record.asrpt_fields()
    script_hash, group = record.script_identity()
    accelerators, accelerator_type = _accelerators(record, job, accelerator_gres)
    slurm_submit = getattr(job, "submit_time_s", 0.0) if job is not None else 0.0
    submit_time_s = slurm_submit or record.submit_time_s or record.spooled_at_s
    partitions = record.partitions or (tuple(getattr(job, "partitions", ()) or ()) if job is not None else ())

    def int_field(key: str) -> int | None:
        value = asrpt.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def str_field(key: str) -> str | None:
        value = asrpt.get(key)
        return value if isinstance(value, str) else None

    iterations = asrpt.get("iterations")
    return SubmissionRecord(
        slurm_job_id=job_id,
        user=_user_name(record, job),
        uid=record.uid,
        submit_time_s=float(submit_time_s),
        source="plugin",
        account=record.account,
        job_name=record.job_name,
        partitions=tuple(p for p in partitions if "," not in p),
        accelerators=accelerators,
        accelerator_type=accelerator_type,
        parallel_data=int_field("parallel_data"),
        parallel_pipeline=int_field("parallel_pipeline"),
        parallel_tensor=int_field("parallel_tensor"),
        micro_batches=int_field("micro_batches"),
        model_name=str_field("model"),
        workload_class=str_field("workload_class"),
        script_hash=script_hash,
        recurrence_group=group,
        command=record.wrap_command,
        time_limit_s=record.time_limit_s,
        iterations_hint=float(iterations) if isinstance(iterations, (int, float)) and not isinstance(iterations, bool) else None,
        serve_model=str_field("serve_model"),
        parallel_tensor_auto=True if asrpt.get("parallel_tensor_auto") is True else None,
    )


# ---- the cycle --------------------------------------------------------------------------------


# A plugin record is removed or rejected exactly as a wrapper record is (both carry the
# path and the (device, inode, ctime) identity read with them).
remove = _remove_spool_file
reject = _reject_spool_file


@dataclass(frozen=True, slots=True)
class IngestResult:
    #: Jobs stored (an array record counts once per task).
    stored: int
    #: Records still waiting for their job to appear.
    waiting: int
    #: Records discarded because no job carried their token within ``max_age_s``.
    expired: int


def ingest_plugin_spool(
    spool_dir: str | os.PathLike[str],
    jobs: Mapping[str, Any],
    record_submission: Callable[[Any], None],
    *,
    trusted_uids: Sequence[int] = DEFAULT_TRUSTED_UIDS,
    accelerator_gres: Sequence[str] = ("gpu", "npu"),
    max_age_s: float = DEFAULT_MAX_AGE_S,
    now_s: float | None = None,
    age_of: Callable[[PluginRecord, float], float] | None = None,
) -> IngestResult:
    """One daemon cycle: store every record squeue's jobs carry the token of, then delete it.

    ``record_submission`` is ``HistoryRepository.record_submission``. A record stays in the
    spool while its job is not in ``jobs`` (yet), and is discarded after ``max_age_s``. An
    array record stays while any task carrying its token is still pending (tasks not started
    yet get their own job ids later); storing a job twice is harmless (the repository merges
    per job id). A record is deleted only after every one of its jobs was stored, so a
    database failure loses nothing (the exception propagates; the next cycle retries).
    ``age_of(record, now_s)`` is how long a record has waited, if the caller keeps a clock that
    survives wall-clock steps (default: by its file's change time).
    """
    now = time.time() if now_s is None else now_s
    records = read_plugin_spool(spool_dir, trusted_uids=trusted_uids, now_s=now)
    pairs = match_plugin_records(records, jobs)
    matched: dict[str, list[str]] = {}
    bad: set[str] = set()
    for job_id, record in pairs:
        if record.path in bad:
            continue
        try:
            record_submission(to_submission_record(record, job_id, jobs.get(job_id), accelerator_gres=accelerator_gres))
        except AsrptError:
            raise  # the database is down: the record waits for the next cycle
        except Exception as error:  # this record cannot be stored: set it aside, go on
            set_aside(record, f"storing it for job {job_id} failed: {type(error).__name__}: {error}")
            bad.add(record.path)
            continue
        matched.setdefault(record.path, []).append(job_id)
    stored = sum(map(len, matched.values()))  # rows written, also of a record set aside later
    waiting = expired = 0
    for record in records:
        if record.path in bad:
            continue
        job_ids = matched.get(record.path)
        if job_ids:
            if record.array and any(getattr(jobs[j], "is_pending", False) for j in job_ids):
                continue
            remove(record)
            continue
        age_s = now - record.spooled_at_s if age_of is None else age_of(record, now)
        if age_s > max_age_s:
            reject(record, f"no job in squeue carried token {record.token} for {age_s:.0f} s")
            expired += 1
        else:
            waiting += 1
    return IngestResult(stored=stored, waiting=waiting, expired=expired)
