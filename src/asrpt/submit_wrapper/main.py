"""``asrpt-sbatch``: a drop-in ``sbatch`` that records every submission and never blocks one.

A site puts it first on ``PATH`` under the name ``sbatch`` (a symlink to the console script).
It runs the real sbatch (an absolute path from :mod:`~asrpt.submit_wrapper.config`) with the
user's arguments unchanged, passes stdout through as it arrives and stderr untouched (sbatch
inherits it), exits with sbatch's status (or dies of the same signal), and, once sbatch has
printed the new job id, writes one record into the spool (:mod:`~asrpt.submit_wrapper.spool`).

Fail open: any error of ours (bad ``#ASRPT`` value, unreadable configuration, unwritable spool)
ends up in at most one ``asrpt-sbatch: warning: ...`` line on stderr (after sbatch's own
output, or before it when sbatch is exec'd), and the submission happens exactly as asked. If
our error comes before sbatch runs, the real sbatch is exec'd in our place with the original
arguments.

Transparency details that cost a few lines each:

* the child gets the environment the wrapper was started with, read back from
  ``/proc/self/environ``: the Python runtime itself may add ``LC_CTYPE=C.UTF-8`` (PEP 538
  locale coercion) to ``os.environ``, and sbatch would export that into the job;
* sbatch is run with the signal dispositions we inherited (:func:`inherited_ignored`):
  ``SIGPIPE`` and ``SIGXFSZ``, which Python ignores, are reset to their defaults, a signal the
  caller ignored stays ignored; a write to stdout that fails with EPIPE or EFBIG makes us die
  of SIGPIPE or SIGXFSZ, as sbatch would have;
* sbatch's ``argv[0]`` is the name we were invoked by (:func:`invoked_name`), not its path;
* a script on stdin is read only when the command line is fully understood and stdin is a
  pipe or a file (a terminal is left to sbatch), and handed to sbatch unchanged: a regular
  file is read with ``pread`` so its offset does not move, a pipe is copied through to
  sbatch only once sbatch reads its stdin (:class:`StdinFeeder`), so a command line sbatch
  rejects leaves it unread;
* ``--help``, ``--usage``, ``--version``, ``--test-only`` and ``--quiet`` (which prints no job
  id) simply exec the real sbatch: nothing to record;
* while sbatch runs, ``SIGINT``/``SIGQUIT`` (sent by the terminal to both processes) are
  ignored by the wrapper and ``SIGTERM``/``SIGHUP`` are forwarded to sbatch.

Start-up time is the cost every user pays on every submission, so this module imports only
the standard library, and most of it after sbatch has been started (the record is prepared
while sbatch talks to slurmctld). It must never import numpy, scikit-learn, SQLAlchemy or
networkx (a test and an import-linter contract check this). pip's console script itself
spends more than the wrapper does (``site`` and ``import re``); :mod:`.launcher` writes a
lean launcher for sites that want that time back (bench/README.md has the figures).
"""

from __future__ import annotations

import _thread
import os
import stat
import sys
import time

try:
    # The C module behind ``signal``; the Python module adds only enum conversions, and
    # building those enums costs about a millisecond at every start.
    import _signal as signal
except ImportError:  # pragma: no cover - other Python implementations
    import signal  # type: ignore[no-redef]

from asrpt.submit_wrapper import directives
from asrpt.submit_wrapper.config import (
    DEFAULT_REAL_SBATCH,
    WrapperConfig,
    check_real_sbatch,
    load_wrapper_config,
)

PROG = "asrpt-sbatch"
#: Scripts larger than this are not read for the record (sbatch's own default limit is 4 MB).
MAX_SCRIPT_READ_BYTES = 4 * 1024 * 1024
#: Longest warning line.
MAX_WARNING_CHARS = 800

_SUBMITTED = "Submitted batch job "


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _is_word(text: str) -> bool:
    return bool(text) and not any(ch.isspace() for ch in text)


def parse_job_id(output: bytes) -> tuple[str, str | None] | None:
    """(job id, cluster) from the first line of sbatch's stdout, or None.

    Plain: ``Submitted batch job 42`` (``... on cluster X`` with ``--clusters``);
    ``--parsable``: ``42`` or ``42;X``. An array job or a heterogeneous job prints one id.
    (String methods, not regular expressions: compiling a pattern costs start-up time.)
    """
    line = output.split(b"\n", 1)[0].decode("ascii", "replace").strip()
    if line.startswith(_SUBMITTED):
        job, on_cluster, cluster = line[len(_SUBMITTED) :].partition(" on cluster ")
    else:
        job, on_cluster, cluster = line.partition(";")
    if not _is_number(job) or (on_cluster and not _is_word(cluster)):
        return None
    return job, (cluster if on_cluster else None)


