"""``asrpt queue``, ``asrpt eta`` and ``asrpt explain``: when will my job start and finish, and why.

They show the forecasts the daemon stores every cycle and nothing else (no model is loaded,
the queue is not asked of Slurm, neither numpy nor scikit-learn is imported), so they answer
at once on a login node. With Slurm's ``PrivateData=jobs`` a caller other than root and the
SlurmUser sees only their own jobs, as with squeue (:mod:`asrpt.cli.queue_reader`). Text
output shows control characters in job names (and every other value) as escapes (``\\x1b``);
``--json`` keeps the raw strings.

Where they come from: asrptd's Unix socket (``[daemon] socket_path``, default
/run/asrpt/asrptd.sock), which knows the caller's uid and needs no database access; when
nothing answers there, or ``--url``/``$ASRPT_DATABASE_URL`` names a database, the database
itself, read as the caller: ``--url``, else ``$ASRPT_DATABASE_URL``, else ``[database]
read_url`` (a read-only role), then ``url``, of the daemon's configuration file (read by
:mod:`asrpt.cli.site_config`), else the default. A caller who cannot read it gets one line
saying why and how to get access.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from asrpt.cli import site_config
from asrpt.cli.site_config import CONFIG_ENV, DATABASE_URL_ENV
from asrpt.paths import DEFAULT_DATABASE_URL

T = TypeVar("T")

__all__ = ["CONFIG_ENV", "DATABASE_URL_ENV", "add_queue_parsers", "resolve_database_url"]
#: Forecasts older than this get a warning: the daemon may have stopped.
STALE_AFTER_S = 600.0


from asrpt.cli.queue_filters import START_FORMAT, InvalidUser, add_squeue_filters, check_users, select  # noqa: E402


def add_queue_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``queue``, ``eta`` and ``explain`` under ``subparsers``."""
    from asrpt.cli.queue_view import DEFAULT_FORMAT

    queue = subparsers.add_parser(
        "queue",
        help="pending and running jobs in scheduling order, with predicted start and end",
        description=(
            "List pending and running jobs in asrpt's scheduling order (running jobs first) with "
            "their predicted start and end, as the daemon's last cycle forecast them."
        ),
        epilog=(
            "--format codes (squeue's where they exist): %i job id, %j name, %u user, "
            "%P partition (where it runs or is predicted to start), %t state (R/PD), %T state "
            "(long), %S predicted start, %e predicted end, %L predicted time left, %b accelerators, "
            "%Q place in asrpt's order, %r the policy's reason, %% a literal %. "
            "Width as in squeue: %.10i right-justified in 10 columns, %10i left-justified."
        ),
    )
    queue.add_argument("-u", "--user", default=None, help="only these users' jobs (comma-separated)")
    queue.add_argument("--me", action="store_true", help="only my jobs")
    queue.add_argument("-p", "--partition", default=None, help="only jobs that run in, or allow, these partitions (comma-separated)")
    queue.add_argument("--json", action="store_true", help="print JSON instead of a table")
    queue.add_argument("-o", "--format", default=None, metavar="FMT", help=f"squeue-style format (default {DEFAULT_FORMAT.replace('%', '%%')!r})")
    queue.add_argument("--noheader", action="store_true", help="no header line")
    add_squeue_filters(queue)
    _add_url_option(queue)
    queue.set_defaults(func=run_queue)

    eta = subparsers.add_parser(
        "eta",
        help="predicted start and end of one job",
        description="When the job is predicted to start and to finish, from the daemon's last cycle.",
    )
    eta.add_argument("job_id", metavar="JOBID", help="a Slurm job id, as squeue prints it")
    eta.add_argument("--json", action="store_true", help="print JSON")
    _add_url_option(eta)
    eta.set_defaults(func=run_eta)

    explain = subparsers.add_parser(
        "explain",
        help="why a job sits where it does in the queue",
        description=(
            "Why the job sits where it does: predicted iterations and the history they come from, "
            "its remaining virtual work (A-SRPT), the jobs ahead of it, a communication-heavy hold, "
            "and the partition chosen."
        ),
    )
    explain.add_argument("job_id", metavar="JOBID", help="a Slurm job id, as squeue prints it")
    explain.add_argument("--json", action="store_true", help="print JSON")
    _add_url_option(explain)
    explain.set_defaults(func=run_explain)


def _add_url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=None,
        help=(f"read this database instead of asking asrptd's socket (default: the socket; when it does not answer, "
              f"${DATABASE_URL_ENV}, else [database] read_url, then url, in the daemon's configuration, else {DEFAULT_DATABASE_URL})"),
    )


# -- where the forecasts come from -----------------------------------------------------------------


