"""``asrptd``: the priority daemon, run by systemd (Type=notify) next to slurmctld.

Start-up: read the configuration (errors exit 2 so systemd shows them), upgrade the database
schema, restore the policy state, reconcile with Slurm by running the first cycle at once,
then run the cycle, the finished-job sync and retraining from one plain loop
(:func:`run_loop`): one thread, one job at a time, intervals on the monotonic clock (a wall
clock stepped back does not stop cycles), waits on the stop event (SIGTERM ends a wait at
once and a running cycle at its end; APScheduler's shutdown deadlocked against a running
cycle). A failing cycle is logged and retried with back-off while Slurm does not answer; the
process keeps running.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import socket
import threading
import sys
import time
from typing import Any, Callable, Sequence

from asrpt.exceptions import AsrptError

log = logging.getLogger("asrptd")


def sd_notify(message: str) -> None:
    """Tell systemd (``NOTIFY_SOCKET``) about readiness/status; a no-op elsewhere."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as error:
        log.debug("sd_notify failed: %s", error)


def status_line(stats) -> str:
    """systemd's STATUS= text (``systemctl status``): healthy, or degraded with the last error."""
    head = f"cycles={stats.cycles} failures={stats.failures} isolated_jobs={stats.jobs_isolated}"
    if not stats.consecutive_failures:
        return f"ok {head}"
    error = " ".join(str(stats.last_error).split())[:200]
    return f"degraded ({stats.consecutive_failures} failed in a row) {head}; last error: {error}"


def guarded(name: str, work, *args):
    """Run a periodic job; an unexpected error is logged and the daemon keeps running."""
    try:
        return work(*args)
    except Exception:
        log.exception("%s failed; retried at its next run", name)
        return None


class StopFlag:
    """"Stop now", set from a signal handler; waits as ``threading.Event`` does.

    Why not an Event: the handler runs in the main thread, between two bytecodes of whatever
    it was doing, and ``Event.set`` takes the Event's lock. If the main thread was inside
    ``Event.wait`` just after re-taking that lock, the handler waits for a lock its own thread
    holds: asrptd hung for good on a SIGTERM (seen in CI, py-spy: ``stop -> Event.set ->
    Condition.__enter__`` over ``run_loop -> Event.wait``). Here ``set`` only assigns a flag and
    writes a byte to a pipe, and ``wait`` sleeps in ``select`` on that pipe: no lock anywhere.
    """

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        try:
            os.write(self._write_fd, b"x")
        except OSError:  # the pipe is full: a wake-up is pending already
            pass

    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        self._set = False
        os.set_blocking(self._read_fd, False)
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(self._read_fd, True)

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once set; else after ``timeout_s`` (None: until set) False."""
        if not self._set:
            try:
                select.select([self._read_fd], [], [], timeout_s)
            except InterruptedError:  # pragma: no cover - PEP 475 retries; a handler may set the flag
                pass
        return self._set


def next_cycle_delay_s(daemon: Any) -> float:
    """Seconds to the next cycle: the interval, doubled per poll of Slurm that failed in a row
    (up to ``max_backoff_s``); back to the interval once a poll answers."""
    section = daemon.config.daemon
    failures = daemon.stats.backoff_failures
    if not failures:
        return section.interval_s
    return min(section.interval_s * 2.0 ** min(failures, 32), section.max_backoff_s)


def run_loop(daemon: Any, stopping: "StopFlag | threading.Event", *, monotonic: Callable[[], float] = time.monotonic) -> None:
    """Run the periodic jobs until ``stopping`` is set; returns right after the job under way."""
    section = daemon.config.daemon
    start_s = monotonic()
    due_s = {
        "cycle": start_s + next_cycle_delay_s(daemon),
        "sync": start_s + section.sync_interval_s,
        "retrain": start_s + section.retrain_interval_s,
    }
    while not stopping.is_set():
        name = min(due_s, key=due_s.__getitem__)
        wait_s = due_s[name] - monotonic()
        if wait_s > 0 and stopping.wait(wait_s):
            break
        if name == "cycle":
            daemon.cycle()
            sd_notify(f"WATCHDOG=1\nSTATUS={status_line(daemon.stats)}")
            due_s[name] = monotonic() + next_cycle_delay_s(daemon)
        elif name == "sync":
            guarded("finished-job sync", daemon.sync_finished)
            due_s[name] = monotonic() + section.sync_interval_s
        else:
            guarded("retraining", daemon.retrain)
            due_s[name] = monotonic() + section.retrain_interval_s


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """argparse type of ``--log-level``; applied to the ``$ASRPT_LOG_LEVEL`` default too."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r}; valid: {', '.join(LOG_LEVELS)}")
    return level


