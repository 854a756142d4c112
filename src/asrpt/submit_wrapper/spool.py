"""Submission records: one JSON file per submission in a spool directory.

The spool is a local directory that every user may write to and nobody may tamper with
another's files in: sticky and world-writable like /tmp. Create it once, as root, on the host
where users submit and the daemon runs (the wrapper never creates it)::

    install -d -m 1777 -o root -g root /var/spool/asrpt
    install -d -m 0700 -o root -g root /var/spool/asrpt/rejected

Writing never waits: no lock, no network, no fsync, and the wrapper gives the write at most
:data:`WRITE_TIMEOUT_S` (:func:`write_record_bounded`), so even a frozen file system does not
hold the user up. The record is written to a hidden temp
file (``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600 whatever the umask) and renamed to its final
name, so a reader sees a whole record or nothing. The directory must be on a local file
system; on NFS a hung server would make the write wait.

A record (format version 1; every string is UTF-8, undecodable bytes replaced)::

    {
      "format": "asrpt-submission", "version": 1,
      "slurm_job_id": "42",              # from sbatch's output; "42" for "42;cluster" too
      "cluster": null,                   # "cluster" of "42;cluster" / "... on cluster X"
      "submit_time_s": 1764690000.123,   # the wrapper's clock, epoch seconds (untrusted)
      "cwd": "/home/alice/run",
      "argv": ["--parsable", "train.sh", "--lr", "3e-4"],   # sbatch's arguments, unchanged
      "argv_truncated": false,           # an argument longer than 8 KiB was cut
      "script": {
        "source": "file",                # file | stdin | wrap
        "path": "train.sh",              # as given (relative to cwd); null for stdin/wrap
        "size_bytes": 1234,              # null if the script was not read (a terminal, a
                                         # pipe such as <(...), unreadable, over 4 MiB)
        "sha256": "...",                 # of the exact script bytes (null if unread)
        "text": "#!/bin/bash\\n...",     # at most script_text_limit_bytes of it
        "truncated": false
      },
      "recurrence_group": "...",         # sha256 of the normalised script (see directives)
      "directives": {
        "sbatch": {"partition": "gpu", "gres": "gpu:a100:4", "parsable": true},
        "het_components": 1,
        "script_args": ["--lr", "3e-4"],
        "asrpt": {"model": "llama-7b", "workload_class": "llm", "parallel_data": 2,
                  "parallel_pipeline": 2, "parallel_tensor": 4, "micro_batches": 8,
                  "iterations": 100000},
                                         # a serving job: "serve_model": "llama-2-7b" (as
                                         # the user wrote it) and "parallel_tensor_auto": true
                                         # for tp=auto (instead of "parallel_tensor")
        "warnings": [],                  # what the user was warned about
        "problems": []                   # what the parser did not understand
      },
      "claimed_user": "alice",           # $USER as the wrapper saw it (untrusted)
      "claimed_uid": 1001,               # getuid() in the wrapper (untrusted)
      "hostname": "login1",
      "wrapper_version": "0.1.0"
    }

"sbatch" holds the options of the first job component, ``#SBATCH`` lines overridden by the
command line (as sbatch applies them; ``SBATCH_*`` environment variables are not read).
Nothing in a record is trusted by the daemon except through the file's owner; see
:mod:`asrpt.ingest.wrapper_spool`.
"""

from __future__ import annotations

import os
import time

FORMAT = "asrpt-submission"
FORMAT_VERSION = 1
#: Finished records end in this; temp files start with TEMP_PREFIX and are ignored by readers.
RECORD_SUFFIX = ".json"
TEMP_PREFIX = ".tmp-"
#: Readers refuse larger files; the wrapper keeps its records well below.
MAX_RECORD_BYTES = 1024 * 1024
#: Each argument is cut to this many characters in the record.
MAX_ARG_CHARS = 8192
MAX_ARGS = 4096
#: Name of the subdirectory the daemon moves refused records into.
REJECTED_DIR = "rejected"
#: Valid records the daemon could not store (a bug or a value its database refuses): moved
#: here for an admin to look at, never deleted, so no submission's history is lost.
BAD_DIR = "bad"


def clean_text(value: str) -> str:
    """Make ``value`` encodable as UTF-8 (argv and paths may hold undecodable bytes)."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def decode_script(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def truncate_utf8(text: str, limit_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit_bytes`` of UTF-8 without splitting a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text, False
    return encoded[:limit_bytes].decode("utf-8", "ignore"), True


def clean_argv(args: list[str]) -> tuple[list[str], bool]:
    truncated = len(args) > MAX_ARGS
    out = []
    for arg in args[:MAX_ARGS]:
        arg = clean_text(arg)
        if len(arg) > MAX_ARG_CHARS:
            arg = arg[:MAX_ARG_CHARS]
            truncated = True
        out.append(arg)
    return out, truncated


def record_name(job_id: str, time_ns: int, pid: int, token: str) -> str:
    """Final file name: sorts by time, names the job (for humans; readers trust the content
    and the owner, not the name)."""
    safe_id = "".join(ch for ch in job_id if ch.isalnum())[:32] or "unknown"
    return f"{time_ns}-{pid}-{token}-job{safe_id}{RECORD_SUFFIX}"


def write_record(spool_dir: str, name: str, payload: bytes) -> str:
    """Write ``payload`` as ``spool_dir/name`` atomically, mode 0600; return the path.

    Raises OSError (the caller turns it into the warning line).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(5):
        temp = os.path.join(spool_dir, f"{TEMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
        try:
            fd = os.open(temp, flags, 0o600)
        except FileExistsError:
            if attempt == 4:
                raise
            continue
        break
    try:
        try:
            # The umask may have removed the owner's bits; the mode must be exactly 0600.
            os.fchmod(fd, 0o600)
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)
        final = os.path.join(spool_dir, name)
        os.rename(temp, final)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    return final


