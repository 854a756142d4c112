"""squeue's selection options for ``asrpt queue``: ``-j/--jobs``, ``-t/--states``, ``--start``,
and ``-u`` checked the way squeue checks it (an unknown user is an error, exit 1).

asrpt's forecasts cover pending and running jobs only, so ``-t`` accepts squeue's names and
short forms of those two states (``PD``/``PENDING``, ``R``/``RUNNING``, ``all``); any other
state is an error that lists the valid ones rather than an empty table.
"""

from __future__ import annotations

import argparse
import pwd
from typing import Any, Iterable

STATE_NAMES = {"PD": "PENDING", "PENDING": "PENDING", "R": "RUNNING", "RUNNING": "RUNNING"}
#: squeue --start's columns, with asrpt's predicted start in place of Slurm's.
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.8Q %r"


class InvalidUser(Exception):
    """``-u`` named a user this machine does not know (squeue: ``Invalid user``)."""


def add_squeue_filters(queue: argparse.ArgumentParser) -> None:
    queue.add_argument("-j", "--jobs", default=None, metavar="JOBID[,JOBID...]",
                       help="only these jobs (comma-separated job ids)")
    queue.add_argument("-t", "--states", default=None, metavar="STATE[,STATE...]",
                       type=parse_states, help="only jobs in these states: PD/PENDING, R/RUNNING or all "
                       "(comma-separated)")
    queue.add_argument("--start", action="store_true",
                       help="as squeue --start: pending jobs only, with their predicted start "
                       f"(format {START_FORMAT.replace('%', '%%')!r} unless -o is given)")


def parse_states(text: str) -> frozenset[str]:
    states = set()
    for part in (p.strip().upper() for p in text.split(",") if p.strip()):
        if part == "ALL":
            return frozenset(STATE_NAMES.values())
        if part not in STATE_NAMES:
            raise argparse.ArgumentTypeError(
                f"invalid state {part!r}: asrpt forecasts pending and running jobs; use PD, PENDING, R, RUNNING or all")
        states.add(STATE_NAMES[part])
    if not states:
        raise argparse.ArgumentTypeError("give at least one state")
    return frozenset(states)


def check_users(users: str | None, seen: Iterable[str | None] = ()) -> None:
    """Raise :class:`InvalidUser` for the first name (or numeric uid) that is no user here.

    A name that owns forecast rows (``seen``) is valid even when this machine cannot resolve
    it: ``--url`` may read the database of a cluster whose users live elsewhere.
    """
    owners = set(seen)
    for name in (u.strip() for u in (users or "").split(",") if u.strip()):
        if name in owners:
            continue
        try:
            pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except KeyError:
            raise InvalidUser(name) from None


def select(rows: Iterable[Any], args: argparse.Namespace) -> list[Any]:
    """The rows that ``-j``, ``-t`` and ``--start`` keep, in their order."""
    job_ids = {j.strip() for j in args.jobs.split(",") if j.strip()} if args.jobs else None
    states = args.states
    if args.start:
        states = (states or frozenset({"PENDING"})) & {"PENDING"}
    kept = []
    for row in rows:
        if job_ids is not None and row.slurm_job_id not in job_ids:
            continue
        if states is not None and ("RUNNING" if row.running else "PENDING") not in states:
            continue
        kept.append(row)
    return kept