class Warnings:
    """Collects our problems; prints them as one line, once."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.done = False

    def add(self, message: str) -> None:
        self.messages.append(" ".join(str(message).split()))

    def flush(self) -> None:
        if self.done or not self.messages:
            return
        self.done = True
        text = "; ".join(self.messages)
        if len(text) > MAX_WARNING_CHARS:
            text = text[: MAX_WARNING_CHARS - 3] + "..."
        try:
            os.write(2, f"{PROG}: warning: {text}\n".encode("utf-8", "replace"))
        except OSError:
            pass


def original_environ() -> dict[bytes, bytes]:
    """The environment this process was started with (see the module docstring)."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return dict(os.environb)
    env: dict[bytes, bytes] = {}
    for entry in data.split(b"\0"):
        key, eq, value = entry.partition(b"=")
        if eq and key and key not in env:  # getenv() returns the first of duplicates
            env[key] = value
    return env


#: The shell launcher's path, when it started us (set by :func:`main`).
_SELF_PATHS_EXTRA: list[str] = []


def _self_paths() -> list[str]:
    paths = [os.path.abspath(__file__), *_SELF_PATHS_EXTRA]
    if sys.argv and sys.argv[0]:
        paths.append(sys.argv[0])
    return paths


def _std_fds_open() -> bool:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return False
    return True


def _memfd(data: bytes) -> int:
    """A readable, seekable fd holding ``data`` at offset 0 (inheritable by the child)."""
    try:
        fd = os.memfd_create("asrpt-sbatch-stdin")  # close-on-exec: only its dup2 copy is inherited
    except (AttributeError, OSError):
        fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def invoked_name(argv0: str | None) -> str:
    """The ``argv[0]`` to give the real sbatch: the name the user invoked us by.

    sbatch prints its ``argv[0]`` in getopt's messages (``sbatch: unrecognized option ...``) and
    Slurm stores it in the job's SubmitLine, so it must be what the user typed, not the real
    path. A ``#!`` script cannot see that name: the kernel replaces ``argv[0]`` by the path
    the shell found on ``PATH`` (``sbatch`` becomes ``/usr/local/bin/sbatch``). So an absolute
    path that is exactly where a ``PATH`` search for its base name leads is taken to have been
    typed as the base name; any other form (``./sbatch``, ``bin/sbatch``) is kept as it is.
    """
    if not argv0:
        return "sbatch"
    if os.path.abspath(argv0) == os.path.abspath(__file__):
        return "sbatch"  # python -m asrpt.submit_wrapper.main
    if not argv0.startswith("/"):
        return argv0
    base = argv0.rpartition("/")[2]
    for folder in os.environ.get("PATH", "").split(":"):
        candidate = f"{folder or '.'}/{base}"
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return base if os.path.normpath(candidate) == os.path.normpath(argv0) else argv0
    return argv0


#: The ``argv[0]`` sbatch is run with (set by :func:`main`).
_ARGV0 = ["sbatch"]

#: Signals whose disposition we change while sbatch runs, and those Python itself ignores.
_HANDLED_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)
#: The signals our caller left ignored (set by :func:`main` from :func:`inherited_ignored`).
_IGNORED: set[int] = set()


#: Set by the asrpt-sbatch shell launcher (bin/asrpt-sbatch), which runs before Python: the
#: hexadecimal SigIgn mask of /proc/self/status, and the name the launcher was invoked by.
#: Both are removed from the environment sbatch gets.
LAUNCHER_SIGIGN_ENV = "ASRPT_SBATCH_SIGIGN"
LAUNCHER_ARGV0_ENV = "ASRPT_SBATCH_ARGV0"
_LAUNCHER_ENV = (LAUNCHER_SIGIGN_ENV, LAUNCHER_ARGV0_ENV)


def take_launcher_environ() -> dict[str, str]:
    """Remove and return the launcher's variables (see :data:`LAUNCHER_SIGIGN_ENV`)."""
    return {name: os.environ.pop(name) for name in _LAUNCHER_ENV if name in os.environ}


