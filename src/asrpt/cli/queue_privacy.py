"""Slurm's ``PrivateData=jobs`` for asrpt's queue views: who may see which jobs.

With ``PrivateData=jobs`` squeue shows a user only their own jobs; ``asrpt queue``, ``eta`` and
``explain`` follow it (root and the SlurmUser see everything), whether the CLI reads the
database or asrptd's Unix socket answers for the caller's uid, and the daemon's HTTP endpoint,
which cannot tell who asks, serves only aggregate counts.

Where the setting is read, first found wins: the slurm.conf asrpt is configured with
(``[slurm] slurm_conf``), ``$SLURM_CONF``, /etc/slurm/slurm.conf, then ``scontrol show config``
(configless clusters, run through :class:`asrpt.slurm.runner.SlurmRunner`). When none
answers, jobs count as private (fail closed). Not read:
``Include`` files of slurm.conf, and Slurm's AdminLevel operators/admins from accounting.
Standard library only: this is on the CLI's start-up path.
"""

from __future__ import annotations

import os
import pwd
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
SCONTROL_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class JobPrivacy:
    #: ``PrivateData`` contains ``jobs``.
    private_jobs: bool
    #: Uids that see every job: root and the SlurmUser.
    admin_uids: frozenset[int]
    #: Where the setting came from, for messages.
    source: str

    def sees_everything(self, uid: int) -> bool:
        return not self.private_jobs or uid in self.admin_uids

    def visible(self, rows: Iterable[Any], uid: int) -> list[Any]:
        """The rows (anything with ``.user``) the caller ``uid`` may see."""
        rows = list(rows)
        if self.sees_everything(uid):
            return rows
        name = user_name(uid)
        return [row for row in rows if name is not None and row.user == name]


PUBLIC = JobPrivacy(private_jobs=False, admin_uids=frozenset({0}), source="<default>")


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _uid_of(user: str | None) -> int | None:
    if not user:
        return None
    match = re.fullmatch(r"\s*([^\s(]+)\s*(?:\((\d+)\))?\s*", user)  # show config: "slurm(64030)"
    if match is None:
        return None
    if match.group(2):
        return int(match.group(2))
    if match.group(1).isdigit():
        return int(match.group(1))
    try:
        return pwd.getpwnam(match.group(1)).pw_uid
    except KeyError:
        return None


def _privacy(private_data: str | None, slurm_user: str | None, source: str) -> JobPrivacy:
    options = {o.strip().lower() for o in (private_data or "").split(",")}
    admins = {0}
    uid = _uid_of(slurm_user)
    if uid is not None:
        admins.add(uid)
    return JobPrivacy(private_jobs="jobs" in options, admin_uids=frozenset(admins), source=source)


def parse_slurm_conf(text: str, source: str = "slurm.conf") -> JobPrivacy:
    """``PrivateData=`` and ``SlurmUser=`` of a slurm.conf (keys case-insensitive, last wins)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        for word in line.split("#", 1)[0].split():
            key, sep, value = word.partition("=")
            if sep and key.lower() in ("privatedata", "slurmuser"):
                values[key.lower()] = value
    return _privacy(values.get("privatedata"), values.get("slurmuser"), source)


def parse_show_config(text: str, source: str = "scontrol show config") -> JobPrivacy:
    """The same from ``scontrol show config`` (``PrivateData = jobs,usage``, ``SlurmUser = slurm(64030)``)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("privatedata", "slurmuser"):
            values[key.strip().lower()] = value.strip()
    if "privatedata" not in values:
        raise ValueError(f"{source}: no PrivateData line")
    return _privacy(values["privatedata"], values.get("slurmuser"), source)


def read_job_privacy(
    *, slurm_conf: str | None = None, bin_dir: str | None = None, environ: Mapping[str, str] | None = None,
    timeout_s: float = SCONTROL_TIMEOUT_S,
) -> tuple[JobPrivacy, str | None]:
    """(the cluster's setting, a warning or None); private when it cannot be read."""
    from asrpt.slurm.commands import show_config
    from asrpt.slurm.runner import SlurmRunner

    env = os.environ if environ is None else environ
    problems: list[str] = []
    for path in (slurm_conf, env.get("SLURM_CONF"), DEFAULT_SLURM_CONF):
        if not path:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return parse_slurm_conf(handle.read(), path), None
        except FileNotFoundError:
            continue
        except OSError as error:
            problems.append(f"{path}: {error.strerror}")
    runner = SlurmRunner(slurm_conf=slurm_conf, bin_dir=bin_dir, timeout_s=timeout_s, retries=0,
                         env=None if environ is None else environ)
    result = runner.run(show_config())
    try:
        if not result.ok:
            raise ValueError(result.evidence())
        return parse_show_config(result.stdout), None
    except ValueError as error:
        problems.append(f"scontrol show config: {error}")
    private = JobPrivacy(private_jobs=True, admin_uids=frozenset({0}), source="<unknown>")
    return private, (
        "cannot tell whether Slurm's PrivateData hides other users' jobs (" + "; ".join(problems or ["no slurm.conf"])
        + "); showing only your own jobs"
    )


def daemon_privacy_reader(slurm_conf: str | None, bin_dir: str | None, *, consequence: str,
                          log: Any) -> Callable[[], JobPrivacy]:
    """Slurm's setting as one of the daemon's endpoints reads it: when it cannot be read, a
    warning in the daemon's log saying ``consequence`` (jobs count as private)."""

    def read() -> JobPrivacy:
        privacy, warning = read_job_privacy(slurm_conf=slurm_conf, bin_dir=bin_dir)
        if warning:
            log.warning("%s; %s", warning.replace("showing only your own jobs", "jobs count as private"), consequence)
        return privacy

    return read


class CachedJobPrivacy:
    """Slurm's setting read at most once per ``ttl_s`` (the daemon's endpoints ask per request)."""

    def __init__(self, read: Callable[[], JobPrivacy], *, ttl_s: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._cached: tuple[float, JobPrivacy] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> JobPrivacy:
        with self._lock:
            now_s = self._monotonic()
            if self._cached is None or now_s - self._cached[0] >= self._ttl_s:
                self._cached = (now_s, self._read())
            return self._cached[1]


def redacted(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job's JSON (``queue_view.job_json``) without what names it: another user's job under
    ``PrivateData=jobs``."""
    hidden = {"job_id", "name", "user", "reason"}
    return {key: (None if key in hidden else value) for key, value in job.items()}


def counts(rows: Sequence[Any]) -> dict[str, int]:
    """Aggregate counts of forecast rows: what ``PrivateData=jobs`` leaves to show anonymously."""
    return {
        "running": sum(1 for r in rows if r.running),
        "pending": sum(1 for r in rows if not r.running),
        "held": sum(1 for r in rows if not r.running and r.held),
        "accelerators_running": sum(r.accelerators for r in rows if r.running),
        "accelerators_pending": sum(r.accelerators for r in rows if not r.running),
    }
