"""asrptd's optional read-only HTTP endpoint: the queue and ETAs as JSON, Prometheus metrics,
and a small page that draws the queue as a timeline.

Enabled by ``[daemon] http_bind`` (``127.0.0.1:8787``; a bare port or ``:port`` binds to
127.0.0.1 only). Everything is served from what the last cycle left in memory, except the
prediction-error metrics, which read the history at most once a minute. Nothing here changes
anything: GET and HEAD only, every other method gets 405. The answers name users and jobs;
contrib/slurm/README-http.md says how to expose it safely (reverse proxy with TLS and
authentication; never bind it to a public address directly).

Limits, so that the endpoint never takes what the cycle needs (descriptors, threads): one
request per connection (then it is closed); the request head must arrive whole within
``request_timeout_s`` (trickling bytes does not extend it: slowloris) and fit in
``max_request_bytes``; at most ``max_connections`` are open at once: beyond it the oldest one
still sending its request is dropped, else the new one gets 503.

DNS rebinding (a web page whose name is made to resolve to this machine reads ``/queue``) is
refused by the Host header: only this machine's names (localhost, its hostname and FQDN, the
bind address), the IP address the client connected to, and ``allowed_hosts`` (``[daemon]
http_allowed_hosts``: a reverse proxy's public name) are answered; any other Host gets 421,
a missing one (HTTP/1.1) 400.

With Slurm's ``PrivateData=jobs`` (read as :mod:`asrpt.cli.queue_privacy` says, at most once
a minute) the endpoint cannot tell who asks, so ``/queue`` serves only aggregate counts
(``counts``; ``jobs`` is empty) and ``/eta/<jobid>`` answers 403.

Routes: ``/`` (HTML timeline), ``/queue`` (optionally ``?user=a,b&partition=p``),
``/eta/<jobid>``, ``/metrics``, ``/healthz``.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import ipaddress
import json
import logging
import math
import os
import re
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from asrpt import __version__
from asrpt.cli.queue_privacy import CachedJobPrivacy, JobPrivacy, counts, daemon_privacy_reader
from asrpt.cli.queue_view import job_json, queue_json
from asrpt.exceptions import AsrptError, ConfigError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
#: How long the history-derived accuracy metrics are reused, seconds.
ACCURACY_TTL_S = 60.0
#: Finished jobs the accuracy metrics look at (the most recent ones).
ACCURACY_JOBS = 200
#: How long Slurm's PrivateData setting is reused, seconds.
PRIVACY_TTL_S = 60.0
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds a client has for its whole request head, and for each write of the answer.
REQUEST_TIMEOUT_S = 10.0
#: Connections open at once (each is a descriptor and a thread of this process).
MAX_CONNECTIONS = 64
#: Largest request head (request line and headers), bytes.
MAX_REQUEST_BYTES = 8192
_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")


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

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # socket timeout of every read and write
        super().setup()

    def handle(self) -> None:
        """One request, read with a deadline for its whole head, then the connection closes."""
        head = self._read_head()
        if head is None:
            return
        self.server.request_received(self.request)
        stream, self.rfile = self.rfile, io.BytesIO(head)
        stream.close()  # else its reference keeps the socket's descriptor open
        self.connection.settimeout(self.server.request_timeout_s)
        self.handle_one_request()
        self.close_connection = True

    def _read_head(self) -> bytes | None:
        """The request line and headers, or None (answered 408/431, or the client went away)."""
        limit = self.server.max_request_bytes
        deadline_s = time.monotonic() + self.server.request_timeout_s
        data = bytearray()
        while True:
            end = _END_OF_HEAD.search(data)
            if end is not None and end.end() <= limit:
                return bytes(data[: end.end()])
            if end is not None or len(data) >= limit:
                self._refuse_raw(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"request head over {limit} bytes")
                return None
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                self._refuse_raw(HTTPStatus.REQUEST_TIMEOUT, f"request head not received within {self.server.request_timeout_s:g} s")
                return None
            self.connection.settimeout(remaining_s)
            try:
                chunk = self.connection.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        refusal = self._host_refusal()
        if refusal is None:
            return True
        status, why = refusal
        self._json({"error": why}, status=status, head=self.command == "HEAD")
        return False

    def _host_refusal(self) -> tuple[HTTPStatus, str] | None:
        """Why the Host header is not acceptable, or None when it is."""
        values = self.headers.get_all("Host") or []
        if len(values) > 1:
            return HTTPStatus.BAD_REQUEST, "more than one Host header"
        if not values:
            if self.request_version >= "HTTP/1.1":
                return HTTPStatus.BAD_REQUEST, "an HTTP/1.1 request needs a Host header"
            return None  # HTTP/1.0 without Host: not a browser
        try:
            name = host_name(values[0])
        except ValueError:
            return HTTPStatus.BAD_REQUEST, f"malformed Host header {values[0]!r}"
        if self.server.host_allowed(name, local_address=self.connection.getsockname()[0]):
            return None
        return (
            HTTPStatus.MISDIRECTED_REQUEST,
            f"Host {values[0]!r} is not a name of this server (a proxy's name belongs in its allowed hosts)",
        )

    def _refuse_raw(self, status: HTTPStatus, why: str) -> None:
        """Answer before any request was parsed (best effort: the client may be gone)."""
        self.connection.settimeout(1.0)
        try:
            self.connection.sendall(_raw_answer(status, why))
        except OSError:
            pass

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
            elif path.startswith("/eta/") and self.server.privacy().private_jobs:
                why = "Slurm's PrivateData=jobs: per-job forecasts are not served over HTTP (it cannot tell who asks); use asrpt eta"
                self._json({"error": why}, status=HTTPStatus.FORBIDDEN, head=head)
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
        self.send_header("Connection", "close")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def host_name(value: str) -> str:
    """The name in a Host header (``name``, ``name:port``, ``[v6]:port``), lower case, without a
    trailing dot; ValueError when it is malformed."""
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(value)
        name, rest = text[1:end], text[end + 1 :]
        if rest and not (rest[0] == ":" and rest[1:].isdigit()):
            raise ValueError(value)
    elif text.count(":") == 1:
        name, port = text.split(":")
        if not port.isdigit():
            raise ValueError(value)
    elif ":" in text:
        raise ValueError(value)  # a bare IPv6 address needs brackets
    else:
        name = text
    name = name.lower().rstrip(".")
    if not name or any(c.isspace() or c in "/@\\" for c in name):
        raise ValueError(value)
    return name


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _raw_answer(status: HTTPStatus, why: str) -> bytes:
    body = (json.dumps({"error": why}) + "\n").encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class AsrptHTTPServer(ThreadingHTTPServer):
    """The endpoint; ``serve_forever`` runs in a daemon thread started by :func:`start_http_server`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # waiting in the kernel, not in this process

    def __init__(
        self,
        address: tuple[str, int],
        daemon: Any,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        allowed_hosts: Any = (),
        job_privacy: Callable[[], JobPrivacy] | None = None,
    ) -> None:
        if not (request_timeout_s > 0 and max_connections >= 1 and max_request_bytes >= 64):
            raise ConfigError(
                f"HTTP limits: request_timeout_s {request_timeout_s} must be > 0, max_connections "
                f"{max_connections} >= 1, max_request_bytes {max_request_bytes} >= 64"
            )
        self.request_timeout_s = float(request_timeout_s)
        self.max_connections = int(max_connections)
        self.max_request_bytes = int(max_request_bytes)
        #: Open connections: socket -> [accepted at (monotonic s), still reading its request].
        self._connections: dict[socket.socket, list[Any]] = {}
        self._connections_lock = threading.Lock()
        if isinstance(allowed_hosts, str):
            allowed_hosts = allowed_hosts.split(",")
        names = {"localhost", socket.gethostname(), socket.getfqdn(), *(h for h in allowed_hosts if h.strip())}
        if _ip(address[0]) is None or not _ip(address[0]).is_unspecified:  # type: ignore[union-attr]
            names.add(address[0])
        try:
            #: Host names answered (lower case, no trailing dot); IP addresses are checked per connection.
            self.allowed_hosts = frozenset(host_name(n) for n in names if n)
        except ValueError as error:
            raise ConfigError(f"HTTP allowed hosts: {str(error)!r} is not a host name") from None
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
        #: Slurm's PrivateData setting, read at most once a minute.
        self.privacy = CachedJobPrivacy(job_privacy or self._slurm_privacy, ttl_s=PRIVACY_TTL_S)
        super().__init__(address, _Handler)

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()

    # -- connection limit ------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._admit(request):
            try:
                request.setblocking(False)
                request.send(_raw_answer(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections"))
            except OSError:
                pass
            super().shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _admit(self, request: socket.socket) -> bool:
        """Take a slot for ``request``; at the cap, drop the oldest connection still reading."""
        with self._connections_lock:
            if len(self._connections) >= self.max_connections:
                reading = [sock for sock, (_, still_reading) in self._connections.items() if still_reading]
                if not reading:
                    return False
                oldest = min(reading, key=lambda sock: self._connections[sock][0])
                del self._connections[oldest]
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread sees the end and closes it
                except OSError:
                    pass
            self._connections[request] = [time.monotonic(), True]
            return True

    def request_received(self, request: socket.socket) -> None:
        """``request`` has sent its head: it is served now, no longer a candidate to drop."""
        with self._connections_lock:
            if request in self._connections:
                self._connections[request][1] = False

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def host_allowed(self, name: str, *, local_address: str) -> bool:
        """A Host name this server answers: one of its names, or a loopback address or the
        address the client reached (an address literal cannot be rebound by DNS)."""
        if name in self.allowed_hosts or name.endswith(".localhost"):
            return True
        address = _ip(name)
        return address is not None and (address.is_loopback or address == _ip(local_address))

    def connection_count(self) -> int:
        """Connections holding a slot now."""
        with self._connections_lock:
            return len(self._connections)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"

    # -- what the routes serve ------------------------------------------------------------------
    def _slurm_privacy(self) -> JobPrivacy:
        slurm = self.asrpt.config.slurm
        return daemon_privacy_reader(slurm.slurm_conf, slurm.bin_dir, consequence="/queue serves counts only", log=log)()

    def queue(self, query: dict[str, list[str]]) -> dict[str, Any]:
        stats = self.asrpt.stats
        rows = stats.forecast_rows
        if self.privacy().private_jobs:  # no caller identity over TCP: nothing that names a job
            out = queue_json([], made_at_s=stats.forecast_made_at_s, policy=self.asrpt.policy.name)
            out.update(private_data="jobs", counts=counts(rows), now_s=time.time())
            return out
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
        [({}, stats.escaped)],
    )
    metric(
        "asrpt_jobs_isolated_total", "counter",
        "Jobs whose own data could not be used, scheduled as ordinary jobs (reason in asrpt explain).",
        [({}, stats.jobs_isolated)],
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


def _bind_problem(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"the host name cannot be resolved ({error.strerror})"
    reasons = {
        errno.EADDRINUSE: "the port is in use (another asrptd, or another service)",
        errno.EADDRNOTAVAIL: "not an address of this machine",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
    }
    return reasons.get(error.errno or 0, error.strerror or str(error))


def start_http_server(daemon: Any, bind: str, **limits: Any) -> AsrptHTTPServer:
    """Serve ``daemon``'s last cycle on ``bind`` from a daemon thread; ``shutdown()`` stops it.
    ``limits``: ``request_timeout_s``, ``max_connections``, ``max_request_bytes``,
    ``allowed_hosts`` (extra Host names to answer, e.g. a reverse proxy's; default: the
    configuration's ``[daemon] http_allowed_hosts``)."""
    limits.setdefault("allowed_hosts", daemon.config.daemon.http_allowed_hosts)
    host, port = parse_bind(bind)
    try:
        server = AsrptHTTPServer((host, port), daemon, **limits)
    except OSError as error:
        raise ConfigError(f"[daemon] http_bind {bind!r}: cannot listen on {host} port {port}: {_bind_problem(error)}") from None
    thread = threading.Thread(target=server.serve_forever, name="asrptd-http", daemon=True)
    thread.start()
    log.info("read-only HTTP endpoint on %s", server.url)
    return server
