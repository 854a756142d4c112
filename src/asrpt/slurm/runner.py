"""The one place where asrpt runs a Slurm command.

Each run ends in one of three outcomes:

* ``ok``: exit status 0;
* ``unreachable``: Slurm could not be asked (slurmctld down or not answering, a timeout, no
  slurm.conf or munge, the command missing). The caller keeps its previous view and never
  concludes anything about jobs from it;
* ``malformed``: Slurm answered, but not with success (another non-zero exit, e.g.
  "Invalid job id specified"), or with output the caller cannot parse.

Slurm 24.11 answers some updates right after a submit or release with "Resource temporarily
unavailable"; a retry 0.5-3 s later works, so that message is retried here a few times with
a short backoff before it counts.
"""

from __future__ import annotations

import enum
import logging
import os
import subprocess
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from asrpt.exceptions import SlurmOutputMalformed, SlurmUnreachable

__all__ = ["Outcome", "RunResult", "SlurmRunner", "classify", "command_key"]

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"
    MALFORMED = "malformed"


#: stderr fragments (lower case) meaning slurmctld (or munge, or the config) was not reached.
UNREACHABLE_MARKERS: tuple[str, ...] = (
    "unable to contact slurm controller",
    "connection refused",
    "connect failure",
    "socket timed out",
    "communication connection failure",
    "zero bytes were transmitted or received",
    # 22.05's scontrol update/hold while slurmctld is down (after ~9 s of connect retries).
    "unexpected message received",
    "could not establish a configuration source",
    "unable to establish controller machine",
    "slurm_conf_init",
    "unable to process configuration file",
    "cannot stat file",
    "no such file or directory",
    "munge",
    "authentication failure",
    "slurmctld(primary) at",  # "scontrol ping": "... is DOWN"
    "transport endpoint is not connected",
    "network is unreachable",
)
#: The 24.11 transient answer that is retried.
RETRY_MARKER = "resource temporarily unavailable"


def classify(returncode: int, stderr: str) -> Outcome:
    """The outcome of a finished command from its exit status and stderr."""
    if returncode == 0:
        return Outcome.OK
    text = (stderr or "").lower()
    if any(marker in text for marker in UNREACHABLE_MARKERS):
        return Outcome.UNREACHABLE
    return Outcome.MALFORMED


def command_key(argv: Sequence[str]) -> str:
    """"scontrol update", "scontrol hold", "squeue", ...: what the counters count."""
    name = os.path.basename(argv[0]) if argv else ""
    if name == "scontrol" and len(argv) > 1 and not argv[1].startswith("-"):
        return f"scontrol {argv[1]}"
    return name


@dataclass(frozen=True, slots=True)
class RunResult:
    argv: tuple[str, ...]
    outcome: Outcome
    #: None when the command did not finish (timeout) or could not be started.
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    #: 1 + the retries spent on "Resource temporarily unavailable".
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def evidence(self) -> str:
        """A one-line description for logs and error messages."""
        err = " ".join(self.stderr.split())
        if len(err) > 300:
            err = err[:300] + "..."
        rc = "no exit status" if self.returncode is None else f"exit {self.returncode}"
        return f"`{' '.join(self.argv)}` ({rc}, {self.duration_s:.2f} s): {err or '(no stderr)'}"

    def raise_for_outcome(self) -> None:
        """Raise SlurmUnreachable / SlurmOutputMalformed unless the outcome is ok."""
        if self.outcome is Outcome.UNREACHABLE:
            raise SlurmUnreachable(f"Slurm unreachable: {self.evidence()}")
        if self.outcome is Outcome.MALFORMED:
            raise SlurmOutputMalformed(f"Slurm command failed: {self.evidence()}")


