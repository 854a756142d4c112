"""The daemon's side of the spool: read submission records, check who wrote them, keep the good.

Trust model
-----------
The wrapper runs as the submitting user, so everything *inside* a record is the user's word.
The daemon trusts exactly two things, neither of which the user controls:

* the **owner of the file** (``fstat`` of the opened file, the kernel's answer): in the sticky
  spool directory nobody can create a file owned by someone else, or rename, replace or delete
  another user's file; and
* **Slurm's answer** to "whose job is this id?".

A record is kept only if the owner's user name equals the user Slurm reports for the record's
job id (:func:`accept_record`). Hence:

* *nobody can forge history for someone else's job*: a record bob writes for alice's job id is
  owned by bob and discarded. A record whose file allows group or other writes is refused
  outright (someone else could have rewritten it), as are symlinks, hard-linked files, FIFOs
  and anything else that is not a plain 0600-style file;
* *nobody can raise their own job's priority*: a record has no priority, nice, time-limit or
  identity field that counts. The submitter's identity comes from the file owner and Slurm;
  identity fields (user, account, partitions, resources, time limit) come from Slurm, which
  outranks the wrapper in the repository's merge rule. What a record adds (model, workload
  class, parallelism, micro-batches, an iterations hint, the script hash and text) are
  *features* for the predictor, not priorities; the user could put the same values in
  ``#ASRPT`` lines of an honest submission anyway, so writing a record by hand gains nothing
  that the wrapper would not have recorded. (Whether the predictor should believe a user's
  ``iterations`` hint is the predictor's business, judged against that user's history.)
  ``serve-model`` and ``tp=auto`` only narrow where a serving job may run (the daemon picks
  the partition from the admin's serving plan, among those Slurm lets the job use).

Life of a record: the wrapper writes ``spool/<name>.json``; :func:`read_spool` parses it (a
malformed or oversized file is moved to ``spool/rejected/`` and logged); the daemon asks
:func:`accept_record`, which also moves a mismatching record to ``rejected/`` and leaves a
record whose job Slurm does not know yet for a later cycle (up to ``max_pending_age_s``);
after the daemon has *stored* an accepted record, it calls :func:`remove`. So nothing is lost
while the daemon or its database is down: records wait in the spool.

The daemon reads other users' 0600 files, so it runs as root (or with CAP_DAC_READ_SEARCH and
owning the spool directory, which lets it delete and move any file in it). ``rejected/`` is
used only if it is a real directory owned by the daemon's user and writable by nobody else
(it is created 0700 when missing); otherwise refused files are deleted. Files in
``rejected/`` are deleted after ``rejected_max_age_s``.

One cycle::

    for record in read_spool(spool_dir):
        if accept_record(record, slurm_user_of_job):
            repository.record_submission(to_submission_record(record))
            remove(record)
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import pwd
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asrpt.comment_hints import MAX_NAME_CHARS
from asrpt.db.repository import SubmissionRecord
from asrpt.submit_wrapper import spool

logger = logging.getLogger(__name__)

#: Records whose job Slurm still does not know after this long are discarded, seconds.
DEFAULT_MAX_PENDING_AGE_S = 86_400.0
#: Files in ``rejected/`` are deleted after this long, seconds.
DEFAULT_REJECTED_MAX_AGE_S = 7 * 86_400.0
#: Temp files of wrappers that died before renaming are deleted after this long, seconds.
DEFAULT_TEMP_MAX_AGE_S = 3_600.0
#: At most this many records are read per call, and at most ``per_owner`` of them from one
#: user, so that one user flooding the spool cannot starve everybody else's records.
DEFAULT_MAX_RECORDS = 2_000
DEFAULT_MAX_RECORDS_PER_OWNER = 200

_ASRPT_INT_FIELDS = ("parallel_data", "parallel_pipeline", "parallel_tensor", "micro_batches")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpoolRecord:
    """One submission record as read from the spool.

    ``owner_uid``/``owner_name``/``spooled_at_s`` come from the file (trusted); every other
    field is what the submitter's wrapper wrote (untrusted until :func:`accept_record`).
    """

    #: Absolute path of the record file.
    path: str
    #: The file's owner, from ``fstat`` (the kernel's word, not the record's).
    owner_uid: int
    #: The owner's user name, or None if the uid has no passwd entry.
    owner_name: str | None
    #: (st_dev, st_ino, st_ctime_ns) of the file that was read; :func:`remove` checks it.
    file_id: tuple[int, int, int]
    #: When the file got its name (its ctime), epoch seconds; users cannot move it backwards.
    spooled_at_s: float
    format_version: int
    slurm_job_id: str
    cluster: str | None = None
    #: The wrapper's clock at submission, epoch seconds (untrusted).
    submit_time_s: float | None = None
    cwd: str | None = None
    argv: tuple[str, ...] = ()
    #: ``file``, ``stdin`` or ``wrap``.
    script_source: str | None = None
    script_path: str | None = None
    script_sha256: str | None = None
    script_text: str | None = None
    script_truncated: bool = False
    recurrence_group: str | None = None
    model_name: str | None = None
    workload_class: str | None = None
    parallel_data: int | None = None
    parallel_pipeline: int | None = None
    parallel_tensor: int | None = None
    micro_batches: int | None = None
    #: ``#ASRPT iterations=N``: the user's estimate of training iterations.
    iterations_hint: float | None = None
    #: ``#ASRPT serve-model=NAME``: the LLM a serving job serves, as the user wrote it.
    serve_model: str | None = None
    #: ``#ASRPT tp=auto``: True; None when not given (never False).
    parallel_tensor_auto: bool | None = None
    #: ``#SBATCH`` and command-line options of the first component, as the wrapper parsed them.
    sbatch_options: Mapping[str, Any] = field(default_factory=dict)
    script_args: tuple[str, ...] = ()
    het_components: int = 1
    #: What the wrapper believed the user to be ($USER, getuid()); for logs only.
    claimed_user: str | None = None
    claimed_uid: int | None = None
    hostname: str | None = None
    wrapper_version: str | None = None

    @property
    def command(self) -> str | None:
        """The ``--wrap`` command, or the script path and its arguments."""
        if self.script_source == "wrap":
            return self.script_text
        if self.script_path is None:
            return None
        return " ".join([self.script_path, *self.script_args])


class RecordFormatError(ValueError):
    """A spool file is not a valid submission record."""


# ---- reading ------------------------------------------------------------------------------


def read_spool(
    spool_dir: str | os.PathLike[str],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_records_per_owner: int = DEFAULT_MAX_RECORDS_PER_OWNER,
    max_bytes: int = spool.MAX_RECORD_BYTES,
    now_s: float | None = None,
    temp_max_age_s: float = DEFAULT_TEMP_MAX_AGE_S,
    rejected_max_age_s: float = DEFAULT_REJECTED_MAX_AGE_S,
) -> list[SpoolRecord]:
    """Parse the records in ``spool_dir``, oldest first.

    Malformed, oversized or unsafe files (symlinks, FIFOs, hard links, group/other-writable
    files, names that are not ``*.json``) are moved to ``rejected/`` (or deleted) and logged.
    Valid records stay where they are until :func:`remove` or :func:`accept_record` acts.
    A missing spool directory is logged and yields no records.

    Parameters
    ----------
    spool_dir
        The spool directory (``[spool] dir``).
    max_records, max_records_per_owner
        Read at most this many records, and at most this many of one file owner, per call;
        the rest wait for the next call (a user flooding the spool cannot starve others).
    max_bytes
        Larger files are refused.
    now_s
        The current time, epoch seconds (default: the clock); used for the age limits.
    temp_max_age_s, rejected_max_age_s
        Age, seconds, after which a wrapper's leftover temp file, and a file in
        ``rejected/``, are deleted.

    Returns
    -------
    list[SpoolRecord]
        Parsed records whose owner comes from the file; not yet checked against Slurm.
    """
    directory = os.fspath(spool_dir)
    now = time.time() if now_s is None else now_s
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        logger.warning("spool directory %s does not exist", directory, extra={"action": "spool_missing"})
        return []
    candidates: list[tuple[float, str, int]] = []
    for entry in entries:
        name = entry.name
        if name in (spool.REJECTED_DIR, spool.BAD_DIR):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if name.startswith("."):
            if name.startswith(spool.TEMP_PREFIX) and now - st.st_mtime > temp_max_age_s:
                _discard(directory, name, "stale temporary file of a wrapper that did not finish")
            continue
        candidates.append((st.st_ctime, name, st.st_uid))
    candidates.sort()

    records: list[SpoolRecord] = []
    per_owner: dict[int, int] = {}
    for _, name, uid in candidates:
        if len(records) >= max_records:
            break
        if per_owner.get(uid, 0) >= max_records_per_owner:
            continue
        per_owner[uid] = per_owner.get(uid, 0) + 1
        path = os.path.join(directory, name)
        if not name.endswith(spool.RECORD_SUFFIX):
            _discard(directory, name, "not a record (name does not end in .json)")
            continue
        try:
            records.append(_read_one(path, max_bytes))
        except FileNotFoundError:
            continue
        except RecordFormatError as exc:
            _discard(directory, name, str(exc))
    _prune_rejected(directory, now, rejected_max_age_s)
    return records


def read_record_file(path: str, max_bytes: int, trusted_uids: Sequence[int] | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes and status of one spool record, read safely (both spools' one way): never
    through a symbolic link, only a regular file with one link that no one but its owner can
    write, owned by one of ``trusted_uids`` if given, at most ``max_bytes`` long. Raises
    :class:`RecordFormatError` naming what is wrong, FileNotFoundError if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(path) from exc
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise RecordFormatError("a symbolic link") from exc
        raise RecordFormatError(f"cannot open: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordFormatError("not a regular file")
        if trusted_uids is not None and st.st_uid not in trusted_uids:
            raise RecordFormatError(f"owned by uid {st.st_uid}, not by slurmctld's user {tuple(trusted_uids)}")
        if st.st_nlink != 1:
            raise RecordFormatError(f"has {st.st_nlink} hard links")
        if st.st_mode & 0o022:
            raise RecordFormatError(f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})")
        if st.st_size > max_bytes:
            raise RecordFormatError(f"too large ({st.st_size} bytes > {max_bytes})")
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise RecordFormatError(f"too large (over {max_bytes} bytes)")
    finally:
        os.close(fd)
    return data, st


def _read_one(path: str, max_bytes: int) -> SpoolRecord:
    data, st = read_record_file(path, max_bytes)
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordFormatError(f"not JSON: {exc}") from exc
    except RecursionError:
        raise RecordFormatError("JSON nested too deeply") from None
    try:
        owner_name: str | None = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner_name = None
    return parse_record(
        document,
        path=path,
        owner_uid=st.st_uid,
        owner_name=owner_name,
        file_id=(st.st_dev, st.st_ino, st.st_ctime_ns),
        spooled_at_s=st.st_ctime,
    )


def _get(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...], *, optional: bool = True) -> Any:
    value = document.get(key)
    if value is None:
        if optional:
            return None
        raise RecordFormatError(f"missing {key}")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # JSON true/false are Python bools, which are ints: refuse them where a number is expected.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise RecordFormatError(f"{key} has the wrong type ({type(value).__name__})")
    return value


def _opt_str(document: Mapping[str, Any], key: str, limit: int = 4096) -> str | None:
    value = _get(document, key, str)
    if value is not None and len(value) > limit:
        raise RecordFormatError(f"{key} is too long")
    return value


#: Largest integer a record may hold: what every history database stores in an INTEGER.
MAX_RECORD_INT = 2**31 - 1


def _positive_int(document: Mapping[str, Any], key: str) -> int | None:
    value = _get(document, key, int)
    if value is not None and not 1 <= value <= MAX_RECORD_INT:
        raise RecordFormatError(f"{key} must be a positive integer up to {MAX_RECORD_INT}")
    return value


def _str_tuple(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RecordFormatError(f"{key} must be a list of strings")
    return tuple(value)


def parse_record(
    document: Any,
    *,
    path: str,
    owner_uid: int,
    owner_name: str | None,
    file_id: tuple[int, int, int],
    spooled_at_s: float,
) -> SpoolRecord:
    """Validate a decoded record (format version 1) into a :class:`SpoolRecord`."""
    if not isinstance(document, dict):
        raise RecordFormatError("not a JSON object")
    if document.get("format") != spool.FORMAT:
        raise RecordFormatError(f"format is not {spool.FORMAT!r}")
    version = document.get("version")
    if version != spool.FORMAT_VERSION or isinstance(version, bool):
        raise RecordFormatError(f"unsupported version {version!r}")
    job_id = _get(document, "slurm_job_id", str, optional=False)
    if not job_id.isdigit() or len(job_id) > 20:
        raise RecordFormatError(f"slurm_job_id {job_id[:40]!r} is not a job id")
    submit_time = _get(document, "submit_time_s", (int, float))
    if submit_time is not None and not math.isfinite(submit_time):
        raise RecordFormatError("submit_time_s is not finite")
    script = _get(document, "script", dict) or {}
    directives = _get(document, "directives", dict) or {}
    asrpt = _get(directives, "asrpt", dict) or {}
    sbatch_options = _get(directives, "sbatch", dict) or {}
    iterations = _get(asrpt, "iterations", (int, float))
    if iterations is not None and not (math.isfinite(iterations) and iterations > 0):
        raise RecordFormatError("iterations must be a positive number")
    het = _get(directives, "het_components", int)
    if het is not None and not -MAX_RECORD_INT <= het <= MAX_RECORD_INT:
        raise RecordFormatError("het_components is out of range")
    claimed_uid = _get(document, "claimed_uid", int)
    if claimed_uid is not None and not 0 <= claimed_uid < 2**32:
        raise RecordFormatError("claimed_uid is not a uid")
    source = _opt_str(script, "source", 16)
    if source is not None and source not in ("file", "stdin", "wrap"):
        raise RecordFormatError(f"unknown script source {source[:20]!r}")
    sha = _opt_str(script, "sha256", 64)
    group = _opt_str(document, "recurrence_group", 64)
    for key, value in (("script.sha256", sha), ("recurrence_group", group)):
        if value is not None and (len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value)):
            raise RecordFormatError(f"{key} is not a sha256 hex digest")
    text = _get(script, "text", str)
    truncated = _get(script, "truncated", bool)
    values = {key: _positive_int(asrpt, key) for key in _ASRPT_INT_FIELDS}
    tensor_auto = _get(asrpt, "parallel_tensor_auto", bool)
    return SpoolRecord(
        path=path,
        owner_uid=owner_uid,
        owner_name=owner_name,
        file_id=file_id,
        spooled_at_s=spooled_at_s,
        format_version=version,
        slurm_job_id=job_id,
        cluster=_opt_str(document, "cluster", 256),
        submit_time_s=None if submit_time is None else float(submit_time),
        cwd=_opt_str(document, "cwd"),
        argv=_str_tuple(document.get("argv"), "argv"),
        script_source=source,
        script_path=_opt_str(script, "path"),
        script_sha256=sha,
        script_text=text,
        script_truncated=bool(truncated),
        recurrence_group=group,
        model_name=_opt_str(asrpt, "model", MAX_NAME_CHARS),
        workload_class=_opt_str(asrpt, "workload_class", MAX_NAME_CHARS),
        iterations_hint=None if iterations is None else float(iterations),
        serve_model=_opt_str(asrpt, "serve_model", MAX_NAME_CHARS),
        parallel_tensor_auto=True if tensor_auto else None,
        sbatch_options=dict(sbatch_options),
        script_args=_str_tuple(directives.get("script_args"), "script_args"),
        het_components=het if het is not None and het >= 1 else 1,
        claimed_user=_opt_str(document, "claimed_user", 256),
        claimed_uid=claimed_uid,
        hostname=_opt_str(document, "hostname", 256),
        wrapper_version=_opt_str(document, "wrapper_version", 64),
        **values,
    )


# ---- deciding -----------------------------------------------------------------------------


def accept_record(
    record: SpoolRecord,
    slurm_user_of_job: Callable[[str], str | None],
    *,
    now_s: float | None = None,
    max_pending_age_s: float = DEFAULT_MAX_PENDING_AGE_S,
    age_s: float | None = None,
) -> bool:
    """True if the record may be stored: its file's owner is the user Slurm reports for its job.

    Side effects: a record whose owner differs from Slurm's user (or has no passwd entry) is
    logged and moved to ``rejected/``; a record for an unknown job stays in the spool until it
    is older than ``max_pending_age_s``, then is discarded the same way. An accepted record
    stays in the spool until :func:`remove`.

    Parameters
    ----------
    record
        From :func:`read_spool`.
    slurm_user_of_job
        ``job_id -> user name`` as Slurm reports it (squeue, or sacct for finished jobs), or
        None if Slurm does not know the job (yet). For an array or heterogeneous job the id
        is the one sbatch printed (the array's or the leader's).
    now_s
        The current time, epoch seconds (default: the clock).
    max_pending_age_s
        How long, seconds since the file appeared, a record may wait for Slurm to know its job.
    age_s
        How long it has waited, if the caller keeps a clock that survives wall-clock steps
        (the daemon's :class:`asrpt.daemon.spool_ages.SpoolWaitAges`); default: by the file's
        change time and ``now_s``.

    Returns
    -------
    bool
        True to store the record; False if it was discarded or must wait.
    """
    slurm_user = slurm_user_of_job(record.slurm_job_id)
    context = {"job_id": record.slurm_job_id, "owner_uid": record.owner_uid, "path": record.path}
    if slurm_user is None:
        if age_s is None:
            age_s = (time.time() if now_s is None else now_s) - record.spooled_at_s
        if age_s > max_pending_age_s:
            logger.warning(
                "discarding spool record %s: Slurm has not reported job %s in %.0f s",
                record.path,
                record.slurm_job_id,
                age_s,
                extra={"action": "spool_expired", **context},
            )
            reject(record, f"job {record.slurm_job_id} unknown to Slurm after {age_s:.0f} s")
        return False
    if record.owner_name is None or record.owner_name != slurm_user:
        logger.warning(
            "discarding spool record %s: written by %s (uid %d) but Slurm says job %s belongs to %s",
            record.path,
            record.owner_name or "an unknown user",
            record.owner_uid,
            record.slurm_job_id,
            slurm_user,
            extra={"action": "spool_forged", "slurm_user": slurm_user, **context},
        )
        reject(record, f"owner {record.owner_name or record.owner_uid} is not {slurm_user}, the job's user")
        return False
    return True


def remove(record: SpoolRecord) -> bool:
    """Delete a stored record's file; call it only after the record is safely stored.

    Returns
    -------
    bool
        False if the file is gone or was replaced since it was read (a replaced file is a
        new record, read in the next cycle), True if it was deleted.
    """
    try:
        st = os.lstat(record.path)
        # The inode number alone can be reused at once by a new file; the ctime cannot.
        if (st.st_dev, st.st_ino, st.st_ctime_ns) != record.file_id:
            return False
        os.unlink(record.path)
    except FileNotFoundError:
        return False
    return True


def reject(record: SpoolRecord, reason: str) -> None:
    """Move a record out of the spool into ``rejected/`` (or delete it)."""
    _discard(os.path.dirname(record.path), os.path.basename(record.path), reason)


def set_aside(record: Any, reason: str) -> bool:
    """Move a valid record the daemon could not store into ``bad/`` (never pruned), so that it
    neither fails every cycle nor is lost; False (the file stays) when ``bad/`` is unusable."""
    directory, name = os.path.dirname(record.path), os.path.basename(record.path)
    target_dir = _rejected_dir(directory, spool.BAD_DIR)
    logger.error("setting spool record %s aside in %s/: %s", record.path, spool.BAD_DIR, reason,
                 extra={"action": "spool_bad", "path": record.path})
    if target_dir is None:
        return False
    target = os.path.join(target_dir, name)
    if os.path.lexists(target):
        target = os.path.join(target_dir, f"{name}.{time.time_ns()}")
    try:
        os.rename(record.path, target)
    except FileNotFoundError:
        return False
    except OSError as exc:
        logger.warning("cannot move %s to %s: %s", record.path, target_dir, exc.strerror)
        return False
    return True


def to_submission_record(record: SpoolRecord) -> SubmissionRecord:
    """The repository's :class:`~asrpt.db.repository.SubmissionRecord` for an accepted record.

    User and uid are the file owner's; the submit time is when the file appeared (the
    kernel's clock, not the record's); Slurm's own submit time replaces it when the daemon
    records what Slurm reports. Identity fields the wrapper cannot know for sure (job name,
    account, partitions, resources, time limit: ``SBATCH_*`` variables and defaults also set
    them) are left None for Slurm to fill.
    """
    if record.owner_name is None:
        raise ValueError(f"{record.path}: the owner uid {record.owner_uid} has no user name")
    return SubmissionRecord(
        slurm_job_id=record.slurm_job_id,
        user=record.owner_name,
        uid=record.owner_uid,
        submit_time_s=record.spooled_at_s,
        source="wrapper",
        parallel_data=record.parallel_data,
        parallel_pipeline=record.parallel_pipeline,
        parallel_tensor=record.parallel_tensor,
        micro_batches=record.micro_batches,
        model_name=record.model_name,
        workload_class=record.workload_class,
        script_hash=record.script_sha256,
        recurrence_group=record.recurrence_group,
        command=record.command,
        iterations_hint=record.iterations_hint,
        serve_model=record.serve_model,
        parallel_tensor_auto=record.parallel_tensor_auto,
    )


# ---- discarding ---------------------------------------------------------------------------


def _rejected_dir(directory: str, name: str = spool.REJECTED_DIR) -> str | None:
    """``directory/rejected`` (or ``name``) if it is safe to move files into, creating it if needed."""
    path = os.path.join(directory, name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        logger.warning("cannot create %s: %s; deleting refused records instead", path, exc.strerror)
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        logger.warning(
            "%s is not a directory owned by uid %d and writable by it alone; deleting refused records instead",
            path,
            os.geteuid(),
            extra={"action": "spool_rejected_unsafe"},
        )
        return None
    return path


def _discard(directory: str, name: str, reason: str) -> None:
    path = os.path.join(directory, name)
    target_dir = _rejected_dir(directory)
    logger.warning("refusing spool file %s: %s", path, reason, extra={"action": "spool_reject", "path": path})
    try:
        if target_dir is not None:
            target = os.path.join(target_dir, name)
            if os.path.lexists(target):
                target = os.path.join(target_dir, f"{name}.{time.time_ns()}")
            os.rename(path, target)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.EPERM) and target_dir is None:
            logger.warning("cannot delete %s: %s", path, exc.strerror)
        else:
            logger.warning("cannot move %s out of the spool: %s", path, exc.strerror)


def _prune_rejected(directory: str, now: float, max_age_s: float) -> None:
    path = os.path.join(directory, spool.REJECTED_DIR)
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            entry_st = entry.stat(follow_symlinks=False)
            if now - entry_st.st_ctime > max_age_s and not stat.S_ISDIR(entry_st.st_mode):
                os.unlink(entry.path)
        except OSError:
            continue