def inherited_ignored(sigign_hex: str | None = None) -> set[int]:
    """The signals of interest that the caller left ignored (``nohup``, ``trap '' INT``).

    sbatch must get exactly the dispositions we were started with: an ignored signal stays
    ignored, everything else is at its default (exec resets caught ones). Python leaves every
    disposition as inherited, except that it installs its SIGINT handler only over SIG_DFL (an
    ignored SIGINT stays ignored: ``getsignal`` tells) and ignores SIGPIPE and SIGXFSZ before
    any code of ours runs, so their inherited state is lost to us. The shell launcher, which
    runs before Python, reads it and passes its SigIgn mask (``sigign_hex``); without one
    (``python -m``, a launcher of ``asrpt.submit_wrapper.launcher``) the default is assumed
    for those two. Must be called before we install any handler.
    """
    ignored = set()
    for sig in _HANDLED_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            ignored.add(sig)
    try:
        mask = int((sigign_hex or "").strip(), 16) if (sigign_hex or "").strip() else 0
    except ValueError:
        mask = 0
    for sig in (*_HANDLED_SIGNALS, *_PYTHON_IGNORES):
        if mask >> (int(sig) - 1) & 1:
            ignored.add(sig)
    return ignored


def _sigdef() -> tuple[int, ...]:
    """The signals Python ignores that sbatch must get at their default."""
    return tuple(sig for sig in _PYTHON_IGNORES if sig not in _IGNORED)


def exec_real(real: str, args: list[str], env: dict[bytes, bytes], stdin_data: bytes | None, warnings: Warnings) -> int:
    """Replace this process with the real sbatch (returns only if exec fails)."""
    warnings.flush()
    try:
        if stdin_data is not None:
            os.dup2(_memfd(stdin_data), 0)
        for sig in _sigdef():
            signal.signal(sig, signal.SIG_DFL)
        os.execve(real, [_ARGV0[0], *args], env)
    except OSError as exc:
        os.write(2, f"{PROG}: error: cannot run {real}: {exc.strerror or exc}\n".encode("utf-8", "replace"))
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 126  # pragma: no cover - execve does not return


def spawn(real: str, argv: list[str], env: dict[bytes, bytes], dup2: list[tuple[int, int]]) -> int:
    """Start ``real`` as our child with the dispositions we inherited; return its pid.

    fork + exec, not ``posix_spawn``: glibc's posix_spawn (2.36) leaves its internal signals
    32 and 33 ignored in the child, and an ignored signal stays ignored across exec. Raises
    OSError if the exec fails.
    """
    report_r, report_w = os.pipe()  # close-on-exec: EOF tells that the exec succeeded
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage cannot follow it)
        code = 0
        try:
            os.close(report_r)
            for fd, target in dup2:
                os.dup2(fd, target)
            for sig in _sigdef():
                signal.signal(sig, signal.SIG_DFL)
            # Our handlers (caught signals) are reset to SIG_DFL by exec itself.
            os.execve(real, argv, env)
        except BaseException as exc:
            code = getattr(exc, "errno", None) or 0
        try:
            os.write(report_w, str(code or 8).encode())  # ENOEXEC if we have no errno
        finally:
            os._exit(127)
    os.close(report_w)
    try:
        report = b""
        while True:
            chunk = os.read(report_r, 32)
            if not chunk:
                break
            report += chunk
    finally:
        os.close(report_r)
    if report:
        os.waitpid(pid, 0)
        code = int(report)
        raise OSError(code, os.strerror(code))
    return pid


def take_stdin(may_feed: bool) -> tuple[bytes | None, bool]:
    """The script sbatch will read from stdin if we can see it harmlessly, and whether to feed it.

    Returns (data, feed). A regular file is read with ``pread`` (offset unchanged). A pipe or
    socket is not read here: with ``feed`` (only when the command line is fully understood)
    a :class:`StdinFeeder` hands it to sbatch once sbatch reads it. A terminal or device is
    left alone.
    """
    st = os.fstat(0)
    if stat.S_ISREG(st.st_mode):
        offset = os.lseek(0, 0, os.SEEK_CUR)
        return os.pread(0, MAX_SCRIPT_READ_BYTES + 1, offset), False
    return None, may_feed and (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode))