#: How long the wrapper waits for a record to be written before it lets the user go.
WRITE_TIMEOUT_S = 0.5


class WriteTimeout(OSError):
    """The spool did not take the record in time (the write goes on in the background)."""


def write_record_bounded(spool_dir: str, name: str, payload: bytes, timeout_s: float = WRITE_TIMEOUT_S) -> str:
    """:func:`write_record` in a forked child, waited for at most ``timeout_s`` seconds.

    A frozen (``fsfreeze``) or hung file system blocks open/write/rename in the kernel, where
    no timeout reaches; a thread stuck there would also keep the process from exiting. The
    child closes every file descriptor but its report pipe first, so a stuck child holds
    nothing of the user's (``$(sbatch ...)`` reads stdout until EOF) and is simply left
    behind: it finishes the record if the file system comes back. Raises OSError as
    :func:`write_record` does, and :class:`WriteTimeout` when the time is up.
    """
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage cannot follow it)
        message = b"?"
        try:
            try:
                import _signal as signal
            except ImportError:
                import signal  # type: ignore[no-redef]
            for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
                if callable(signal.getsignal(sig)):  # the wrapper's handlers, not an inherited SIG_IGN
                    signal.signal(sig, signal.SIG_DFL)
            os.closerange(0, report_w)
            os.closerange(report_w + 1, 1 << 20)
            try:
                message = b"+" + os.fsencode(write_record(spool_dir, name, payload))
            except OSError as exc:
                message = b"-%d %s" % (exc.errno or 0, os.fsencode(exc.strerror or str(exc)))
        except BaseException:
            pass
        try:
            os.write(report_w, message)
        finally:
            os._exit(0)
    os.close(report_w)
    try:
        # Polling waitpid costs less than importing select; a record takes about a millisecond.
        deadline = time.monotonic() + timeout_s
        delay = 0.0001
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() >= deadline:
                raise WriteTimeout(0, f"the spool did not take the record within {timeout_s:g} s (a frozen or hung file system?); it is written when the file system answers")
            time.sleep(delay)
            delay = min(delay * 2, 0.005)
        report = os.read(report_r, 1 << 16)
    finally:
        os.close(report_r)
    if report.startswith(b"+"):
        return os.fsdecode(report[1:])
    if report.startswith(b"-"):
        code, _, text = report[1:].partition(b" ")
        errno_ = int(code or 0)
        if errno_ == 2:
            raise FileNotFoundError(errno_, text.decode("utf-8", "replace"))
        raise OSError(errno_, text.decode("utf-8", "replace"))
    raise OSError(0, "the process writing the record failed")


# ``json`` costs more to import than the whole record costs to write; records only hold
# None, bools, ints, finite floats, strings, lists and dicts with string keys, and this writes
# exactly what ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` would.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in range(0x20)}
_JSON_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\b"): "\\b", ord("\f"): "\\f"})


def to_json(value: object) -> str:
    """Compact JSON for a record (raises ValueError/TypeError for anything else)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return '"' + value.translate(_JSON_ESCAPES) + '"'
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value!r}")
        return float.__repr__(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(to_json(item) for item in value) + "]"
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, not {key!r}")
            parts.append(to_json(key) + ":" + to_json(item))
        return "{" + ",".join(parts) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def encode_record(record: dict[str, object]) -> bytes:
    return to_json(record).encode("utf-8", "replace")


def build_record(
    *,
    job_id: str,
    cluster: str | None,
    submit_time_s: float,
    cwd: str,
    args: list[str],
    script: dict[str, object],
    recurrence_group: str | None,
    directives: dict[str, object],
    claimed_user: str | None,
    claimed_uid: int,
    hostname: str,
    wrapper_version: str,
) -> dict[str, object]:
    """The record as a JSON-ready dict (see the module docstring for the fields)."""
    argv, argv_truncated = clean_argv(args)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "slurm_job_id": job_id,
        "cluster": cluster,
        "submit_time_s": submit_time_s,
        "cwd": clean_text(cwd),
        "argv": argv,
        "argv_truncated": argv_truncated,
        "script": script,
        "recurrence_group": recurrence_group,
        "directives": directives,
        "claimed_user": None if claimed_user is None else clean_text(claimed_user),
        "claimed_uid": claimed_uid,
        "hostname": clean_text(hostname),
        "wrapper_version": wrapper_version,
    }
