"""The daemon's read-only HTTP endpoint, on a real server on an ephemeral port."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from asrpt.daemon.http import parse_bind, spool_backlog, start_http_server
from asrpt.exceptions import ConfigError


@pytest.fixture
def server(daemon):
    assert daemon.cycle() is not None
    running = start_http_server(daemon, "127.0.0.1:0")
    yield running
    running.shutdown()


def request(server, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_queue_and_eta_as_json(server, daemon) -> None:
    status, headers, body = request(server, "GET", "/queue")
    assert status == 200 and headers["content-type"] == "application/json"
    queue = json.loads(body)
    assert queue["policy"] == "asrpt" and queue["made_at_s"] == daemon.stats.forecast_made_at_s
    jobs = queue["jobs"]
    assert [j["job_id"] for j in jobs][0] == "100" and jobs[0]["state"] == "RUNNING"
    assert [j["job_id"] for j in jobs if j["state"] == "PENDING"] == list(daemon.stats.last_decision.order)
    for job in jobs:
        assert set(job) >= {"job_id", "name", "user", "state", "position", "partition", "accelerators",
                            "predicted_start", "predicted_end", "predicted_start_s", "predicted_end_s", "reason"}
    status, _, body = request(server, "GET", "/queue?user=alice")
    assert {j["user"] for j in json.loads(body)["jobs"]} == {"alice"}

    status, _, body = request(server, "GET", "/eta/101")
    eta = json.loads(body)
    assert status == 200 and eta["job_id"] == "101" and eta["name"] == "resnet-8" and eta["predicted_end"].endswith("Z")
    status, _, body = request(server, "GET", "/eta/999")
    assert status == 404 and "999" in json.loads(body)["error"]
    assert request(server, "GET", "/nope")[0] == 404
    status, headers, body = request(server, "HEAD", "/queue")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


def test_everything_but_get_is_refused(server) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        for path in ("/queue", "/eta/101", "/metrics", "/"):
            status, headers, _ = request(server, method, path)
            assert (status, headers["allow"]) == (405, "GET, HEAD"), (method, path)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (NaN|[+-]Inf|-?[0-9.e+-]+)$')


def parse_prometheus(text: str) -> dict[str, list[tuple[str, float]]]:
    """A strict reader of the text exposition format: every sample belongs to a declared metric."""
    types: dict[str, str] = {}
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "summary", "histogram", "untyped"), line
            types[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a Prometheus sample: {line!r}"
            name = match.group(1)
            assert name in types, f"{name} has no TYPE line"
            if types[name] == "counter":
                assert name.endswith("_total"), name
            samples.setdefault(name, []).append((match.group(2) or "", float(match.group(4))))
    return samples


def test_metrics_parse_as_prometheus_text(server, daemon, tmp_path) -> None:
    spool = daemon.config.spool.dir
    for name in ("1.json", "2.json", ".tmp-3", "notes.txt"):
        (tmp_path / "spool" / name).write_text("{}")
    status, headers, body = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    metrics = parse_prometheus(body.decode())
    assert metrics["asrpt_cycles_total"] == [("", 1.0)]
    assert metrics["asrpt_cycle_failures_total"] == [("", 0.0)]
    assert dict(metrics["asrpt_jobs"]) == {'{state="pending"}': 3.0, '{state="running"}': 1.0, '{state="held"}': 0.0}
    assert metrics["asrpt_slurm_writes_total"] == [("", 2.0)]
    assert metrics["asrpt_spool_backlog_files"] == [('{spool="wrapper"}', 2.0)]
    assert spool_backlog(spool) == 2 and spool_backlog(str(tmp_path / "absent")) == 0
    assert metrics["asrpt_cycle_duration_seconds"][0][1] > 0
    assert {"asrpt_prediction_error_percent_median", "asrpt_eta_error_seconds_median", "asrpt_accuracy_samples"} <= set(metrics)


def test_page_is_self_contained_with_a_strict_policy(server) -> None:
    status, headers, body = request(server, "GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert "<svg" in page and "fetch(\"queue\"" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page), "no external assets"
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_bind_addresses() -> None:
    assert parse_bind("8787") == ("127.0.0.1", 8787)
    assert parse_bind(":8787") == ("127.0.0.1", 8787)
    assert parse_bind("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    for bad in ("host:port", "[::1]9000", "70000"):
        with pytest.raises(ConfigError):
            parse_bind(bad)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package for a headless browser")
def test_timeline_renders_in_headless_chromium(server, tmp_path) -> None:
    """The page, run by a real browser under its own CSP, draws one bar per job with a start."""
    completed = subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", server.url + "/",
        ],
        capture_output=True, text=True, timeout=60,
    )
    dom = completed.stdout
    assert "<svg" in dom, completed.stderr[-2000:]
    bars = re.findall(r'<rect class="bar (run|pend|held)" data-job="([^"]+)"', dom)
    assert {job for _, job in bars} == {"100", "101", "102", "103"}
    assert ("run", "100") in bars
    status = re.search(r'<div id="status"[^>]*>([^<]*)<', dom)
    assert status and status.group(1).startswith("4 of 4 jobs, policy asrpt"), status


# -- resource limits: the endpoint never takes what the cycle needs ------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _slow_client(server, head: bytes = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ") -> socket.socket:
    """A client that sends part of a request head and then nothing (slowloris)."""
    client = socket.create_connection(server.server_address[:2], timeout=10)
    client.sendall(head)
    return client


def _read_all(client: socket.socket) -> bytes:
    chunks = []
    while chunk := client.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_slow_connections_neither_exhaust_descriptors_nor_block_healthz(daemon) -> None:
    server = start_http_server(daemon, "127.0.0.1:0", request_timeout_s=30.0, max_connections=8)
    slow: list[socket.socket] = []
    try:
        before = _open_fds()
        slow = [_slow_client(server) for _ in range(100)]
        time.sleep(0.5)
        server_side = _open_fds() - before - len(slow)  # the clients live in this process too
        assert server_side <= 8 + 2, f"{server_side} descriptors held by the endpoint for 100 stalled clients"
        assert server.connection_count() <= 8
        started_s = time.monotonic()
        status, _, body = request(server, "GET", "/healthz")
        assert (status, body) == (200, b"ok\n") and time.monotonic() - started_s < 5.0
    finally:
        for client in slow:
            client.close()
        server.shutdown()


def test_a_trickled_request_head_is_cut_off_at_the_read_timeout(daemon) -> None:
    server = start_http_server(daemon, "127.0.0.1:0", request_timeout_s=1.0)
    client = _slow_client(server, b"GET /healthz HTTP/1.1\r\n")
    try:
        started_s = time.monotonic()
        answer, closed = b"", False
        while not closed and time.monotonic() - started_s < 5.0:  # one header byte every 0.1 s
            try:
                client.sendall(b"X")
                if select.select([client], [], [], 0.1)[0]:
                    chunk = client.recv(4096)
                    answer, closed = answer + chunk, not chunk
            except OSError:
                closed = True
        assert closed and time.monotonic() - started_s < 3.0
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")
    finally:
        client.close()
        server.shutdown()


def test_an_oversized_request_head_is_refused(daemon) -> None:
    server = start_http_server(daemon, "127.0.0.1:0", max_request_bytes=4096)
    try:
        client = _slow_client(server, b"GET /queue HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n")
        assert _read_all(client).startswith(b"HTTP/1.1 431 ")
        client.close()
        assert request(server, "GET", "/healthz")[0] == 200
    finally:
        server.shutdown()


# -- Host header: no DNS rebinding --------------------------------------------------------------


def raw_request(server, head: bytes) -> tuple[int, bytes]:
    client = socket.create_connection(server.server_address[:2], timeout=10)
    try:
        client.sendall(head)
        answer = _read_all(client)
    finally:
        client.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_only_this_machines_names_are_accepted_as_host(daemon) -> None:
    """A page on evil.example whose name rebinds to 127.0.0.1 sends ``Host: evil.example``."""
    server = start_http_server(daemon, "127.0.0.1:0", allowed_hosts=("Queue.Example.org",))
    port = server.server_address[1]
    try:
        def status(host: str) -> int:
            return raw_request(server, f"GET /queue HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())[0]

        for good in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"{socket.gethostname()}:{port}",
                     socket.getfqdn(), "queue.example.org", f"queue.example.org:{port}"):
            assert status(good) == 200, good
        for bad in ("evil.example", f"evil.example:{port}", f"localhost.evil.example:{port}", "10.1.2.3", "", "[::1"):
            assert status(bad) in (421, 400), bad
        assert status(f"evil.example:{port}") == 421
        code, body = raw_request(server, b"GET /queue HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        assert code == 421 and b"evil.example" in body and b"jobs" not in body
        assert raw_request(server, b"GET /queue HTTP/1.1\r\n\r\n")[0] == 400  # HTTP/1.1 requires Host
        assert raw_request(server, b"GET /queue HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n")[0] == 400
        assert raw_request(server, b"GET /healthz HTTP/1.0\r\n\r\n")[0] == 200  # not a browser
        assert raw_request(server, b"POST /queue HTTP/1.1\r\nHost: evil.example\r\n\r\n")[0] == 421
    finally:
        server.shutdown()


def test_a_wildcard_bind_accepts_the_address_the_client_reached(daemon) -> None:
    server = start_http_server(daemon, "0.0.0.0:0")
    try:
        assert raw_request(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 200
        assert raw_request(server, b"GET /healthz HTTP/1.1\r\nHost: 10.200.1.2\r\n\r\n")[0] == 421
    finally:
        server.shutdown()


# -- the bind is checked when the daemon starts ---------------------------------------------------


def test_a_bind_that_cannot_work_is_a_clear_configuration_error(daemon) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"http_bind '127.0.0.1:{port}'.*in use"):
            start_http_server(daemon, f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=r"192.0.2.1.*not an address of this machine"):
        start_http_server(daemon, "192.0.2.1:0")
    with pytest.raises(ConfigError, match=r"no-such-host.invalid.*cannot be resolved"):
        start_http_server(daemon, "no-such-host.invalid:0")


def test_asrptd_refuses_to_start_on_a_port_in_use_before_its_first_cycle(tmp_path) -> None:
    """The error comes at start, not after a first cycle against Slurm."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for command in ("squeue", "sinfo", "scontrol", "sacct"):
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\necho {command} >> {calls}\nexit 1\n")
        script.chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "asrpt.toml"
        config.write_text(
            f'[daemon]\nhttp_bind = "127.0.0.1:{port}"\nstate_dir = "{tmp_path / "state"}"\n'
            f'[database]\nurl = "sqlite:///{tmp_path / "asrpt.db"}"\n'
            f'[spool]\ndir = "{tmp_path / "spool"}"\n[slurm]\nbin_dir = "{bin_dir}"\n'
        )
        completed = subprocess.run(
            [sys.executable, "-m", "asrpt.daemon.main", "--config", str(config)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"http_bind '127.0.0.1:{port}'" in completed.stderr and "in use" in completed.stderr
    assert not calls.exists() or "squeue" not in calls.read_text(), "Slurm was polled before the bind was checked"


# -- Slurm's PrivateData=jobs: no caller identity over TCP, so counts only -------------------------


def test_private_data_jobs_serves_only_counts(daemon, tmp_path) -> None:
    assert daemon.cycle() is not None
    conf = tmp_path / "private.conf"
    conf.write_text("ClusterName=test\nPrivateData=jobs\n")
    daemon.config = dataclasses.replace(daemon.config, slurm=dataclasses.replace(daemon.config.slurm, slurm_conf=str(conf)))
    server = start_http_server(daemon, "127.0.0.1:0")
    try:
        status, _, body = request(server, "GET", "/queue")
        queue = json.loads(body)
        assert status == 200 and queue["jobs"] == [] and queue["private_data"] == "jobs"
        assert queue["counts"] == {"running": 1, "pending": 3, "held": 0, "accelerators_running": 4, "accelerators_pending": 14}
        for name in ("alice", "carol", "resnet-8", "job_id"):
            assert name not in body.decode()
        assert json.loads(request(server, "GET", "/queue?user=alice")[2])["jobs"] == []
        status, _, body = request(server, "GET", "/eta/101")
        assert status == 403 and b"PrivateData=jobs" in body and b"resnet" not in body
        assert request(server, "GET", "/healthz")[0] == 200 and request(server, "GET", "/metrics")[0] == 200
    finally:
        server.shutdown()


def test_the_configured_allowed_hosts_reach_the_host_check(daemon) -> None:
    """An admin behind a reverse proxy that forwards its public name sets [daemon] http_allowed_hosts."""
    section = dataclasses.replace(daemon.config.daemon, http_allowed_hosts=("queue.example.org",))
    daemon.config = dataclasses.replace(daemon.config, daemon=section)
    server = start_http_server(daemon, "127.0.0.1:0")
    try:
        def status(host: str) -> int:
            return raw_request(server, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())[0]

        assert status("queue.example.org") == 200 and status("QUEUE.example.org:443") == 200
        assert status("other.example.org") == 421
    finally:
        server.shutdown()


def test_bad_limits_and_allowed_hosts_are_configuration_errors(daemon) -> None:
    with pytest.raises(ConfigError, match="max_connections 0"):
        start_http_server(daemon, "127.0.0.1:0", max_connections=0)
    with pytest.raises(ConfigError, match="'a b' is not a host name"):
        start_http_server(daemon, "127.0.0.1:0", allowed_hosts=("a b",))


def test_beyond_the_cap_of_connections_being_served_a_new_one_gets_503(daemon) -> None:
    from asrpt.cli.queue_privacy import PUBLIC

    release = threading.Event()

    def slow_privacy():  # holds each /queue answer until released
        release.wait(10)
        return PUBLIC

    server = start_http_server(daemon, "127.0.0.1:0", max_connections=2, job_privacy=slow_privacy)
    try:
        busy = [_slow_client(server, b"GET /queue HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") for _ in range(2)]
        deadline_s = time.monotonic() + 5
        def being_served() -> int:
            with server._connections_lock:
                return sum(1 for _, reading in server._connections.values() if not reading)

        while being_served() < 2 and time.monotonic() < deadline_s:
            time.sleep(0.01)
        assert raw_request(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 503
        release.set()
        for client in busy:
            assert _read_all(client).startswith(b"HTTP/1.1 200 ")
            client.close()
        assert request(server, "GET", "/healthz")[0] == 200
    finally:
        release.set()
        server.shutdown()