#: read, pread64, readv, preadv, preadv2 by machine (``/proc/PID/syscall`` gives the number).
_READ_SYSCALLS = {
    "x86_64": (b"0", b"17", b"19", b"295", b"327"),
    "aarch64": (b"63", b"65", b"67", b"69", b"286"),
}
#: sbatch blocked this long in a system call on fd 0 that is not one of those reads (a way of
#: reading stdin we do not know): the feeder starts copying anyway.
STDIN_WAIT_FALLBACK_S = 2.0
#: Whatever sbatch seems to do, after this long the feeder starts copying (a hung submission
#: is worse than a script read that sbatch then does not use). Waiting is cheap: a busy or
#: sleeping sbatch (loading its configuration, a slow controller) is not reading stdin.
STDIN_WAIT_MAX_S = 30.0
_GONE, _NOT_YET, _READING, _UNKNOWN, _ON_FD0 = range(5)


def _proc_shows_syscalls() -> bool:
    """Whether /proc can show what a process waits in; without it a missing file would read as
    "sbatch is gone" and its piped script would never reach it."""
    return os.path.exists("/proc/self/syscall")


def _stdin_state(pid: int, reads: tuple[bytes, ...], depth: int = 0) -> int:
    """Whether ``pid`` (or one of its children) is blocked reading its fd 0."""
    try:
        with open(f"/proc/{pid}/syscall", "rb") as handle:
            fields = handle.read().split()
    except FileNotFoundError:
        return _GONE
    except OSError:
        return _UNKNOWN
    if len(fields) >= 2 and fields[1] == b"0x0" and fields[0] not in (b"running", b"-1"):
        return _READING if fields[0] in reads else _ON_FD0
    if depth == 0:  # a shell script standing in for sbatch reads through a child (cat)
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as handle:
                children = handle.read().split()
        except OSError:
            children = []
        for kid in children:
            if _stdin_state(int(kid), reads, 1) == _READING:
                return _READING
    return _NOT_YET


class StdinFeeder:
    """Copies our stdin (a pipe or socket) into sbatch's stdin, keeping the bytes for the record.

    sbatch validates its command line before it reads the script: ``sbatch --time=bad`` or an
    option this Slurm does not know fails at once and leaves stdin unread (``ssh host sbatch
    --time=bad`` does not wait for EOF). So nothing is read from our stdin until sbatch blocks
    reading its own (seen in ``/proc/PID/syscall``): if sbatch exits first, stdin stays
    untouched. sbatch then gets the bytes unchanged, as they come. Runs in a thread.
    """

    def __init__(self, feed_fd: int, pid: int) -> None:
        self.feed_fd = feed_fd
        self.pid = pid
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.stop = False  # set once sbatch has been reaped
        self.done = _thread.allocate_lock()
        self.done.acquire()

    def run(self) -> None:
        try:
            if self._wait_until_sbatch_reads():
                self._copy()
        except BaseException:  # pragma: no cover - defensive: never take the wrapper down
            pass
        finally:
            try:
                os.close(self.feed_fd)  # sbatch's EOF
            except OSError:
                pass
            self.done.release()

    def _wait_until_sbatch_reads(self) -> bool:
        reads = _READ_SYSCALLS.get(os.uname().machine)
        if reads is None or not _proc_shows_syscalls():
            return True  # nothing to watch (no /proc in a chroot or container): copy at once
        started_s = time.monotonic()
        on_fd0_since_s: float | None = None
        delay = 0.0002
        while not self.stop:
            state = _stdin_state(self.pid, reads)
            now_s = time.monotonic()
            if state == _GONE:
                return False
            if state in (_READING, _UNKNOWN) or now_s - started_s > STDIN_WAIT_MAX_S:
                return True
            if state == _ON_FD0:
                on_fd0_since_s = now_s if on_fd0_since_s is None else on_fd0_since_s
                if now_s - on_fd0_since_s > STDIN_WAIT_FALLBACK_S:
                    return True
            else:
                on_fd0_since_s = None
            time.sleep(delay)
            delay = min(delay * 2, 0.002)
        return False

    def _copy(self) -> None:
        while True:
            try:
                chunk = os.read(0, 1 << 16)
            except OSError:
                return  # sbatch gets what we got, as it would have
            if not chunk:
                self.complete = True
                return
            if self.size <= MAX_SCRIPT_READ_BYTES:
                self.chunks.append(chunk)
                self.size += len(chunk)
            try:
                _write_all(self.feed_fd, chunk)
            except OSError:
                return  # sbatch stopped reading

    def result(self, timeout_s: float) -> bytes | None:
        """The whole script once sbatch had all of it, or None (not read, cut short, too big)."""
        if not self.done.acquire(True, timeout_s):
            return None
        self.done.release()
        if not self.complete or self.size > MAX_SCRIPT_READ_BYTES:
            return None
        return b"".join(self.chunks)


