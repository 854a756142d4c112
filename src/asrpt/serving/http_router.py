"""An OpenAI-compatible HTTP router in front of real engine endpoints (vLLM and the like).

The request-level simulator's routing rules (:mod:`asrpt.serving.router`), run against
live engines: the router proxies ``POST /v1/completions``, ``POST /v1/chat/completions``
and ``GET /v1/models`` to one of its backends and picks that backend with the same policy
objects the simulator uses (``kv-aware`` sends a request where the largest
``w = T * exp(theta * kv_usage)`` across backends ends up smallest; round robin and the
other baselines as in the simulator). Standard library only.

What the router knows about a backend comes from two places:

* its Prometheus ``/metrics``, scraped by one background thread per backend every
  ``scrape_interval_s`` (default 1 s): ``vllm:kv_cache_usage_perc`` (older vLLM:
  ``vllm:gpu_cache_usage_perc``; SGLang's ``sglang:token_usage`` is accepted too),
  ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (SGLang:
  ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``), and the KV capacity from
  ``vllm:cache_config_info`` (``num_gpu_blocks`` x ``block_size``) when exported. Several
  samples of one metric (several engines behind one endpoint) are averaged for the usage
  and summed for the counts. vLLM exports usage as a fraction in [0, 1]; a value in
  (1, 100] is read as a percentage. A backend whose metrics are unreachable, not HTTP 200,
  or lack a finite KV usage is *down*: it gets no requests until a scrape succeeds again.
  So is a backend that refuses a connection when a request is forwarded (the request is
  then tried on another backend, since the refused one never saw it).
* its own count of requests in flight, between scrapes: outstanding = scraped running +
  waiting + (in flight now - in flight when that scrape started), at least the requests
  in flight; the eventual footprint (prompt + predicted output) of requests sent since
  the last scrape is added to the scraped KV usage.

T, the time to finish what a backend holds plus this request, is ``(outstanding + 1) x
T_r`` with ``T_r`` the request's own time on that backend. With a latency fit (``asrpt
serving fit`` output, one fit key ``<model>/<accelerator>/tp<t>`` per backend) ``T_r`` is
:meth:`asrpt.serving.cost.RequestCostModel.request_time_s` at that backend's KV capacity
(scraped, else the memory model's for a known model and accelerator, else
:data:`DEFAULT_KV_CAPACITY_TOKENS`). Without a fit ``T_r`` is one unit: T is the queue
length plus one, and kv-aware becomes ``(outstanding + 1) * exp(theta * kv_usage)``.

Token counts are estimates from the request body, the router does not tokenize: a prompt
string (or chat message content) counts ``ceil(characters / 4)`` tokens, a chat message
4 more for its role and framing, a prompt given as token ids counts its ids; the predicted
output is ``max_tokens`` (or ``max_completion_tokens``) times ``n``, else
``default_output_tokens`` (256).

Bodies and status codes pass through unchanged (an engine's 400 reaches the client as
it was sent); responses without a Content-Length (``"stream": true``: server-sent
events) are forwarded chunk by chunk as they arrive. Every proxied response carries
``X-Asrpt-Backend: <backend url>``. When no backend is up the answer is 503 with an
OpenAI-style JSON error body. The router's own ``GET /metrics`` (Prometheus text) counts
requests per backend and shows each backend's up state and last KV usage;
``GET /healthz`` is 200 while a backend is up, else 503.
"""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import math
import re
import socket
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping, Sequence

from asrpt.serving.cost import RequestCostModel
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.errors import ConfigError
from asrpt.serving.latency_model import InstanceLatency
from asrpt.serving.router import POLICY_NAMES, InstanceView, RoutedRequest, Router, make_router

log = logging.getLogger(__name__)

#: KV capacity assumed for a backend whose metrics do not export it and whose fit key
#: names no known model/accelerator; it only scales the request's own footprint.
DEFAULT_KV_CAPACITY_TOKENS = 100_000
DEFAULT_OUTPUT_TOKENS = 256
#: Typical prompt for the weighted round robin's weights.
TYPICAL_PROMPT_TOKENS = 512
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
MAX_METRICS_BYTES = 8 << 20
PROXIED_POST_PATHS = ("/v1/completions", "/v1/chat/completions")
BACKEND_HEADER = "X-Asrpt-Backend"

