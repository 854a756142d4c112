"""asrptd's optional read-only HTTP endpoint: the queue and ETAs as JSON, Prometheus metrics,
and a small page that draws the queue as a timeline.

Enabled by ``[daemon] http_bind`` (``127.0.0.1:8787``; a bare port or ``:port`` binds to
127.0.0.1 only). Everything is served from what the last cycle left in memory, except the
prediction-error metrics, which read the history at most once a minute. Nothing here changes
anything: GET and HEAD only, every other method gets 405. The answers name users and jobs;
contrib/slurm/README-http.md says how to expose it safely (reverse proxy with TLS and
authentication; never bind it to a public address directly).

Routes: ``/`` (HTML timeline), ``/queue`` (optionally ``?user=a,b&partition=p``),
``/eta/<jobid>``, ``/metrics``, ``/healthz``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from asrpt import __version__
from asrpt.cli.queue_view import job_json, queue_json
from asrpt.exceptions import AsrptError, ConfigError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
#: How long the history-derived accuracy metrics are reused, seconds.
ACCURACY_TTL_S = 60.0
#: Finished jobs the accuracy metrics look at (the most recent ones).
ACCURACY_JOBS = 200
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, ``:port`` or ``port`` -> (host, port); no host means 127.0.0.1."""
    text = bind.strip()
    host, port_text = DEFAULT_HOST, text
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            raise ConfigError(f"[daemon] http_bind {bind!r}: expected [address]:port")
        host, port_text = text[1:end], text[end + 2 :]
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
        host = host or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"[daemon] http_bind {bind!r}: the port must be a number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"[daemon] http_bind {bind!r}: port out of range")
    return host, port


def _page() -> bytes:
    from asrpt.daemon.queue_page import PAGE

    return PAGE.encode()


def _script_hashes(page: bytes) -> str:
    """CSP hashes of the page's inline scripts, so no other script can run in it."""
    text = page.decode()
    hashes = []
    at = 0
    while True:
        start = text.find("<script>", at)
        if start < 0:
            break
        end = text.index("</script>", start)
        body = text[start + len("<script>") : end]
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        hashes.append(f"'sha256-{digest}'")
        at = end
    return " ".join(hashes)