def read_script_file(path: str) -> bytes | None:
    """The script's bytes if it is a readable regular file of sane size, else None.

    Never opens anything but a regular file: ``sbatch <(generate)`` passes a pipe, and reading
    it would steal the script from sbatch.
    """
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCRIPT_READ_BYTES:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks = []
            remaining = MAX_SCRIPT_READ_BYTES + 1
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            data = b"".join(chunks)
            return None if len(data) > MAX_SCRIPT_READ_BYTES else data
        finally:
            os.close(fd)
    except OSError:
        return None  # sbatch reports unreadable scripts itself


class Recorder:
    """Prepares the record while sbatch runs, writes it once the job id is known."""

    def __init__(self, config: WrapperConfig, args: list[str], argv_info: directives.ArgvInfo, warnings: Warnings) -> None:
        self.config = config
        self.args = args
        self.argv_info = argv_info
        self.warnings = warnings
        self.submit_time_s = time.time()
        self.partial: dict[str, object] | None = None
        self.path: str | None = None

    def prepare(self, script_bytes: bytes | None, stdin_seen: bool) -> None:
        from asrpt import __version__
        from asrpt.submit_wrapper import spool

        info = self.argv_info
        source = info.script_source
        text: str | None = None
        script: dict[str, object] = {"source": source, "path": None, "size_bytes": None, "sha256": None, "text": None, "truncated": False}
        if source == "wrap":
            text = info.wrap or ""
            script_bytes = text.encode("utf-8", "surrogateescape")
        elif source == "file":
            script["path"] = spool.clean_text(info.script or "")
            script_bytes = read_script_file(info.script or "")
        elif not stdin_seen:
            script_bytes = None  # a terminal, or a pipe we did not dare to read
        recurrence_group: str | None = None
        script_info = None
        if script_bytes is not None and len(script_bytes) <= MAX_SCRIPT_READ_BYTES:
            if text is None:
                text = spool.decode_script(script_bytes)
            else:
                text = spool.clean_text(text)
            script["size_bytes"] = len(script_bytes)
            script["sha256"] = sha256_hex(script_bytes)
            script["text"], script["truncated"] = spool.truncate_utf8(text, self.config.script_text_limit_bytes)
            if source == "wrap":
                normalised = directives.wrap_recurrence_text(text)
            else:
                script_info = directives.scan_script(text)
                normalised = directives.recurrence_text(text, script_info)
                where = "stdin" if source == "stdin" else (info.script or "")
                for message in script_info.warnings:
                    self.warnings.add(f"{where} {message}")
                workload_class = script_info.asrpt.get("workload_class")
                if isinstance(workload_class, str):
                    problem = directives.workload_class_problem(workload_class, f"{where} #ASRPT class")
                    if problem:
                        self.warnings.add(problem)
            recurrence_group = sha256_hex(normalised.encode("utf-8"))
        sbatch_options: dict[str, object] = {}
        if script_info is not None:
            sbatch_options.update(script_info.components[0])
        sbatch_options.update(info.options)
        comment = sbatch_options.get("comment")
        if isinstance(comment, str):
            for problem in directives.comment_problems(comment):
                self.warnings.add(problem)
        directive_record = {
            "sbatch": {spool.clean_text(k): (v if v is True else spool.clean_text(str(v))) for k, v in sbatch_options.items()},
            "het_components": max(info.components, len(script_info.components) if script_info else 1),
            "script_args": spool.clean_argv(info.script_args)[0],
            "asrpt": dict(script_info.asrpt) if script_info else {},
            "warnings": list(script_info.warnings) if script_info else [],
            "problems": [spool.clean_text(p) for p in info.problems + (script_info.problems if script_info else [])],
        }
        self.partial = {
            "submit_time_s": self.submit_time_s,
            "cwd": _cwd(),
            "script": script,
            "recurrence_group": recurrence_group,
            "directives": directive_record,
            "claimed_user": os.environ.get("USER") or os.environ.get("LOGNAME"),
            "claimed_uid": os.getuid(),
            "hostname": os.uname().nodename,
            "wrapper_version": __version__,
        }

    def write(self, job_id: str, cluster: str | None) -> None:
        from asrpt.submit_wrapper import spool

        if self.partial is None or not self.config.spool_dir:
            return
        record = spool.build_record(job_id=job_id, cluster=cluster, args=self.args, **self.partial)  # type: ignore[arg-type]
        payload = spool.encode_record(record)
        name = spool.record_name(job_id, time.time_ns(), os.getpid(), os.urandom(3).hex())
        try:
            self.path = spool.write_record_bounded(self.config.spool_dir, name, payload)
        except spool.WriteTimeout as exc:
            self.warnings.add(f"job {job_id} was submitted but not yet recorded in {self.config.spool_dir}: {exc.strerror}")
        except OSError as exc:
            hint = ""
            if isinstance(exc, FileNotFoundError):
                hint = f" (create it: install -d -m 1777 {self.config.spool_dir})"
            self.warnings.add(f"job {job_id} was submitted but not recorded in {self.config.spool_dir}: {exc.strerror or exc}{hint}")


