"""The HTTP router (``asrpt serving router``) against stand-in engines on ephemeral ports."""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.parse

import pytest

from asrpt.serving.errors import ConfigError
from asrpt.serving.fitset import FitSet
from asrpt.serving.http_router import (
    BACKEND_HEADER, HttpRouter, MetricsUnavailable, engine_metrics, estimate_output_tokens,
    estimate_prompt_tokens, normalise_backend_url, parse_listen, parse_prometheus_text, parse_sample_line,
)
from asrpt.serving.profiles import ProfileKey

from tests.serving.fake_engine import BAD_REQUEST_BODY, FakeEngine
from tests.serving.helpers import latency

FAST = 0.03  # scrape interval of the live tests, seconds


# --------------------------------------------------------------------------- helpers


def wait_until(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def fresh_scrape(router: HttpRouter, index: int | None = None) -> None:
    """Wait for a scrape of each (or one) backend that started after now (two completions)."""
    backends = router.backends if index is None else [router.backends[index]]
    marks = [(b, b.scrapes_total) for b in backends]
    wait_until(lambda: all(b.scrapes_total >= n + 2 for b, n in marks), what="a fresh scrape")


def request(router: HttpRouter, method: str, path: str, body: dict | bytes | None = None,
            headers: dict | None = None) -> tuple[int, http.client.HTTPMessage, bytes]:
    host, port = router.address
    connection = http.client.HTTPConnection(host, port, timeout=5)
    try:
        payload = json.dumps(body).encode() if isinstance(body, dict) else body
        connection.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def complete(router: HttpRouter, prompt: str = "hello", **extra) -> tuple[int, str | None, dict]:
    status, headers, body = request(router, "POST", "/v1/completions", {"model": "fake", "prompt": prompt,
                                                                        "max_tokens": 16, **extra})
    return status, headers.get(BACKEND_HEADER), json.loads(body)


def open_stream(router: HttpRouter) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A streaming completion through the router, its headers read, its body not yet."""
    host, port = router.address
    connection = http.client.HTTPConnection(host, port, timeout=5)
    connection.request("POST", "/v1/completions", body=json.dumps({"prompt": "p", "stream": True}),
                       headers={"Content-Type": "application/json"})
    return connection, connection.getresponse()


def server_of(router: HttpRouter) -> str:
    status, backend, body = complete(router)
    assert status == 200, body
    assert backend is not None
    return body["server"]


@pytest.fixture()
def engines():
    started = [FakeEngine(name).start() for name in ("a", "b", "c")]
    yield started
    for engine in started:
        engine.stop()


@pytest.fixture()
def make_router():
    routers = []

    def make(backends, **kwargs) -> HttpRouter:
        kwargs.setdefault("scrape_interval_s", FAST)
        kwargs.setdefault("scrape_timeout_s", 1.0)
        router = HttpRouter([e.url for e in backends], listen=("127.0.0.1", 0), **kwargs).start()
        routers.append(router)
        return router

    yield make
    for router in routers:
        router.stop()


# --------------------------------------------------------------------------- Prometheus parser


def test_parser_reads_labels_comments_and_special_values():
    text = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-2-7b"} 0.25
vllm:num_requests_running{model_name="m, with {braces} and \\"quotes\\"",} 3.0 1712345678000
plain_metric 7
spaced {a = "1" , b="2"} 1e-3
nan_metric NaN
up +Inf
down -Inf

# EOF
"""
    parsed = parse_prometheus_text(text)
    assert parsed.malformed == 0
    by_name = {s.name: s for s in parsed.samples}
    assert by_name["vllm:kv_cache_usage_perc"].labels == {"engine": "0", "model_name": "meta-llama/Llama-2-7b"}
    assert by_name["vllm:kv_cache_usage_perc"].value == 0.25
    assert by_name["vllm:num_requests_running"].labels["model_name"] == 'm, with {braces} and "quotes"'
    assert by_name["vllm:num_requests_running"].value == 3.0
    assert by_name["plain_metric"].value == 7 and by_name["plain_metric"].labels == {}
    assert by_name["spaced"].labels == {"a": "1", "b": "2"} and by_name["spaced"].value == 1e-3
    assert math.isnan(by_name["nan_metric"].value)
    assert by_name["up"].value == math.inf and by_name["down"].value == -math.inf


def test_parser_unescapes_label_values_and_keeps_exemplar_lines():
    sample = parse_sample_line('m{path="a\\\\b\\nc"} 2 # {trace_id="x"} 1.0')
    assert sample.labels == {"path": "a\\b\nc"} and sample.value == 2


@pytest.mark.parametrize("line", [
    "9starts_with_digit 1",
    "no_value",
    "m{unterminated=\"x} 1",
    "m{a=\"1\" b=\"2\"} 1",         # missing comma
    "m{a=1} 1",                     # unquoted
    "m{a=\"1\",a=\"2\"} 1",         # duplicate label
    "m 1 2 3",                      # too many fields
    "m one",                        # not a number
    "m 1_000",                      # Python would accept this, Prometheus does not
    "m{a=\"1\"}2",                  # no space before the value
    "<html><body>oops</body></html>",
])
def test_malformed_lines_are_counted_not_fatal(line):
    parsed = parse_prometheus_text(f"good 1\n{line}\nalso_good{{x=\"y\"}} 2\n")
    assert [s.name for s in parsed.samples] == ["good", "also_good"]
    assert parsed.malformed == 1 and parsed.first_malformed == line


def test_engine_metrics_from_vllm_and_fallbacks():
    current = engine_metrics(parse_prometheus_text(FakeEngine("x", kv_usage=0.4, running=3, waiting=2).metrics_text()))
    assert (current.kv_usage, current.running, current.waiting, current.kv_capacity_tokens) == (0.4, 3, 2, 2048 * 16)
    old = FakeEngine("x", kv_usage=0.7)
    old.metrics_mode = "old"
    assert engine_metrics(parse_prometheus_text(old.metrics_text())).kv_usage == 0.7
    # two engines behind one endpoint: usage averaged, counts summed; a percentage is read as one
    two = engine_metrics(parse_prometheus_text(
        'vllm:kv_cache_usage_perc{engine="0"} 20\nvllm:kv_cache_usage_perc{engine="1"} 40\n'
        'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} NaN\n'))
    assert two.kv_usage == pytest.approx(0.3) and two.running == 1 and two.waiting == 0 and not two.queue_known
    assert two.kv_capacity_tokens is None


@pytest.mark.parametrize("text, reason", [
    ("", "no Prometheus samples"),
    ("<html>nope</html>\n", "first bad line"),
    ("vllm:num_requests_running 1\n", "no finite"),
    ("vllm:kv_cache_usage_perc NaN\n", "no finite"),
    ("vllm:kv_cache_usage_perc 250\n", "out of range"),
])
def test_engine_metrics_refuses_unusable_scrapes(text, reason):
    with pytest.raises(MetricsUnavailable, match=reason):
        engine_metrics(parse_prometheus_text(text))


# --------------------------------------------------------------------------- estimates and configuration


def test_token_estimates():
    assert estimate_prompt_tokens({"prompt": "x" * 400}) == 100
    assert estimate_prompt_tokens({"prompt": "x" * 401}) == 101
    assert estimate_prompt_tokens({"prompt": [1, 2, 3]}) == 3
    assert estimate_prompt_tokens({"prompt": ["abcd", "abcdefgh"]}) == 3
    assert estimate_prompt_tokens({"messages": [{"role": "user", "content": "x" * 40},
                                                {"role": "user", "content": [{"type": "text", "text": "y" * 8}]}]}) == 4 + 10 + 4 + 2
    assert estimate_prompt_tokens(None) == 0 and estimate_prompt_tokens({"prompt": 5}) == 0
    assert estimate_output_tokens({"max_tokens": 50, "n": 2}) == 100
    assert estimate_output_tokens({"max_completion_tokens": 30, "max_tokens": 50}) == 30
    assert estimate_output_tokens({}, 77) == 77 and estimate_output_tokens({"max_tokens": True}, 77) == 77


@pytest.mark.parametrize("text, expected", [
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
    ("http://10.0.0.5:8000/", "http://10.0.0.5:8000"),
    ("http://host:8000/v1", "http://host:8000"),
    ("https://host/prefix/", "https://host/prefix"),
    ("http://[::1]:8000", "http://[::1]:8000"),
])
def test_backend_urls_are_normalised(text, expected):
    assert normalise_backend_url(text) == expected


@pytest.mark.parametrize("text", ["10.0.0.5:8000", "ftp://host", "http://", "http://host:99999", "http://host/?a=1",
                                  "http://u:p@host"])
def test_bad_backend_urls_are_config_errors(text):
    with pytest.raises(ConfigError, match="bad backend URL"):
        normalise_backend_url(text)


def test_listen_addresses():
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("8080", "host:", "host:http", "host:70000", "::1:80"):
        with pytest.raises(ConfigError, match="--listen"):
            parse_listen(bad)


def test_router_configuration_errors():
    with pytest.raises(ConfigError, match="unknown routing policy"):
        HttpRouter(["http://h:1"], policy="random")
    with pytest.raises(ConfigError, match="twice"):
        HttpRouter(["http://h:1", "http://h:1/"])
    with pytest.raises(ConfigError, match="--backend-fit"):
        HttpRouter(["http://h:1"], fits=object())
    with pytest.raises(ConfigError, match="--fit"):
        HttpRouter(["http://h:1"], backend_fits={"http://h:1": "llama2-70b/a100-80gb/tp2"})


@pytest.mark.parametrize("argv, message", [
    (["--backend", "localhost:8000"], "bad backend URL"),
    (["--backend", "http://127.0.0.1:1", "--listen", "nowhere"], "bad --listen"),
    (["--backend", "http://127.0.0.1:1", "--policy", "random"], "unknown policy"),
    (["--backend", "http://127.0.0.1:1", "--backend-fit", "nokey"], "URL=KEY"),
])
def test_cli_errors_are_one_line(argv, message, capsys):
    from asrpt.cli import main

    assert main.main(["serving", "router", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_registers_the_subcommand(capsys):
    from asrpt.cli import main, serving_router_commands
    from asrpt.serving.router import POLICY_NAMES

    with pytest.raises(SystemExit):
        main.build_parser().parse_args(["serving", "router", "--help"])
    assert "--scrape-interval-s" in capsys.readouterr().out
    assert serving_router_commands.POLICY_NAMES == POLICY_NAMES


# --------------------------------------------------------------------------- live routing


def test_kv_aware_follows_kv_usage_and_queues(engines, make_router):
    a, b = engines[:2]
    a.kv_usage, b.kv_usage = 0.8, 0.1
    router = make_router([a, b])
    assert [server_of(router) for _ in range(3)] == ["b", "b", "b"]
    a.kv_usage, b.kv_usage = 0.1, 0.9
    fresh_scrape(router)
    assert [server_of(router) for _ in range(3)] == ["a", "a", "a"]
    a.kv_usage = b.kv_usage = 0.3
    a.running, a.waiting = 6, 4  # same cache pressure, longer queue
    fresh_scrape(router)
    assert server_of(router) == "b"


def test_kv_aware_counts_requests_in_flight_between_scrapes(engines, make_router):
    a, b = engines[:2]
    router = make_router([a, b], scrape_interval_s=60)  # no scrape during the test after the first
    a.stream_gate = threading.Event()
    held, response = open_stream(router)
    try:
        assert response.headers[BACKEND_HEADER] == a.url  # tie on identical metrics: first backend
        assert router.backends[0].outstanding() == 1
        assert server_of(router) == "b"  # a holds one request the last scrape did not see
    finally:
        a.stream_gate.set()
        held.close()
    wait_until(lambda: router.backends[0].outstanding() == 0, what="the held request to finish")


def test_latency_fit_prefers_the_faster_backend(engines, make_router):
    a, b = engines[:2]
    a.running = b.running = 4
    slow, fast = ProfileKey("llama2-70b", "a100-80gb", 2), ProfileKey("llama2-70b", "h100-80gb", 2)
    fits = FitSet({slow: latency(1.0), fast: latency(0.5)})
    assert server_of(make_router([a, b])) == "a"  # queue estimate alone: a tie, first backend
    router = make_router([a, b], fits=fits, backend_fits={a.url: slow.label, b.url: fast.label})
    assert server_of(router) == "b"


def test_round_robin_alternates(engines, make_router):
    router = make_router(engines, policy="round-robin")
    assert [server_of(router) for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize("mode", ["garbage", "error", "nan"])
def test_backend_with_bad_metrics_is_skipped_until_healthy(engines, make_router, mode):
    a, b = engines[:2]
    router = make_router([a, b], policy="round-robin")
    a.metrics_mode = mode
    fresh_scrape(router, 0)
    assert not router.backends[0].up
    assert {server_of(router) for _ in range(4)} == {"b"}
    a.metrics_mode = "ok"
    fresh_scrape(router, 0)
    assert router.backends[0].up
    assert {server_of(router) for _ in range(4)} == {"a", "b"}


def test_backend_that_goes_away_is_skipped_and_returns(engines, make_router):
    a, b = engines[:2]
    router = make_router([a, b], policy="round-robin")
    port = urllib.parse.urlsplit(a.url).port
    a.stop()
    fresh_scrape(router, 0)
    assert not router.backends[0].up and "cannot scrape" in router.backends[0].reason
    assert {server_of(router) for _ in range(3)} == {"b"}
    engines[0] = FakeEngine("a2", port=port).start()
    fresh_scrape(router, 0)
    assert {server_of(router) for _ in range(4)} == {"a2", "b"}


def test_refused_connection_is_retried_on_another_backend(engines, make_router):
    a, b = engines[:2]
    router = make_router([a, b], policy="round-robin", scrape_interval_s=60)
    a.stop()  # the router still believes a is up
    assert server_of(router) == "b"
    assert not router.backends[0].up and "connection failed" in router.backends[0].reason
    assert server_of(router) == "b"


def test_all_down_answers_503_json(engines, make_router):
    a, b = engines[:2]
    router = make_router([a, b])
    a.metrics_mode, b.metrics_mode = "garbage", "error"
    fresh_scrape(router)
    status, headers, body = request(router, "POST", "/v1/completions", {"prompt": "x"})
    assert status == 503 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == 503
    status, _, body = request(router, "GET", "/healthz")
    assert status == 503 and set(json.loads(body)["down"]) == {a.url, b.url}
    status, _, _ = request(router, "GET", "/v1/models")
    assert status == 503
    b.metrics_mode = "ok"
    fresh_scrape(router, 1)
    assert server_of(router) == "b"
    assert request(router, "GET", "/healthz")[0] == 200


def test_streaming_passes_chunks_through_as_they_arrive(engines, make_router):
    a = engines[0]
    a.stream_chunks = 4
    a.stream_gate = threading.Event()
    router = make_router([a])
    connection, response = open_stream(router)
    try:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers[BACKEND_HEADER] == a.url
        first = response.read1(65536)  # arrives while the engine still holds the rest back
        assert b"tok0" in first and b"tok1" not in first
        a.stream_gate.set()
        rest = response.read()
    finally:
        a.stream_gate.set()
        connection.close()
    events = [json.loads(line[6:]) for line in (first + rest).decode().split("\n\n") if line.startswith("data: {")]
    assert [e["choices"][0]["text"] for e in events] == ["tok0", "tok1", "tok2", "tok3"]
    assert (first + rest).endswith(b"data: [DONE]\n\n")


def test_status_and_body_pass_through_unchanged(engines, make_router):
    a = engines[0]
    router = make_router([a])
    status, headers, body = request(router, "POST", "/v1/completions", {"prompt": "bad"})
    assert status == 400 and body == BAD_REQUEST_BODY and headers[BACKEND_HEADER] == a.url
    status, _, body = request(router, "POST", "/v1/completions", b"{not json")
    assert status == 400 and json.loads(body)["message"] == "invalid JSON"
    status, _, body = request(router, "POST", "/v1/chat/completions",
                              {"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "hello from a"
    status, _, body = request(router, "GET", "/v1/models?verbose=1")
    assert status == 200 and json.loads(body)["data"][0]["owned_by"] == "a"
    assert a.paths == ["/v1/models?verbose=1"]
    assert request(router, "GET", "/v1/other")[0] == 404
    assert request(router, "GET", "/v1/completions")[0] == 405
    assert a.requests[0] == {"prompt": "bad"}  # the body arrived unchanged too


def test_router_metrics_count_requests(engines, make_router):
    a, b = engines[:2]
    a.kv_usage = 0.42
    router = make_router([a, b], policy="round-robin")
    for _ in range(5):
        server_of(router)
    b.metrics_mode = "garbage"
    fresh_scrape(router, 1)
    status, headers, body = request(router, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    parsed = parse_prometheus_text(body.decode())
    assert parsed.malformed == 0
    values = {(s.name, s.labels.get("backend")): s.value for s in parsed.samples}
    assert values[("asrpt_router_requests_total", a.url)] == 3
    assert values[("asrpt_router_requests_total", b.url)] == 2
    assert values[("asrpt_router_backend_up", a.url)] == 1 and values[("asrpt_router_backend_up", b.url)] == 0
    assert values[("asrpt_router_backend_kv_usage", a.url)] == 0.42
    assert values[("asrpt_router_backend_scrape_failures_total", b.url)] >= 1
    assert request(router, "GET", "/healthz")[0] == 200


def test_cli_serves_with_a_fit_and_stops_on_sigterm(engines, tmp_path):
    import signal
    import subprocess
    import sys

    a, b = engines[:2]
    a.running = b.running = 4

    def coefficients(scale: float) -> dict:
        fit = latency(scale)
        return {"prefill": {"coefficients": {"intercept_ms": fit.prefill.intercept_ms, "per_request_ms": fit.prefill.per_request_ms,
                                             "per_prompt_token_ms": fit.prefill.per_prompt_token_ms}},
                "decode": {"coefficients": {"intercept_ms": fit.decode.intercept_ms, "per_request_ms": fit.decode.per_request_ms,
                                            "per_cached_token_ms": fit.decode.per_cached_token_ms}}}

    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"fits": {"llama2-70b/a100-80gb/tp2": coefficients(1.0),
                                        "llama2-70b/h100-80gb/tp2": coefficients(0.5)}}))
    process = subprocess.Popen(
        [sys.executable, "-m", "asrpt.cli.main", "serving", "router", "--backend", a.url, "--backend", b.url + "/v1",
         "--fit", str(fit), "--backend-fit", f"{a.url}=llama2-70b/a100-80gb/tp2",
         "--backend-fit", f"{b.url}=llama2-70b/h100-80gb/tp2", "--listen", "127.0.0.1:0", "--scrape-interval-s", "0.05"],
        stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()
        assert "asrpt router (kv-aware) on http://127.0.0.1:" in banner, banner
        port = int(banner.split(" on http://127.0.0.1:")[1].split()[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("POST", "/v1/completions", body=json.dumps({"prompt": "hi", "max_tokens": 8}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["server"] == "b"  # the faster fit
        assert response.headers[BACKEND_HEADER] == b.url
        connection.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        process.stderr.close()