class SlurmRunner:
    """Runs Slurm commands with a timeout, a fixed environment and three outcomes.

    Parameters
    ----------
    slurm_conf
        Path exported as ``SLURM_CONF`` to every command; None keeps the inherited one.
    bin_dir
        Directory of the Slurm commands; None or "" looks them up on ``PATH``.
    timeout_s
        Seconds before a command is killed and counted unreachable. Slurm 22.05 clients
        retry a dead controller for about 9 s before giving up, so keep it above that
        unless a quick verdict matters more.
    retries, retry_delay_s
        Extra attempts for "Resource temporarily unavailable", sleeping ``retry_delay_s``,
        then twice that, and so on.
    env
        Extra environment variables (tests put fake binaries on PATH this way).
    sleep
        Injected for tests.
    """

    def __init__(
        self,
        *,
        slurm_conf: str | None = None,
        bin_dir: str | None = None,
        timeout_s: float = 15.0,
        retries: int = 3,
        retry_delay_s: float = 0.5,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.slurm_conf = slurm_conf or None
        self.bin_dir = bin_dir or None
        self.timeout_s = timeout_s
        self.retries = retries
        self.retry_delay_s = retry_delay_s
        self._extra_env = dict(env or {})
        self._sleep = sleep
        #: Commands run so far, by :func:`command_key` (retries not counted twice).
        self.counts: Counter[str] = Counter()
        #: The last results, newest last.
        self.history: deque[RunResult] = deque(maxlen=256)

    def _env(self) -> dict[str, str] | None:
        if self.slurm_conf is None and not self._extra_env:
            return None
        env = dict(os.environ)
        env.update(self._extra_env)
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _resolve(self, argv: Sequence[str]) -> list[str]:
        argv = [str(a) for a in argv]
        if self.bin_dir and argv and os.sep not in argv[0]:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        return argv

    def run(self, argv: Sequence[str], *, timeout_s: float | None = None) -> RunResult:
        """Run ``argv`` (never through a shell) and classify the result; never raises for
        Slurm's failures."""
        if not argv:
            raise ValueError("empty argv")
        full = self._resolve(argv)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self.counts[command_key(argv)] += 1
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            result = self._run_once(full, timeout, started, attempt)
            if (
                result.returncode not in (0, None)
                and RETRY_MARKER in result.stderr.lower()
                and attempt <= self.retries
            ):
                delay = self.retry_delay_s * (2 ** (attempt - 1))
                log.info("Slurm busy, retrying in %.1f s: %s", delay, result.evidence(),
                         extra={"action": "slurm_retry"})
                self._sleep(delay)
                continue
            break
        self.history.append(result)
        if result.outcome is not Outcome.OK:
            log.debug("Slurm command %s: %s", result.outcome.value, result.evidence())
        return result

    def _run_once(self, argv: list[str], timeout: float, started: float, attempt: int) -> RunResult:
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return RunResult(
                tuple(argv), Outcome.UNREACHABLE, None, _text(exc.stdout),
                f"timed out after {timeout:g} s; {_text(exc.stderr)}".strip(),
                time.monotonic() - started, attempt,
            )
        except OSError as exc:  # missing command, not executable, ...
            return RunResult(
                tuple(argv), Outcome.UNREACHABLE, None, "", f"cannot run {argv[0]}: {exc}",
                time.monotonic() - started, attempt,
            )
        except ValueError as exc:  # a NUL in an argument: commands.py drops it from text, so only a
            # node list Slurm itself reported could carry one; that write alone is refused (free)
            return RunResult(
                tuple(argv), Outcome.MALFORMED, None, "", f"not run: an argument contains a NUL byte ({exc})",
                time.monotonic() - started, attempt,
            )
        return RunResult(
            tuple(argv), classify(proc.returncode, proc.stderr), proc.returncode,
            proc.stdout, proc.stderr, time.monotonic() - started, attempt,
        )


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


_WRITING_SUBCOMMANDS = frozenset({"update", "hold", "release", "requeue", "suspend", "resume"})


class DryRunRunner(SlurmRunner):
    """Reads Slurm as usual; every ``scontrol`` write is logged and reported as done, never
    run (``asrptd --dry-run``: see what the daemon would change, change nothing)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        #: The writes that would have been made, in order.
        self.suppressed: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout_s: float | None = None) -> RunResult:
        args = tuple(argv)
        if args and Path(args[0]).name == "scontrol" and len(args) > 1 and args[1] in _WRITING_SUBCOMMANDS:
            self.suppressed.append(args)
            log.info("dry run, not writing: %s", " ".join(args))
            return RunResult(argv=args, outcome=Outcome.OK, returncode=0, stdout="", stderr="", duration_s=0.0)
        return super().run(argv, timeout_s=timeout_s)
