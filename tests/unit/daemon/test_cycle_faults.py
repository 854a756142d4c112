"""Issue 16: a fault the cycle did not expect is counted, logged once and shown (metrics,
/healthz, the systemd status); it never escapes ``Daemon.cycle()``."""

from __future__ import annotations

import http.client
import logging

from asrpt.daemon.http import render_metrics, start_http_server
from asrpt.daemon.main import status_line


def _break_policy(daemon, error: Exception) -> None:
    def decide(snapshot, now_s, state):
        raise error

    daemon.loop.policy = type("Broken", (), {"decide": staticmethod(decide), "name": "broken"})()


def test_an_unexpected_error_fails_the_cycle_without_escaping(daemon, caplog) -> None:
    _break_policy(daemon, RuntimeError("boom in job 101"))
    with caplog.at_level(logging.WARNING):
        assert daemon.cycle() is None
        assert daemon.cycle() is None
    assert daemon.stats.failures == 2 and daemon.stats.consecutive_failures == 2
    assert daemon.stats.escaped == 2
    assert "RuntimeError" in daemon.stats.last_error and "boom in job 101" in daemon.stats.last_error
    # The traceback is logged once, not every cycle.
    assert sum(1 for r in caplog.records if r.exc_info) == 1
    metrics = render_metrics(daemon, None)
    assert "asrpt_cycle_failures_total 2" in metrics
    assert "asrpt_cycle_errors_unexpected_total 2" in metrics
    assert "degraded" in status_line(daemon.stats) and "boom in job 101" in status_line(daemon.stats)


def test_healthz_says_degraded_with_the_last_error_and_recovers(daemon) -> None:
    server = start_http_server(daemon, "127.0.0.1:0")
    try:
        def healthz() -> tuple[int, bytes]:
            host, port = server.server_address[:2]
            connection = http.client.HTTPConnection(host, port, timeout=10)
            try:
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                return response.status, response.read()
            finally:
                connection.close()

        assert daemon.cycle() is not None
        assert healthz() == (200, b"ok\n")
        policy = daemon.loop.policy
        _break_policy(daemon, ValueError("bad value"))
        assert daemon.cycle() is None
        status, body = healthz()
        assert status == 503 and body.startswith(b"degraded") and b"ValueError: bad value" in body
        daemon.loop.policy = policy
        assert daemon.cycle() is not None
        assert healthz() == (200, b"ok\n")
    finally:
        server.shutdown()


def test_the_back_off_resets_on_the_first_successful_poll(daemon) -> None:
    """After a slurmctld outage, the first poll that answers ends the back-off, even if that
    cycle then fails for another reason: held jobs must not wait out a 300 s back-off."""
    from asrpt.daemon.main import next_cycle_delay_s
    from asrpt.exceptions import SlurmUnreachable

    snapshot = daemon.backend.snapshot

    def down():
        raise SlurmUnreachable("squeue: error: slurm_load_jobs error: Unable to contact slurm controller")

    daemon.backend.snapshot = down
    for _ in range(4):
        assert daemon.cycle() is None
    assert daemon.stats.backoff_failures == 4
    assert next_cycle_delay_s(daemon) == daemon.config.daemon.max_backoff_s
    daemon.backend.snapshot = snapshot
    apply = daemon.backend.apply

    def write_fails(decision):
        raise SlurmUnreachable("scontrol: error: Socket timed out")

    daemon.backend.apply = write_fails
    assert daemon.cycle() is None  # the poll answered; the write did not
    assert daemon.stats.backoff_failures == 0
    assert next_cycle_delay_s(daemon) == daemon.config.daemon.interval_s
    daemon.backend.apply = apply
    assert daemon.cycle() is not None and daemon.stats.consecutive_failures == 0


def test_stopping_releases_asrpts_holds_and_changes_no_priority(daemon) -> None:
    applied = []
    daemon.backend.apply = lambda decision: applied.append(decision)
    daemon.backend.last_apply = None
    assert daemon.release_holds() == 0
    [decision] = applied
    assert tuple(decision.order) == () and decision.holds == () and decision.starts == ()


def test_a_release_that_fails_on_stop_is_logged_not_raised(daemon, caplog) -> None:
    from asrpt.exceptions import SlurmUnreachable

    def down():
        raise SlurmUnreachable("slurmctld down")

    daemon.backend.snapshot = down
    assert daemon.release_holds() == 0
    assert "could not release asrpt's holds" in caplog.text