class _Handler(BaseHTTPRequestHandler):
    server: "AsrptHTTPServer"
    server_version = "asrptd"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -- methods -------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def __getattr__(self, name: str) -> Callable[[], None]:
        # http.server looks up do_<METHOD>; every method but GET and HEAD is refused the same way.
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self) -> None:
        body = json.dumps({"error": f"method {self.command} not allowed: this endpoint is read-only"}).encode()
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, body, "application/json", head=False, extra={"Allow": "GET, HEAD"})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.debug("http %s: " + format, self.address_string(), *args)

    # -- routing -------------------------------------------------------------------------------
    def _answer(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            if path == "/":
                page = self.server.page
                self._send(HTTPStatus.OK, page, "text/html; charset=utf-8", head=head, extra={"Content-Security-Policy": self.server.csp})
            elif path == "/queue":
                self._json(self.server.queue(parse_qs(url.query)), head=head)
            elif path.startswith("/eta/"):
                job_id = unquote(path[len("/eta/") :])
                found = self.server.eta(job_id)
                if found is None:
                    self._json({"error": f"job {job_id} is not in the queue"}, status=HTTPStatus.NOT_FOUND, head=head)
                else:
                    self._json(found, head=head)
            elif path == "/metrics":
                self._send(HTTPStatus.OK, self.server.metrics().encode(), PROMETHEUS_CONTENT_TYPE, head=head)
            elif path == "/healthz":
                status, text = health(self.server.asrpt.stats)
                self._send(status, text.encode("utf-8", "replace"), "text/plain; charset=utf-8", head=head)
            else:
                self._json({"error": f"no such resource: {url.path}"}, status=HTTPStatus.NOT_FOUND, head=head)
        except Exception:  # a broken answer must not take the endpoint (or the daemon) down
            log.exception("http %s failed", self.path)
            self._json({"error": "internal error"}, status=HTTPStatus.INTERNAL_SERVER_ERROR, head=head)

    def _json(self, value: Any, *, status: HTTPStatus = HTTPStatus.OK, head: bool) -> None:
        self._send(status, (json.dumps(value, indent=1) + "\n").encode(), "application/json", head=head)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, *, head: bool, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


class AsrptHTTPServer(ThreadingHTTPServer):
    """The endpoint; ``serve_forever`` runs in a daemon thread started by :func:`start_http_server`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], daemon: Any) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        #: The ``asrpt.daemon.service.Daemon`` whose last cycle is served.
        self.asrpt = daemon
        self.page = _page()
        self.csp = (
            f"default-src 'none'; script-src {_script_hashes(self.page)}; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        self._accuracy: tuple[float, Any] | None = None
        self._accuracy_lock = threading.Lock()
        super().__init__(address, _Handler)

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"

    # -- what the routes serve ------------------------------------------------------------------
    def queue(self, query: dict[str, list[str]]) -> dict[str, Any]:
        stats = self.asrpt.stats
        rows = stats.forecast_rows
        users = {u for value in query.get("user", []) for u in value.split(",") if u}
        parts = {p for value in query.get("partition", []) for p in value.split(",") if p}
        if users:
            rows = tuple(r for r in rows if r.user in users)
        if parts:
            rows = tuple(r for r in rows if r.partition in parts or parts.intersection(r.partitions))
        out = queue_json(_in_order(rows), made_at_s=stats.forecast_made_at_s, policy=self.asrpt.policy.name)
        out["now_s"] = time.time()
        return out

    def eta(self, job_id: str) -> dict[str, Any] | None:
        stats = self.asrpt.stats
        for row in stats.forecast_rows:
            if row.slurm_job_id == job_id:
                return job_json(row, made_at_s=stats.forecast_made_at_s)
        return None

    def accuracy(self) -> Any:
        """The history's recent prediction and forecast error, cached for a minute."""
        with self._accuracy_lock:
            now = time.monotonic()
            if self._accuracy is not None and now - self._accuracy[0] < ACCURACY_TTL_S:
                return self._accuracy[1]
            try:
                summary = self.asrpt.repository.recent_accuracy(limit=ACCURACY_JOBS)
            except AsrptError as error:
                log.warning("accuracy metrics unavailable: %s", error)
                summary = None
            self._accuracy = (now, summary)
            return summary

    def metrics(self) -> str:
        return render_metrics(self.asrpt, self.accuracy())


def _in_order(rows: Any) -> list[Any]:
    """Running jobs (soonest end first), then pending jobs by their place in the order."""

    def key(row: Any) -> tuple[Any, ...]:
        if row.running:
            end = row.predicted_end_s if row.predicted_end_s is not None and math.isfinite(row.predicted_end_s) else math.inf
            return (0, end, row.slurm_job_id)
        return (1, row.position if row.position is not None else math.inf, row.slurm_job_id)

    return sorted(rows, key=key)


def spool_backlog(directory: str) -> int:
    """Submission records waiting in a spool directory (``*.json`` files; temporaries and
    ``rejected/`` do not count). A missing directory has none."""
    try:
        with os.scandir(directory) as entries:
            return sum(
                1
                for entry in entries
                if entry.name.endswith(".json") and not entry.name.startswith(".") and entry.is_file(follow_symlinks=False)
            )
    except OSError:
        return 0


def _value(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def health(stats: Any) -> tuple[HTTPStatus, str]:
    """``/healthz``: ok while the last cycle succeeded; 503 ``degraded`` with the last error
    otherwise, so that a probe sees a daemon that runs but no longer schedules."""
    if not stats.consecutive_failures:
        return HTTPStatus.OK, "ok\n"
    error = " ".join(str(stats.last_error).split())
    return HTTPStatus.SERVICE_UNAVAILABLE, f"degraded: {stats.consecutive_failures} cycle(s) failed in a row; last error: {error}\n"


def render_metrics(daemon: Any, accuracy: Any) -> str:
    """Prometheus text exposition (format 0.0.4) of the daemon's counters and gauges."""
    stats = daemon.stats
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float | int | None]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {_value(value)}" if text else f"{name} {_value(value)}")

    metric("asrpt_info", "gauge", "asrptd's version and the policy it runs.", [({"version": __version__, "policy": daemon.policy.name}, 1)])
    metric("asrpt_cycles_total", "counter", "Scheduling cycles completed.", [({}, stats.cycles)])
    metric("asrpt_cycle_failures_total", "counter", "Cycles that failed (Slurm unreadable, database down, or an unexpected error).", [({}, stats.failures)])
    metric(
        "asrpt_cycle_errors_unexpected_total", "counter",
        "Failed cycles whose error asrpt did not anticipate (logged with a traceback once per kind).",
        [({}, getattr(stats, "escaped", 0))],
    )
    metric(
        "asrpt_jobs_isolated_total", "counter",
        "Jobs whose own data could not be used, scheduled as ordinary jobs (reason in asrpt explain).",
        [({}, getattr(stats, "jobs_isolated", 0))],
    )
    metric("asrpt_cycle_consecutive_failures", "gauge", "Cycles failed in a row (the back-off grows with it).", [({}, stats.consecutive_failures)])
    metric("asrpt_cycle_duration_seconds", "gauge", "Wall time of the last successful cycle.", [({}, stats.last_duration_s)])
    metric(
        "asrpt_last_cycle_timestamp_seconds", "gauge", "When the last successful cycle ran (Unix time; 0 before the first).",
        [({}, stats.last_cycle_s)],
    )
    metric(
        "asrpt_jobs", "gauge", "Accelerator jobs by state at the last cycle (held: pending jobs asrpt holds).",
        [({"state": "pending"}, stats.pending), ({"state": "running"}, stats.running), ({"state": "held"}, stats.held)],
    )
    metric("asrpt_slurm_writes_total", "counter", "scontrol calls made to carry out decisions.", [({}, stats.slurm_writes)])
    metric("asrpt_spool_accepted_total", "counter", "Submission records ingested from the spool.", [({}, stats.spool_accepted)])
    spool = daemon.config.spool
    backlog = [({"spool": "wrapper"}, spool_backlog(spool.dir))]
    plugin_dir = getattr(spool, "plugin_dir", "")
    if plugin_dir:
        backlog.append(({"spool": "plugin"}, spool_backlog(plugin_dir)))
    metric("asrpt_spool_backlog_files", "gauge", "Submission records waiting in the spool directory.", backlog)
    metric("asrpt_forecast_failures_total", "counter", "Cycles whose forecasts could not be stored.", [({}, stats.forecast_failures)])
    if accuracy is not None:
        metric(
            "asrpt_prediction_error_percent_median", "gauge",
            f"Median absolute error of the first iteration prediction, percent of the actual, over the last {ACCURACY_JOBS} finished jobs.",
            [({}, accuracy.median_abs_pct_iterations_error)],
        )
        metric(
            "asrpt_eta_error_seconds_median", "gauge",
            f"Median absolute error of the first forecast start/end against what happened, over the last {ACCURACY_JOBS} finished jobs.",
            [({"kind": "start"}, accuracy.median_abs_start_error_s), ({"kind": "end"}, accuracy.median_abs_end_error_s)],
        )
        metric(
            "asrpt_accuracy_samples", "gauge", "Finished jobs behind each accuracy figure.",
            [
                ({"kind": "iterations"}, accuracy.iterations_samples),
                ({"kind": "start"}, accuracy.start_samples),
                ({"kind": "end"}, accuracy.end_samples),
            ],
        )
    return "\n".join(lines) + "\n"


def start_http_server(daemon: Any, bind: str) -> AsrptHTTPServer:
    """Serve ``daemon``'s last cycle on ``bind`` from a daemon thread; ``shutdown()`` stops it."""
    server = AsrptHTTPServer(parse_bind(bind), daemon)
    thread = threading.Thread(target=server.serve_forever, name="asrptd-http", daemon=True)
    thread.start()
    log.info("read-only HTTP endpoint on %s", server.url)
    return server