KV_USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
RUNNING_METRICS = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING_METRICS = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
CACHE_INFO_METRIC = "vllm:cache_config_info"

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "content-length", "host", "expect"})
#: Response headers the router's own server writes.
_OWN_RESPONSE_HEADERS = frozenset({"server", "date"})


# --------------------------------------------------------------------------- Prometheus text


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class ParsedMetrics:
    samples: tuple[Sample, ...]
    #: Lines that were neither comments, blank, nor valid samples.
    malformed: int
    first_malformed: str | None = None

    def values(self, name: str) -> list[float]:
        return [s.value for s in self.samples if s.name == name]

    def with_name(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name]


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPECIAL_VALUES = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_value(token: str) -> float:
    special = _SPECIAL_VALUES.get(token.lower())
    if special is not None:
        return special
    if not _NUMBER.fullmatch(token):
        raise ValueError(f"not a sample value: {token!r}")
    return float(token)


def _skip_spaces(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Labels from the ``{`` at ``pos``; returns them and the position after ``}``."""
    labels: dict[str, str] = {}
    pos += 1
    while True:
        pos = _skip_spaces(line, pos)
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if not match:
            raise ValueError("bad label name")
        name = match.group()
        pos = _skip_spaces(line, match.end())
        if line[pos:pos + 1] != "=":
            raise ValueError("expected '=' after a label name")
        pos = _skip_spaces(line, pos + 1)
        if line[pos:pos + 1] != '"':
            raise ValueError("expected a quoted label value")
        pos += 1
        value = []
        while True:
            if pos >= len(line):
                raise ValueError("unterminated label value")
            char = line[pos]
            if char == "\\":
                escaped = line[pos + 1:pos + 2]
                value.append(_ESCAPES.get(escaped, "\\" + escaped))
                pos += 2
                continue
            pos += 1
            if char == '"':
                break
            value.append(char)
        if name in labels:
            raise ValueError(f"label {name!r} given twice")
        labels[name] = "".join(value)
        pos = _skip_spaces(line, pos)
        if line[pos:pos + 1] == ",":
            pos += 1
        elif line[pos:pos + 1] != "}":
            raise ValueError("expected ',' or '}' after a label")


def parse_sample_line(line: str) -> Sample:
    """One sample line ``name{label="value",...} value [timestamp]``; raises ValueError."""
    match = _METRIC_NAME.match(line)
    if not match:
        raise ValueError("no metric name")
    pos = match.end()
    labels: dict[str, str] = {}
    brace = _skip_spaces(line, pos)
    if line[brace:brace + 1] == "{":
        labels, pos = _parse_labels(line, brace)
    rest = line[pos:]
    if rest[:1] not in (" ", "\t"):
        raise ValueError("expected whitespace before the value")
    rest = rest.split(" # ", 1)[0]  # OpenMetrics exemplar
    tokens = rest.split()
    if len(tokens) not in (1, 2):
        raise ValueError("expected a value and at most a timestamp")
    value = _parse_value(tokens[0])
    if len(tokens) == 2:
        _parse_value(tokens[1])
    return Sample(match.group(), labels, value)


def parse_prometheus_text(text: str) -> ParsedMetrics:
    """Samples of a Prometheus (or OpenMetrics) text exposition. Comments (``# HELP``,
    ``# TYPE``, ``# EOF``) and blank lines are skipped; a malformed line is counted and
    skipped, never fatal."""
    samples: list[Sample] = []
    malformed = 0
    first_malformed = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(parse_sample_line(line))
        except ValueError:
            malformed += 1
            if first_malformed is None:
                first_malformed = line[:120]
    return ParsedMetrics(tuple(samples), malformed, first_malformed)


class MetricsUnavailable(Exception):
    """A backend's metrics cannot be used for routing; the message says why."""


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    #: KV-cache usage as a fraction of capacity.
    kv_usage: float
    running: float
    waiting: float
    #: KV capacity in tokens, when the engine exports its cache configuration.
    kv_capacity_tokens: int | None = None
    #: Whether the engine exported the queue metrics (missing ones count as 0).
    queue_known: bool = True


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def engine_metrics(parsed: ParsedMetrics) -> EngineMetrics:
    """What routing needs from a scrape; raises :class:`MetricsUnavailable` when there is
    no finite KV usage (nothing parsed, a different exporter, NaN)."""
    if not parsed.samples:
        detail = f" (first bad line: {parsed.first_malformed!r})" if parsed.first_malformed else ""
        raise MetricsUnavailable(f"no Prometheus samples{detail}")
    usage = None
    for name in KV_USAGE_METRICS:
        values = _finite(parsed.values(name))
        if values:
            usage = sum(values) / len(values)
            break
    if usage is None:
        raise MetricsUnavailable(f"no finite {' / '.join(KV_USAGE_METRICS)}")
    if usage < 0 or usage > 100:
        raise MetricsUnavailable(f"KV usage {usage} out of range")
    if usage > 1:
        usage /= 100.0

    def count(names: Sequence[str]) -> float | None:
        for name in names:
            values = _finite(parsed.values(name))
            if values:
                return max(0.0, sum(values))
        return None

    running, waiting = count(RUNNING_METRICS), count(WAITING_METRICS)
    capacity = 0
    for sample in parsed.with_name(CACHE_INFO_METRIC):
        try:
            capacity += int(float(sample.labels["num_gpu_blocks"])) * int(float(sample.labels["block_size"]))
        except (KeyError, ValueError, OverflowError):
            continue
    return EngineMetrics(kv_usage=usage, running=running or 0.0, waiting=waiting or 0.0,
                         kv_capacity_tokens=capacity if capacity > 0 else None,
                         queue_known=running is not None and waiting is not None)


# --------------------------------------------------------------------------- configuration


def normalise_backend_url(text: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing slash; a trailing ``/v1`` (the
    OpenAI base URL people copy) is dropped. Raises :class:`ConfigError`."""
    url = text.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ConfigError(f"bad backend URL {text!r}: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"bad backend URL {text!r}: expected http://HOST[:PORT], e.g. http://10.0.0.5:8000")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"bad backend URL {text!r}: no query, fragment or credentials allowed")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None:
        netloc += f":{port}"
    return f"{parts.scheme}://{netloc}{path}"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; ``:8080`` = 127.0.0.1). Raises ConfigError."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"bad --listen {text!r}: expected HOST:PORT with PORT in 0-65535, e.g. 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"bad --listen {text!r}: write IPv6 addresses in brackets, e.g. [::1]:8080")
    return host or "127.0.0.1", int(port_text)


class QueueCost:
    """``T_r`` without a latency fit: every request costs one unit, so T is a queue length."""

    def request_time_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return 1.0


QUEUE_COST = QueueCost()


def _text_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def _prompt_tokens(prompt: object) -> int:
    if isinstance(prompt, str):
        return _text_tokens(prompt)
    if isinstance(prompt, list):
        if all(isinstance(x, int) for x in prompt):
            return len(prompt)  # token ids
        return sum(_prompt_tokens(x) for x in prompt)
    return 0


def _content_tokens(content: object) -> int:
    if isinstance(content, str):
        return _text_tokens(content)
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return sum(_text_tokens(part["text"]) for part in content
                   if isinstance(part, dict) and isinstance(part.get("text"), str))
    return 0


def estimate_prompt_tokens(body: object) -> int:
    """Prompt tokens of a completions or chat request, estimated (see the module doc)."""
    if not isinstance(body, dict):
        return 0
    if "messages" in body:
        messages = body["messages"] if isinstance(body["messages"], list) else []
        return sum(MESSAGE_OVERHEAD_TOKENS + _content_tokens(m.get("content")) for m in messages if isinstance(m, dict))
    return _prompt_tokens(body.get("prompt"))


def estimate_output_tokens(body: object, default: int = DEFAULT_OUTPUT_TOKENS) -> int:
    """``max_tokens`` / ``max_completion_tokens`` times ``n``, else ``default``."""
    if not isinstance(body, dict):
        return default
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    tokens = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else default
    n = body.get("n")
    return tokens * (n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1)


# --------------------------------------------------------------------------- backends


@dataclass(slots=True, kw_only=True)
class BackendState:
    """One backend as the router sees it; mutated under the router's lock."""

    index: int
    url: str
    latency: InstanceLatency | None = None
    #: KV capacity from the memory model of the backend's fit key, if known.
    static_kv_capacity_tokens: int | None = None
    up: bool = False
    reason: str = "not scraped yet"
    metrics: EngineMetrics | None = None
    last_kv_usage: float = math.nan
    #: time.monotonic() when the last successful scrape started.
    scraped_at: float = -math.inf
    inflight_at_scrape: int = 0
    #: request id -> (KV footprint in tokens, time.monotonic() when sent)
    inflight: dict[int, tuple[int, float]] = field(default_factory=dict)
    routed_total: int = 0
    errors_total: int = 0
    scrapes_total: int = 0
    scrape_failures_total: int = 0

    def kv_capacity_tokens(self) -> int:
        if self.metrics is not None and self.metrics.kv_capacity_tokens:
            return self.metrics.kv_capacity_tokens
        return self.static_kv_capacity_tokens or DEFAULT_KV_CAPACITY_TOKENS

    def outstanding(self) -> int:
        inflight = len(self.inflight)
        if self.metrics is None:
            return inflight
        scraped = int(round(self.metrics.running + self.metrics.waiting))
        return max(inflight, scraped + inflight - self.inflight_at_scrape)

    def view(self, position: int, request: RoutedRequest) -> InstanceView:
        capacity = self.kv_capacity_tokens()
        cost = (RequestCostModel(latency=self.latency, kv_capacity_tokens=capacity,
                                 max_num_seqs=EngineConfig().max_num_seqs)
                if self.latency is not None else QUEUE_COST)
        usage = self.metrics.kv_usage if self.metrics is not None else 0.0
        since_scrape = sum(fp for fp, sent in self.inflight.values() if sent >= self.scraped_at)
        outstanding = self.outstanding()
        per_request = cost.request_time_s(request.prompt_tokens, request.predicted_output_tokens)
        return InstanceView(index=position, cost=cost, kv_capacity_tokens=capacity,  # type: ignore[arg-type]
                            kv_used_tokens=int(round(usage * capacity)) + since_scrape, outstanding=outstanding,
                            drain=lambda: outstanding * per_request)


def _backend_latencies(urls: Sequence[str], fits: object | None, backend_fits: Mapping[str, str]
                       ) -> dict[str, tuple[InstanceLatency, int | None]]:
    """Latency model and memory-model KV capacity per backend URL from its fit key."""
    if not backend_fits:
        if fits is not None:
            raise ConfigError("--fit needs a --backend-fit URL=KEY for every backend")
        return {}
    if fits is None:
        raise ConfigError("--backend-fit needs --fit FIT.json")
    from asrpt.serving.hardware import find_accelerator
    from asrpt.serving.memory import kv_capacity_tokens
    from asrpt.serving.models import find_model
    from asrpt.serving.profiles import ProfileKey

    unknown = [u for u in backend_fits if u not in urls]
    if unknown:
        raise ConfigError(f"--backend-fit for {', '.join(unknown)}, which is not one of the --backend URLs")
    missing = [u for u in urls if u not in backend_fits]
    if missing:
        raise ConfigError(f"--fit given but no --backend-fit for {', '.join(missing)}: a fitted time and a queue "
                          "length cannot be compared, so every backend needs a fit key")
    result = {}
    for url, label in backend_fits.items():
        try:
            key = ProfileKey.parse(label)
        except ValueError as error:
            raise ConfigError(f"--backend-fit {url}={label}: {error}") from None
        latency = fits.latency(key.model, key.hardware, key.tp)  # type: ignore[attr-defined]
        model, accelerator = find_model(key.model), find_accelerator(key.hardware)
        capacity = None
        if model is not None and accelerator is not None:
            capacity = kv_capacity_tokens(model, accelerator, key.tp, EngineConfig())
        result[url] = (latency, capacity if capacity and capacity > 0 else None)
    return result


class AllBackendsDown(Exception):
    pass


# --------------------------------------------------------------------------- the router


class HttpRouter:
    """The proxy, its metric pollers and its policy. ``start()`` binds, scrapes every
    backend once and serves in a background thread; ``serve_forever()`` serves in the
    calling thread; ``stop()`` ends both."""

    def __init__(self, backends: Sequence[str], *, policy: str = "kv-aware", theta: float = 2.0,
                 listen: tuple[str, int] = ("127.0.0.1", 8080), scrape_interval_s: float = 1.0,
                 scrape_timeout_s: float | None = None, fits: object | None = None,
                 backend_fits: Mapping[str, str] | None = None, default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
                 request_timeout_s: float = 600.0) -> None:
        urls = [normalise_backend_url(b) for b in backends]
        if not urls:
            raise ConfigError("the router needs at least one --backend URL")
        duplicates = sorted({u for u in urls if urls.count(u) > 1})
        if duplicates:
            raise ConfigError(f"backend given twice: {', '.join(duplicates)}")
        if policy not in POLICY_NAMES:
            raise ConfigError(f"unknown routing policy {policy!r}; known: {', '.join(POLICY_NAMES)}")
        if not math.isfinite(theta):
            raise ConfigError(f"--theta must be a finite number, got {theta}")
        if not scrape_interval_s > 0:
            raise ConfigError(f"--scrape-interval-s must be > 0, got {scrape_interval_s}")
        if default_output_tokens < 1:
            raise ConfigError(f"default output tokens must be >= 1, got {default_output_tokens}")
        fitted = _backend_latencies(urls, fits, {normalise_backend_url(u): k for u, k in (backend_fits or {}).items()})
        self.policy = policy
        self.theta = theta
        self.scrape_interval_s = scrape_interval_s
        self.scrape_timeout_s = scrape_timeout_s if scrape_timeout_s is not None else max(1.0, 2 * scrape_interval_s)
        self.default_output_tokens = default_output_tokens
        self.request_timeout_s = request_timeout_s
        self.backends = [BackendState(index=i, url=u, latency=fitted.get(u, (None, None))[0],
                                      static_kv_capacity_tokens=fitted.get(u, (None, None))[1])
                         for i, u in enumerate(urls)]
        self._listen = listen
        self._lock = threading.Lock()
        self._routers: dict[tuple[int, ...], Router] = {}
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self.unavailable_total = 0

    # ------------------------------------------------------------------ lifecycle

    def bind(self) -> tuple[str, int]:
        if self._server is None:
            try:
                self._server = _Server(self._listen, _Handler, self)
            except OSError as error:
                raise ConfigError(f"cannot listen on {self._listen[0]}:{self._listen[1]}: "
                                  f"{error.strerror or error}") from None
        return self.address

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "not bound"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start_polling(self) -> None:
        """One poller thread per backend; returns after every backend's first scrape."""
        first = [threading.Event() for _ in self.backends]
        for backend, done in zip(self.backends, first):
            thread = threading.Thread(target=self._poll, args=(backend, done), daemon=True,
                                      name=f"asrpt-scrape-{backend.index}")
            thread.start()
            self._threads.append(thread)
        for done in first:
            done.wait(self.scrape_timeout_s + 1.0)

    def start(self) -> "HttpRouter":
        self.bind()
        self.start_polling()
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},  # type: ignore[union-attr]
                                  daemon=True, name="asrpt-router-http")
        thread.start()
        self._threads.append(thread)
        return self

    def serve_forever(self) -> None:
        self.bind()
        self.start_polling()
        try:
            self._server.serve_forever(poll_interval=0.2)  # type: ignore[union-attr]
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            if any(t.name == "asrpt-router-http" for t in self._threads):
                server.shutdown()
            server.server_close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=self.scrape_timeout_s + 1.0)
        self._threads.clear()

    def __enter__(self) -> "HttpRouter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ scraping

    def _poll(self, backend: BackendState, first: threading.Event) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scrape(backend)
            except Exception as error:  # a poller must not die: the backend would keep its last state
                log.exception("scraping %s", backend.url)
                self._scrape_failed(backend, f"scrape failed: {error!r}")
            first.set()
            self._stop.wait(max(0.0, self.scrape_interval_s - (time.monotonic() - started)))

    def scrape(self, backend: BackendState) -> bool:
        """Scrape one backend now and update its state; whether it is up."""
        started = time.monotonic()
        with self._lock:
            inflight = len(backend.inflight)
        try:
            metrics = engine_metrics(parse_prometheus_text(self._fetch_metrics(backend.url)))
        except MetricsUnavailable as error:
            return self._scrape_failed(backend, str(error))
        except (OSError, http.client.HTTPException, UnicodeDecodeError) as error:
            return self._scrape_failed(backend, f"cannot scrape /metrics: {error or type(error).__name__}")
        with self._lock:
            if not backend.up:
                level = logging.INFO if backend.metrics is None else logging.WARNING  # first scrape / recovery
                log.log(level, "backend %s is up", backend.url)
            backend.up, backend.reason, backend.metrics = True, "ok", metrics
            backend.last_kv_usage = metrics.kv_usage
            backend.scraped_at, backend.inflight_at_scrape = started, inflight
            backend.scrapes_total += 1
        return True

    def _scrape_failed(self, backend: BackendState, reason: str, *, scraped: bool = True) -> bool:
        with self._lock:
            if backend.up or backend.reason != reason:
                log.warning("backend %s is down: %s", backend.url, reason)
            backend.up, backend.reason = False, reason
            backend.scrapes_total += scraped
            backend.scrape_failures_total += scraped
        return False

    def _fetch_metrics(self, base_url: str) -> str:
        status, _, body = _http_get(base_url + "/metrics", self.scrape_timeout_s, limit=MAX_METRICS_BYTES)
        if status != 200:
            raise MetricsUnavailable(f"/metrics answered HTTP {status}")
        return body.decode("utf-8")

    # ------------------------------------------------------------------ choosing

    def _router_for(self, positions: tuple[int, ...]) -> Router:
        """One policy object per set of healthy backends (round robins keep their turn)."""
        router = self._routers.get(positions)
        if router is None:
            costs = [RequestCostModel(latency=b.latency, kv_capacity_tokens=b.kv_capacity_tokens(),
                                      max_num_seqs=EngineConfig().max_num_seqs) if b.latency is not None else QUEUE_COST
                     for b in (self.backends[i] for i in positions)]
            router = make_router(self.policy, costs, typical_prompt_tokens=TYPICAL_PROMPT_TOKENS,  # type: ignore[arg-type]
                                 typical_output_tokens=self.default_output_tokens, theta=self.theta)
            self._routers[positions] = router
        return router

    def acquire(self, prompt_tokens: int, output_tokens: int, exclude: Sequence[int] = ()) -> tuple[BackendState, int]:
        """Choose a healthy backend for a request and count it in flight there; returns the
        backend and a ticket for :meth:`release`. Raises :class:`AllBackendsDown`."""
        request = RoutedRequest(prompt_tokens, output_tokens)
        with self._lock:
            healthy = tuple(b.index for b in self.backends if b.up and b.index not in exclude)
            if not healthy:
                self.unavailable_total += 1
                raise AllBackendsDown()
            views = [self.backends[i].view(position, request) for position, i in enumerate(healthy)]
            backend = self.backends[healthy[self._router_for(healthy).choose(request, views)]]
            ticket = next(self._ids)
            backend.inflight[ticket] = (prompt_tokens + output_tokens, time.monotonic())
            return backend, ticket

    def release(self, backend: BackendState, ticket: int, *, routed: bool, error: bool = False) -> None:
        with self._lock:
            backend.inflight.pop(ticket, None)
            backend.routed_total += routed
            backend.errors_total += error

    def mark_down(self, backend: BackendState, reason: str) -> None:
        """Down until its next good scrape (a forwarded request could not connect)."""
        self._scrape_failed(backend, reason, scraped=False)

    def any_up(self) -> bool:
        with self._lock:
            return any(b.up for b in self.backends)

    # ------------------------------------------------------------------ own metrics

    def metrics_text(self) -> str:
        lines = []

        def family(name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{labels} {_format_value(value)}" for labels, value in rows)

        with self._lock:
            per = [(f'{{backend="{_escape_label(b.url)}"}}', b) for b in self.backends]
            family("asrpt_router_requests_total", "counter", "Requests forwarded to each backend.",
                   [(lab, b.routed_total) for lab, b in per])
            family("asrpt_router_backend_errors_total", "counter",
                   "Requests that failed at a backend (connection or protocol errors, not HTTP error statuses).",
                   [(lab, b.errors_total) for lab, b in per])
            family("asrpt_router_backend_up", "gauge", "1 if the backend's metrics were usable at the last scrape.",
                   [(lab, 1.0 if b.up else 0.0) for lab, b in per])
            family("asrpt_router_backend_kv_usage", "gauge", "KV-cache usage (fraction) at the last good scrape.",
                   [(lab, b.last_kv_usage) for lab, b in per])
            family("asrpt_router_backend_outstanding", "gauge", "Requests the router has in flight at the backend.",
                   [(lab, len(b.inflight)) for lab, b in per])
            family("asrpt_router_backend_queue", "gauge", "Running plus waiting requests at the last good scrape.",
                   [(lab, (b.metrics.running + b.metrics.waiting) if b.metrics else math.nan) for lab, b in per])
            family("asrpt_router_backend_scrape_failures_total", "counter", "Failed scrapes of the backend's /metrics.",
                   [(lab, b.scrape_failures_total) for lab, b in per])
            family("asrpt_router_unavailable_total", "counter", "Requests answered 503 because no backend was up.",
                   [("", self.unavailable_total)])
        return "\n".join(lines) + "\n"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format_value(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) and not value.is_integer() else str(int(value))


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return cls(parts.hostname, parts.port, timeout=timeout), target  # type: ignore[arg-type]


def _http_get(url: str, timeout: float, *, limit: int) -> tuple[int, list[tuple[str, str]], bytes]:
    connection, target = _connection(url, timeout)
    try:
        connection.request("GET", target, headers={"Accept": "text/plain"})
        response = connection.getresponse()
        body = response.read(limit + 1)
        if len(body) > limit:
            raise MetricsUnavailable(f"/metrics larger than {limit} bytes")
        return response.status, response.getheaders(), body
    finally:
        connection.close()


def _error_body(status: int, message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": status}, "object": "error"}).encode()


# --------------------------------------------------------------------------- HTTP server


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, router: HttpRouter) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.router = router
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall on a slow resolver.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    # ------------------------------------------------------------------ helpers

    def _send_bytes(self, status: int, body: bytes, content_type: str = "application/json",
                    headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_error_json(self, status: int, message: str, kind: str) -> None:
        self._send_bytes(status, _error_body(status, message, kind))

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        return self.rfile.read(int(length))

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        router = self.server.router
        path = urllib.parse.urlsplit(self.path).path
        if path == "/metrics":
            self._send_bytes(200, router.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/healthz":
            with router._lock:
                up = [b.url for b in router.backends if b.up]
                down = {b.url: b.reason for b in router.backends if not b.up}
            body = json.dumps({"status": "ok" if up else "unavailable", "up": up, "down": down}).encode()
            self._send_bytes(200 if up else 503, body)
        elif path == "/v1/models":
            self._proxy("GET", None, 0, 0)
        elif path in PROXIED_POST_PATHS:
            self._send_error_json(405, f"{path} takes POST", "invalid_request_error")
        else:
            self._send_error_json(404, f"no route {path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802
        router = self.server.router
        path = urllib.parse.urlsplit(self.path).path
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            self._send_error_json(400, "bad request body framing", "invalid_request_error")
            return
        if path not in PROXIED_POST_PATHS:
            self._send_error_json(404, f"no route {path}", "not_found")
            return
        if body is None:
            self.close_connection = True
            self._send_error_json(411, "Content-Length required", "invalid_request_error")
            return
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None  # the engine answers with its own error
        self._proxy("POST", body, estimate_prompt_tokens(parsed),
                    estimate_output_tokens(parsed, router.default_output_tokens))

    def _proxy(self, method: str, body: bytes | None, prompt_tokens: int, output_tokens: int) -> None:
        router = self.server.router
        self._headers_sent = False
        tried: list[int] = []
        while True:
            try:
                backend, ticket = router.acquire(prompt_tokens, output_tokens, exclude=tried)
            except AllBackendsDown:
                self._send_error_json(503, "no backend is available (all down or unreachable)", "service_unavailable")
                return
            connection, target = _connection(backend.url + self.path, router.request_timeout_s)
            try:
                connection.connect()
            except OSError as error:
                connection.close()
                router.release(backend, ticket, routed=False, error=True)
                router.mark_down(backend, f"connection failed: {error}")
                tried.append(backend.index)
                continue
            try:
                self._forward(connection, target, method, body, backend)
                router.release(backend, ticket, routed=True)
            except _ClientGone:
                self.close_connection = True
                router.release(backend, ticket, routed=True)
            except (OSError, http.client.HTTPException) as error:
                router.release(backend, ticket, routed=True, error=True)
                log.warning("backend %s failed: %s", backend.url, error)
                if self._headers_sent:
                    self.close_connection = True  # cannot tell the client more than cutting the response
                else:
                    self._send_error_json(502, f"backend {backend.url} failed: {error or type(error).__name__}",
                                          "bad_gateway")
            finally:
                connection.close()
            return

    _headers_sent = False

    def _forward(self, connection: http.client.HTTPConnection, target: str, method: str, body: bytes | None,
                 backend: BackendState) -> None:
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        passed = [(n, v) for n, v in response.getheaders()
                  if n.lower() not in _HOP_BY_HOP and n.lower() not in _OWN_RESPONSE_HEADERS]
        streaming = response.status not in (204, 304) and (
            response.getheader("Content-Length") is None
            or response.getheader("Content-Type", "").lower().startswith("text/event-stream"))
        if not streaming:
            payload = response.read()
            self._headers_sent = True
            self._write_client(lambda: self._send_raw(response.status, response.reason, passed, backend, payload))
            return
        chunked = self.request_version != "HTTP/1.0"
        self._headers_sent = True
        self._write_client(lambda: self._send_raw(response.status, response.reason, passed, backend, None, chunked))
        while True:
            data = response.read1(65536)
            if not data:
                break
            self._write_client(lambda: self._write_piece(data, chunked))
        if chunked:
            self._write_client(lambda: (self.wfile.write(b"0\r\n\r\n"), self.wfile.flush()))
        else:
            self.close_connection = True

    def _send_raw(self, status: int, reason: str, headers: Sequence[tuple[str, str]], backend: BackendState,
                  payload: bytes | None, chunked: bool = False) -> None:
        self.send_response(status, reason or None)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header(BACKEND_HEADER, backend.url)
        if payload is not None:
            self.send_header("Content-Length", str(len(payload)))
        elif chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        if payload:
            self.wfile.write(payload)
        self.wfile.flush()

    def _write_piece(self, data: bytes, chunked: bool) -> None:
        if chunked:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.wfile.write(data)
        self.wfile.flush()

    def _write_client(self, action) -> None:
        try:
            action()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as error:
            raise _ClientGone() from error


class _ClientGone(Exception):
    pass