def resolve_database_url(cli_url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``--url``, else ``$ASRPT_DATABASE_URL``, else ``[database] read_url``, then ``url``, of
    the configuration, else the default."""
    return site_config.resolve_database_url(cli_url, environ, for_reading=True)


def caller_privacy(uid: int, site: site_config.SiteConfig) -> Any:
    """What ``uid`` may see under Slurm's PrivateData (root: everything, without asking)."""
    from asrpt.cli.queue_privacy import PUBLIC, read_job_privacy

    if uid == 0:
        return PUBLIC
    privacy, warning = read_job_privacy(slurm_conf=site.slurm_conf, bin_dir=site.bin_dir)
    if warning:
        print(f"asrpt: warning: {warning}", file=sys.stderr)
    return privacy


def read_views(args: argparse.Namespace, ask: Callable[[Any], T]) -> T:
    """``ask(views)`` of asrptd's socket; when nothing answers there (or ``--url`` or
    ``$ASRPT_DATABASE_URL`` names a database), of the database read directly, as the caller."""
    site = site_config.read_site_config()
    socket_problem = None  # not asked
    if not (args.url or os.environ.get(DATABASE_URL_ENV)) and site.socket_path:
        from asrpt.cli.queue_socket import DaemonNotListening, SocketViews

        try:
            return ask(SocketViews(site.socket_path))
        except DaemonNotListening as error:
            socket_problem = str(error)
    from asrpt.cli.queue_reader import QueueReader
    from asrpt.db.repository import HistoryRepository
    from asrpt.exceptions import DatabaseUnavailable, MigrationRequired

    if site.problem:
        print(f"asrpt: warning: {site.problem}; using the defaults", file=sys.stderr)
    url = site_config.resolve_database_url(args.url, site=site, for_reading=True)
    uid = os.getuid()
    try:
        repository = HistoryRepository.from_url(url)
        try:
            return ask(QueueReader(repository, functools.cache(lambda: caller_privacy(uid, site)), uid))
        finally:
            repository.close()
    except MigrationRequired:
        raise
    except DatabaseUnavailable as error:
        raise no_access(url, error, site, socket_problem) from None


def no_access(url: str, error: Exception, site: site_config.SiteConfig, socket_problem: str | None) -> Exception:
    """The one line for a caller who cannot read the history: why, and how to get access."""
    from asrpt.db.session import display_url, normalize_url, sqlite_path
    from asrpt.exceptions import DatabaseUnavailable

    reason = getattr(error, "reason", None) or str(error)
    path = sqlite_path(normalize_url(url))
    if path is not None and path.exists():
        if not os.access(path, os.R_OK):
            reason = "permission denied: the file is private to asrptd's user"
        elif "readonly" in reason or "unable to open" in reason:
            reason = f"SQLite needs write access to {path}-wal and {path}-shm even to read, and you have none"
    if site.socket_path and socket_problem is None:
        how = f"without --url and ${DATABASE_URL_ENV}, asrpt asks asrptd's socket {site.socket_path} instead"
    elif site.socket_path:
        how = (f"asrptd serves every user on its socket {site.socket_path}, but nothing answers there ({socket_problem}): "
               "is asrptd running? Ask the admin to start it")
    else:
        how = "no asrptd socket is configured ([daemon] socket_path); ask the admin to set one, or for read access"
    return DatabaseUnavailable(display_url(url), f"cannot read it as {_user_name()} ({reason}); {how}")


def _user_name() -> str:
    from asrpt.cli.queue_privacy import user_name

    return user_name(os.getuid()) or f"uid {os.getuid()}"


def _warn_if_stale(made_at_s: float | None, now_s: float) -> None:
    if made_at_s is not None and now_s - made_at_s > STALE_AFTER_S:
        from asrpt.cli.queue_view import human_delta

        print(
            f"asrpt: warning: these forecasts were made {human_delta(made_at_s - now_s, future=False)}; "
            "is asrptd running?",
            file=sys.stderr,
        )


# -- asrpt queue ------------------------------------------------------------------------------------


def run_queue(args: argparse.Namespace) -> int:
    from asrpt.cli import queue_view

    fmt = args.format or (START_FORMAT if args.start else queue_view.DEFAULT_FORMAT)
    try:
        queue_view.parse_format(fmt)
    except queue_view.FormatError as error:
        print(f"asrpt queue: {error}", file=sys.stderr)
        return 2
    user = args.user
    if args.me:
        import getpass

        user = getpass.getuser()
    every_row = read_views(args, lambda views: views.queue(user=user, partition=args.partition))
    try:
        check_users(args.user, (r.user for r in every_row))
    except InvalidUser as error:
        print(f"asrpt queue: error: Invalid user: {error}", file=sys.stderr)
        return 1
    rows = select(every_row, args)
    now_s = time.time()
    made_at_s = max((r.made_at_s for r in every_row), default=None)
    if args.json:
        policy = rows[0].policy if rows else None
        print(json.dumps(queue_view.queue_json(rows, made_at_s=made_at_s, policy=policy), indent=2))
    else:
        for line in queue_view.render_table(rows, fmt, now_s, header=not args.noheader):
            print(line)
        if made_at_s is not None:
            print(f"asrpt: forecasts as of {queue_view.iso_utc(made_at_s)}", file=sys.stderr)
    _warn_if_stale(made_at_s, now_s)
    return 0


# -- asrpt eta --------------------------------------------------------------------------------------


def run_eta(args: argparse.Namespace) -> int:
    from asrpt.cli import queue_view

    row = read_views(args, lambda views: views.eta(args.job_id))
    now_s = time.time()
    if args.json:
        print(json.dumps(queue_view.job_json(row), indent=2))
        return 0
    for line in eta_lines(row, now_s):
        print(queue_view.printable(line))
    if row.current:
        _warn_if_stale(row.made_at_s, now_s)
    return 0


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _when(t_s: float | None, now_s: float) -> str:
    from asrpt.cli.queue_view import finite, human_delta, local_time

    value = finite(t_s)
    if value is None:
        return "unknown"
    return f"{local_time(value)} ({human_delta(value - now_s)})"


def _end(row: Any, now_s: float) -> str:
    """The predicted end, or for a job of unknown length ``unknown, at most <limit end>``."""
    if getattr(row, "end_unknown", False):
        bound = _when(row.predicted_end_s, now_s)
        return "unknown" if bound == "unknown" else f"unknown, at most {bound}"
    return _when(row.predicted_end_s, now_s)


def _title(row: Any) -> str:
    name = f"{row.job_name}, " if row.job_name else ""
    return f"job {row.slurm_job_id} ({name}{row.user or 'unknown user'})"


def eta_lines(row: Any, now_s: float) -> list[str]:
    """``asrpt eta``'s text for one stored forecast."""
    from asrpt.cli.queue_view import human_delta, local_time, partition_text, readable_reason

    lines: list[str] = []
    if not row.current:
        lines.append(
            f"{_title(row)} has left the queue; the last forecast ({local_time(row.made_at_s)}) "
            f"had it end at {local_time(row.predicted_end_s)}"
        )
        return lines
    if row.running:
        lines.append(f"{_title(row)}: running on {partition_text(row)} since {local_time(row.predicted_start_s)}")
        lines.append(f"  predicted end   {_end(row, now_s)}")
    else:
        place = f", {_ordinal(row.position)} in {row.policy}'s order" if row.position else ""
        held = " (held by asrpt for a consolidated placement)" if row.held else ""
        lines.append(f"{_title(row)}: pending{place}{held}")
        where = f" on {row.partition}" if row.partition else ""
        lines.append(f"  predicted start {_when(row.predicted_start_s, now_s)}{where}")
        lines.append(f"  predicted end   {_end(row, now_s)}")
        if row.predicted_start_s is None and row.reason:
            lines.append(f"  why: {readable_reason(row.reason)}")
    lines.append(f"  as of {local_time(row.made_at_s)} ({human_delta(row.made_at_s - now_s, future=False)})")
    return lines


# -- asrpt explain ----------------------------------------------------------------------------------


def run_explain(args: argparse.Namespace) -> int:
    from asrpt.cli.queue_view import printable

    row, facts = read_views(args, lambda views: views.explain(args.job_id))
    now_s = time.time()
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    for line in explain_lines(row, facts, now_s):
        print(printable(line))
    if row.current:
        _warn_if_stale(row.made_at_s, now_s)
    return 0


#: How many jobs ahead ``explain`` names.
AHEAD_SHOWN = 5


def _iterations_text(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}"


def explain_lines(row: Any, facts: Mapping[str, Any], now_s: float) -> list[str]:
    """``asrpt explain``'s text for a stored forecast and :func:`gather_explanation`'s facts."""
    from asrpt.cli.queue_view import local_time, readable_reason

    lines = eta_lines(row, now_s)
    as_of = lines.pop() if row.current else None
    pending = row.current and not row.running

    reason = readable_reason(row.reason)
    if pending and reason and row.predicted_start_s is not None:
        lines.append(f"  why: {reason}")
    elif pending and not reason and row.position is not None:
        lines.append(
            f"  why: {row.position - 1} job(s) come first in {row.policy}'s order and the scheduler did not reach "
            "this one in its last pass (the jobs ahead take the accelerators that free up)"
        )

    # Predicted iterations, and the history they rest on.
    history = facts["history"]
    predictions = history["predictions"]
    lines.append(f"  predicted iterations: {_iterations_text(row.predicted_iterations)}")
    if predictions:
        first = predictions[0]
        lines.append(
            f"    first predicted {first['predicted_iterations']:,.0f} on {local_time(first['made_at_s'])} by "
            f"{_prediction_source(first['model_version'], history['iterations_hint'])}"
        )
        for later in predictions[1:]:
            if later["model_version"] == "raised":
                lines.append(
                    f"    raised to {later['predicted_iterations']:,.0f} on {local_time(later['made_at_s'])}: "
                    "the job ran past its prediction"
                )
    if history.get("group"):
        runs = history["group_runs"]
        median = runs["median_iterations"]
        lines.append(
            f"    history: {runs['count']} finished run(s) of its group {history['group']!r} before then"
            + (f" (median {median:,.0f} iterations)" if median is not None else "")
        )
    else:
        lines.append("    history: the job belongs to no recurrence group (no #ASRPT group, no script hash)")
    if "user_runs" in history:
        lines.append(f"             {history['user_runs']['count']} finished run(s) by {row.user}")
    if pending and row.predicted_iterations == 0:
        lines.append(
            "    a prediction of 0 means no usable history: A-SRPT ranks such a job first (the paper's rule "
            "for unseen jobs)"
        )
    expected, predicted = row.expected_iterations, row.predicted_iterations
    if expected is not None and predicted is not None and abs(expected - predicted) > 0.5:
        lines.append(f"    the forecast assumes {expected:,.0f} iterations (what its time limit allows)")

    if pending:
        lines.extend(_virtual_lines(row))
        lines.extend(_ahead_lines(facts))
        if row.held:
            lines.append(
                "  communication-heavy hold: yes; its best placement now would slow every iteration too much, "
                "so asrpt holds it for a consolidated one (see why)"
            )
        else:
            lines.append("  communication-heavy hold: no")
    allowed = ", ".join(row.partitions) if row.partitions else "any"
    if row.partition:
        verb = "runs on" if row.running else "predicted to start on"
        lines.append(f"  partition: {verb} {row.partition} (allowed: {allowed})")
    else:
        lines.append(f"  partition: none predicted (allowed: {allowed})")
    if as_of is not None:
        lines.append(as_of)
    return lines


def _prediction_source(version: str, hint: float | None) -> str:
    if version == "untrained":
        if hint:
            return f"the user's own estimate (#ASRPT iterations={hint:,.0f}); no model was trained yet"
        return "the rule for unseen jobs; no model was trained yet and the job gave no estimate"
    if version.startswith("rf-") and version.count("-") >= 2:
        return f"the random-forest model {version} (trained on {version.split('-')[1]} finished jobs)"
    return f"model {version}"


def _virtual_lines(row: Any) -> list[str]:
    remaining, size = row.virtual_remaining_s, row.virtual_size_s
    if (remaining is None or size is None) and row.policy.startswith("asrpt"):
        return ["  virtual remaining work: none; the job is not on the virtual single machine (no partition it allows can hold it)"]
    if remaining is None or size is None:
        return [f"  virtual remaining work: none ({row.policy} does not order jobs on a virtual single machine)"]
    if remaining <= 0:
        return [
            f"  virtual remaining work: 0 of {size:,.0f} s; virtually complete, it waits in the dispatch queue "
            "(by predicted work, or as [scheduler] queue_order says)"
        ]
    return [
        f"  virtual remaining work: {remaining:,.0f} of {size:,.0f} s on the virtual single machine; it becomes "
        "dispatchable when that reaches 0 (less remaining work runs first there)"
    ]


def _ahead_lines(facts: Mapping[str, Any]) -> list[str]:
    from asrpt.cli.queue_view import local_time

    ahead = facts["ahead"]
    lines: list[str] = []
    if ahead:
        accelerators = sum(a["accelerators"] for a in ahead)
        lines.append(f"  jobs ahead: {len(ahead)} pending, {accelerators} accelerators in all:")
        for other in ahead[:AHEAD_SHOWN]:
            who = f"{other['job_id']} {other['user']}" if other["job_id"] is not None else "another user's job"
            lines.append(
                f"    {other['position']:>4}. {who}, {other['accelerators']} accelerators, "
                f"predicted start {local_time(other['predicted_start_s'])}"
            )
        if len(ahead) > AHEAD_SHOWN:
            lines.append(f"    ... and {len(ahead) - AHEAD_SHOWN} more")
    else:
        lines.append("  jobs ahead: none pending")
    running = facts["running_on_its_partitions"]
    if running:
        soonest = min((r["predicted_end_s"] for r in running if r["predicted_end_s"] is not None), default=None)
        lines.append(
            f"  running on its partition(s): {len(running)} job(s) on {sum(r['accelerators'] for r in running)} "
            f"accelerators, the next predicted to end at {local_time(soonest)}"
        )
    return lines