def sha256_hex(data: bytes) -> str:
    """hashlib's sha256 hex digest without importing hashlib (which loads OpenSSL: milliseconds)."""
    try:
        from _sha256 import sha256 as builtin  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as builtin  # type: ignore[no-redef]  # CPython >= 3.12
        except ImportError:
            from hashlib import sha256 as builtin  # type: ignore[no-redef]
    return builtin(data).hexdigest()


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return os.environ.get("PWD", "")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``asrpt-sbatch``; returns sbatch's exit status (or execs sbatch)."""
    full = sys.argv if argv is None else argv
    args = list(full[1:])
    warnings = Warnings()
    launcher = take_launcher_environ()
    try:
        _IGNORED.clear()
        _IGNORED.update(inherited_ignored(launcher.get(LAUNCHER_SIGIGN_ENV)))
    except Exception:  # pragma: no cover - defensive
        pass
    launcher_path = launcher.get(LAUNCHER_ARGV0_ENV)
    if launcher_path:
        _SELF_PATHS_EXTRA[:] = [launcher_path]
    try:
        _ARGV0[0] = invoked_name(launcher_path or (full[0] if full else None))
    except Exception:  # pragma: no cover - defensive
        _ARGV0[0] = "sbatch"
    try:
        env = original_environ()
    except Exception:  # pragma: no cover - defensive: fall back to Python's view
        env = dict(os.environb)
    for name in _LAUNCHER_ENV:
        env.pop(name.encode(), None)
    try:
        config, problems = load_wrapper_config(os.environ, _self_paths())
    except Exception as exc:  # pragma: no cover - load_wrapper_config does not raise
        fallback = DEFAULT_REAL_SBATCH if check_real_sbatch(DEFAULT_REAL_SBATCH, _self_paths()) is None else None
        config, problems = WrapperConfig(real_sbatch=fallback, spool_dir=""), [f"configuration: {exc!r}"]
    for problem in problems:
        warnings.add(problem)
    real = config.real_sbatch
    if real is None:
        warnings.done = True
        text = "; ".join(warnings.messages) or "no real sbatch configured"
        os.write(2, f"{PROG}: error: cannot submit, no usable real sbatch: {text}\n".encode("utf-8", "replace"))
        return 1

    stdin_data: bytes | None = None
    feed = False
    try:
        if not config.spool_dir or not _std_fds_open():
            return exec_real(real, args, env, None, warnings)
        info = directives.parse_argv(args)
        if info.passthrough is not None:
            return exec_real(real, args, env, None, warnings)
        if info.script_source == "stdin":
            stdin_data, feed = take_stdin(may_feed=info.confident)
        recorder = Recorder(config, args, info, warnings)
    except Exception as exc:
        warnings.add(f"internal error before submitting: {exc!r}")
        return exec_real(real, args, env, None, warnings)

    # From here on sbatch runs as our child; nothing may stop us from waiting for it.
    child: list[int] = [0]
    early: list[int] = []  # signals to forward that came before sbatch was started

    def forward(signum: int, frame: object) -> None:
        if not child[0]:
            early.append(signum)
            return
        try:
            os.kill(child[0], signum)
        except OSError:
            pass

    def ignore(signum: int, frame: object) -> None:
        pass

    try:
        # A signal the caller ignored stays ignored, here and in sbatch (nohup sbatch --wait).
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if sig not in _IGNORED:
                signal.signal(sig, forward)
        for sig in (signal.SIGINT, signal.SIGQUIT):
            if sig not in _IGNORED:
                signal.signal(sig, ignore)
        read_fd, write_fd = os.pipe()
        actions = [(write_fd, 1)]
        feed_r, feed_w = os.pipe() if feed else (-1, -1)
        if feed:
            actions.append((feed_r, 0))
        try:
            child[0] = spawn(real, [_ARGV0[0], *args], env, actions)
        except BaseException:
            if feed:
                os.close(feed_w)
            raise
        finally:
            os.close(write_fd)
            if feed:
                os.close(feed_r)
        for signum in early:
            forward(signum, None)
    except Exception as exc:
        warnings.add(f"internal error starting {real}: {exc!r}")
        return exec_real(real, args, env, None, warnings)

    feeder: StdinFeeder | None = None
    if feed:
        feeder = StdinFeeder(feed_w, child[0])
        try:
            _thread.start_new_thread(feeder.run, ())
        except Exception as exc:  # pragma: no cover - no thread: sbatch gets EOF, as it would on a closed pipe
            feeder = None
            os.close(feed_w)
            warnings.add(f"internal error starting the stdin copy: {exc!r}")

    def prepare() -> None:
        try:
            data = stdin_data
            if feeder is not None:
                data = feeder.result(timeout_s=1.0)  # sbatch read all of it before printing the id
            recorder.prepare(data, stdin_seen=data is not None)
        except Exception as exc:
            recorder.partial = None
            warnings.add(f"internal error preparing the record: {exc!r}")

    if feeder is None:
        prepare()  # while sbatch talks to slurmctld

    head = bytearray()
    looked = False
    stdout_ok = True
    pending = 0  # the signal our write to stdout got instead of sbatch (EPIPE, EFBIG)
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        if stdout_ok:
            try:
                _write_all(1, chunk)
            except OSError as exc:
                stdout_ok = False  # keep draining so that sbatch never blocks on us
                pending = _signal_for_write_error(exc)
                if pending:
                    # sbatch, writing there itself, would have died of this signal now.
                    try:
                        os.kill(child[0], pending)
                    except OSError:
                        pass
        if not looked:
            head += chunk
            if b"\n" in head or len(head) > 4096:
                looked = True
                _record(recorder, head, warnings, prepare if feeder is not None else None)
    if not looked and head:
        _record(recorder, head, warnings, prepare if feeder is not None else None)
    os.close(read_fd)
    _, status = os.waitpid(child[0], 0)
    if feeder is not None:
        feeder.stop = True
    warnings.flush()
    if pending:
        return _die_of(pending)
    if os.WIFSIGNALED(status):
        return _die_of(os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _signal_for_write_error(exc: OSError) -> int:
    """The signal sbatch would have got for this failed write to stdout (0 for none).

    sbatch writes its stdout itself when run directly: a closed pipe (``sbatch | head -c0``)
    kills it with SIGPIPE (status 141 in a shell) and a file over ``ulimit -f`` with SIGXFSZ
    (153), unless the caller ignored those signals. Python ignores both, so we get EPIPE or
    EFBIG instead and must turn them back into the signal.
    """
    import errno

    sig = {errno.EPIPE: signal.SIGPIPE, errno.EFBIG: signal.SIGXFSZ}.get(exc.errno or 0, 0)
    return 0 if sig in _IGNORED else sig


def _die_of(sig: int) -> int:
    """Die of signal ``sig`` as sbatch did (returns 128 + sig only if we survive it)."""
    try:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    return 128 + sig


def _record(recorder: Recorder, head: bytes, warnings: Warnings, prepare: object = None) -> None:
    """Write the record if sbatch's first line names a job (a failed submission does not)."""
    try:
        job = parse_job_id(bytes(head))
        if job is not None:
            if callable(prepare):
                prepare()
            recorder.write(*job)
    except Exception as exc:
        warnings.add(f"internal error writing the record: {exc!r}")


if __name__ == "__main__":
    sys.exit(main())
