"""Pure argv builders for the Slurm commands asrpt runs.

Every function returns a list for :meth:`asrpt.slurm.runner.SlurmRunner.run`; nothing here
runs anything or reads the environment. Command names are bare ("squeue"); the runner
resolves them (PATH, or the configured ``bin_dir``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from asrpt.slurm.parsing import SACCT_FIELDS

__all__ = [
    "version",
    "show_config",
    "squeue_jobs",
    "nodes_query",
    "update_jobs",
    "hold",
    "release",
    "sacct_finished",
    "NODE_JSON_VIA_SCONTROL",
]

#: First Slurm version whose ``scontrol show node`` knows ``--json`` (23.02); before it,
#: ``sinfo --json`` has the per-node list (22.05). 24.11's ``sinfo --json`` lists node
#: *groups* instead, so the command depends on the version.
NODE_JSON_VIA_SCONTROL = (23, 2)


def version() -> list[str]:
    """``scontrol --version``: prints ``slurm 24.11.5`` (Debian 12: ``slurm-wlm 22.05.8``).
    Needs a readable slurm.conf, not a running slurmctld."""
    return ["scontrol", "--version"]


def show_config() -> list[str]:
    """``scontrol show config``: the running configuration (``PrivateData = jobs``, ...)."""
    return ["scontrol", "show", "config"]


def squeue_jobs() -> list[str]:
    """Every job slurmctld holds, as JSON, in one call, finished ones included.

    22.05 lists finished jobs (kept for MinJobAge) whatever the filters say; 24.11 lists only
    pending and running ones unless asked for every state, and a job that starts and ends
    between two cycles would then never be seen finishing (nor matched to its job_submit.lua
    record). The parser keeps all states; the backend filters.
    """
    return ["squeue", "--json", "--states=all"]


def nodes_query(slurm_version: Sequence[int]) -> list[str]:
    """The one per-node query with configured and allocated GRES for this Slurm version."""
    if tuple(slurm_version[:2]) >= NODE_JSON_VIA_SCONTROL:
        return ["scontrol", "show", "node", "--json"]
    return ["sinfo", "--json"]


def _job_list(job_ids: Iterable[str]) -> str:
    ids = [str(j) for j in job_ids]
    if not ids:
        raise ValueError("no job ids")
    for job_id in ids:
        if not job_id or any(c.isspace() or c in ",=\0" for c in job_id):
            raise ValueError(f"bad job id {job_id!r}")
    return ",".join(ids)


def _one_line(text: str) -> str:
    """scontrol takes the value as one argv word; newlines would garble ``scontrol show``, and
    an argument with a NUL cannot be passed at all (the text is users', via squeue)."""
    return " ".join(text.replace("\0", "").split())


def update_jobs(
    job_ids: Iterable[str],
    *,
    priority: int | None = None,
    req_nodes: str | None = None,
    admin_comment: str | None = None,
    start_now: bool = False,
) -> list[str]:
    """``scontrol update JobId=a,b Priority=N ReqNodeList=... AdminComment=... StartTime=now``.

    Only the fields given are written; ``req_nodes=""`` clears ReqNodeList; ``start_now``
    makes a job waiting for its begin time eligible at once. Several jobs in one call get the
    same values (Slurm applies it to each; errors name the failing ids).
    """
    argv = ["scontrol", "update", f"JobId={_job_list(job_ids)}"]
    if priority is not None:
        argv.append(f"Priority={int(priority)}")
    if req_nodes is not None:
        argv.append(f"ReqNodeList={req_nodes}")
    if admin_comment is not None:
        argv.append(f"AdminComment={_one_line(admin_comment)}")
    if start_now:
        argv.append("StartTime=now")
    if len(argv) == 3:
        raise ValueError("update_jobs needs at least one field")
    return argv


def hold(job_ids: Iterable[str]) -> list[str]:
    """``scontrol hold a,b``: priority 0, reason JobHeldAdmin (as root)."""
    return ["scontrol", "hold", _job_list(job_ids)]


def release(job_ids: Iterable[str]) -> list[str]:
    """``scontrol release a,b``. Slurm then gives each job a fresh *default* priority: set the
    wanted one again afterwards (Priority updates on a held job are refused)."""
    return ["scontrol", "release", _job_list(job_ids)]


def requeue(job_ids: Iterable[str]) -> list[str]:
    """``scontrol requeue a,b``: stop running batch jobs and put them back in the queue (they
    restart from their own checkpoint). Slurm refuses jobs submitted with ``--no-requeue``."""
    return ["scontrol", "requeue", _job_list(job_ids)]


def _local_iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch_s))


def sacct_finished(since_s: float) -> list[str]:
    """Accounting records of all users' jobs active since ``since_s`` (allocations only, one
    line each, ``|``-separated; see :data:`~asrpt.slurm.parsing.SACCT_FIELDS`). Needs slurmdbd."""
    return [
        "sacct", "-X", "-n", "-P", "-a",
        "-S", _local_iso(since_s), "-E", "now",
        "-o", ",".join(SACCT_FIELDS),
    ]