def build_daemon(config_path: str | None, *, dry_run: bool = False):
    from asrpt.daemon.config import load_config
    from asrpt.daemon.service import Daemon
    from asrpt.db.migrate import upgrade
    from asrpt.db.repository import HistoryRepository
    from asrpt.db.session import close_to_others

    from asrpt.daemon.dbguard import DatabaseGuard, check_before_upgrade

    config = load_config(config_path)
    # Before the upgrade: it would create an empty schema where the history used to be.
    check_before_upgrade(config.database.url, config.daemon.state_dir)
    upgrade(config.database.url)
    for path in close_to_others(config.database.url):
        log.warning("%s was readable by other users (their jobs' commands, secrets included); it no longer is "
                    "(asrpt queue reads through asrptd's socket)", path)
    repository = HistoryRepository.from_url(config.database.url)
    guard = DatabaseGuard(config.database.url, config.daemon.state_dir)
    guard.check_at_start(repository)
    return Daemon(config, repository=repository, dry_run=dry_run, database_guard=guard)


def start_queue_socket(config: Any) -> Any:
    """Every user's queue views on ``[daemon] socket_path``, from their own database engine."""
    from asrpt.cli.queue_privacy import CachedJobPrivacy, daemon_privacy_reader
    from asrpt.daemon.local_socket import PRIVACY_TTL_S, start_socket_server
    from asrpt.db.repository import HistoryRepository

    read = daemon_privacy_reader(config.slurm.slurm_conf, config.slurm.bin_dir, log=log,
                                 consequence="the socket shows each user only their own jobs")
    return start_socket_server(config.daemon.socket_path, HistoryRepository.from_url(config.database.url),
                               job_privacy=CachedJobPrivacy(read, ttl_s=PRIVACY_TTL_S))


def release_holds_without_history(config_path: str | None) -> int:
    """asrptd cannot start (its history is unusable): release the holds and pins an earlier
    run left in Slurm (one killed before it could release them), which needs only Slurm, so
    that no job waits for a daemon that is not coming back. Returns the jobs released."""
    from asrpt.core.model import Decision
    from asrpt.daemon.config import load_config
    from asrpt.slurm.cli_backend import SlurmCliBackend

    try:
        backend = SlurmCliBackend(load_config(config_path).slurm)
        backend.snapshot()
        backend.apply(Decision(order=()))
    except Exception as error:  # the configuration or Slurm is the problem too: nothing to do
        log.warning("could not release the holds of an earlier run: %s: %s", type(error).__name__, error)
        return 0
    released = backend.last_apply.releases
    if released:
        print(f"asrptd: released {released} job(s) an earlier run held, so they do not wait for asrptd", file=sys.stderr)
    return released


def build_parser() -> argparse.ArgumentParser:
    """``asrptd``'s options (also walked by the completion and man-page generators)."""
    from asrpt.cli.help_format import finish_parsers

    parser = argparse.ArgumentParser(prog="asrptd", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", default=None, help="configuration file (default $ASRPT_CONFIG or /etc/asrpt/asrpt.toml)")
    parser.add_argument("--once", action="store_true", help="run one sync + cycle and exit (for cron, tests, debugging)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="read Slurm, decide, store decisions and forecasts, log what would be written; write nothing to Slurm",
    )
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=os.environ.get("ASRPT_LOG_LEVEL", "INFO"),
        help=f"one of {', '.join(LOG_LEVELS)}, any case (default $ASRPT_LOG_LEVEL or INFO)",
    )
    return finish_parsers(parser)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(name)s: %(levelname)s: %(message)s")

    # Installed first: a SIGTERM at any moment only sets this flag; the main thread notices
    # it (during start-up after the first cycle, later at once or when the running cycle ends).
    stopping = StopFlag()

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping after the current cycle", signum)
        sd_notify("STOPPING=1")
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    try:
        daemon = build_daemon(args.config, dry_run=args.dry_run)
    except AsrptError as error:
        print(f"asrptd: error: {error}", file=sys.stderr)
        if not args.dry_run:
            release_holds_without_history(args.config)
        return 2

    # The HTTP endpoint and the socket are bound before the first cycle: one in use is an error at start.
    servers: list[Any] = []
    try:
        if daemon.config.daemon.http_bind and not args.once:
            from asrpt.daemon.http import start_http_server

            servers.append(start_http_server(daemon, daemon.config.daemon.http_bind))
        if daemon.config.daemon.socket_path and not args.once:
            servers.append(start_queue_socket(daemon.config))
    except AsrptError as error:
        for started in servers:
            started.shutdown()
        print(f"asrptd: error: {error}", file=sys.stderr)
        return 2

    # Ready once the configuration, database and HTTP bind are checked: the first cycle on a
    # 10,000-job queue can outlast systemd's start timeout, and it only needs Slurm to answer.
    if not args.once:
        sd_notify("READY=1\nSTATUS=first cycle running")
    guarded("finished-job sync", daemon.sync_finished)
    guarded("retraining", daemon.retrain)
    first = daemon.cycle()
    sd_notify(f"STATUS={status_line(daemon.stats)}")
    if args.once:
        return 0 if first is not None else 1
    if stopping.is_set():
        for started in servers:
            started.shutdown()
        return 0

    interval_s = daemon.config.daemon.interval_s

    log.info("running: cycle every %.0f s, policy %s", interval_s, daemon.policy.name)
    try:
        run_loop(daemon, stopping)
    finally:
        for started in servers:
            started.shutdown()
    if daemon.config.daemon.release_holds_on_stop:
        daemon.release_holds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
