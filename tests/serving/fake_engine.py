"""A stand-in for an OpenAI-compatible engine (vLLM-like) for the HTTP router tests.

``/v1/completions`` and ``/v1/chat/completions`` answer a JSON completion naming the
server (``"server": name``); ``"stream": true`` sends ``stream_chunks`` server-sent events,
waiting for ``stream_gate`` (when set) after the first one; a prompt ``"bad"`` gets a 400
with an OpenAI-style error body. ``/metrics`` shows the KV usage and queue the test sets,
or garbage / HTTP 500 when ``metrics_mode`` says so.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BAD_REQUEST_BODY = b'{"object":"error","message":"prompt is bad","type":"BadRequestError","param":null,"code":400}'


class FakeEngine:
    def __init__(self, name: str, *, kv_usage: float = 0.0, running: int = 0, waiting: int = 0,
                 port: int = 0) -> None:
        self.name = name
        self.kv_usage = kv_usage
        self.running = running
        self.waiting = waiting
        #: "ok", "garbage", "error" (HTTP 500), "nan" (NaN KV usage), "old" (gpu_cache_usage_perc)
        self.metrics_mode = "ok"
        self.stream_chunks = 3
        self.stream_gate: threading.Event | None = None
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> "FakeEngine":
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), _make_handler(self))
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._thread.join(2)

    def metrics_text(self) -> str:
        if self.metrics_mode == "garbage":
            return "<html><body>502 Bad Gateway</body></html>\n{not: metrics}\n"
        usage_name = "vllm:gpu_cache_usage_perc" if self.metrics_mode == "old" else "vllm:kv_cache_usage_perc"
        usage = "NaN" if self.metrics_mode == "nan" else repr(self.kv_usage)
        labels = 'model_name="fake",engine="0"'
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {float(self.running)}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {float(self.waiting)}\n"
            f"# HELP {usage_name} KV-cache usage. 1 means 100 percent usage.\n"
            f"# TYPE {usage_name} gauge\n"
            f"{usage_name}{{{labels}}} {usage}\n"
            f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="2048",cache_dtype="auto"}} 1.0\n'
            'vllm:prompt_tokens_total{model_name="fake"} 1234.0\n'
        )


def _make_handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/metrics":
                engine.paths.append(self.path)
            if self.path == "/metrics":
                if engine.metrics_mode == "error":
                    self._send(500, b"internal error", "text/plain")
                else:
                    self._send(200, engine.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path.split("?")[0] == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "owned_by": engine.name}]}).encode())
            else:
                self._send(404, b'{"detail":"Not Found"}')

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, b'{"object":"error","message":"invalid JSON","code":400}')
                return
            engine.requests.append(body)
            if body.get("prompt") == "bad":
                self._send(400, BAD_REQUEST_BODY)
                return
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(engine.stream_chunks):
                    event = json.dumps({"server": engine.name, "choices": [{"index": 0, "text": f"tok{i}"}]})
                    self._chunk(f"data: {event}\n\n".encode())
                    if i == 0 and engine.stream_gate is not None:
                        engine.stream_gate.wait(5)
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            if self.path == "/v1/chat/completions":
                choice = {"index": 0, "message": {"role": "assistant", "content": f"hello from {engine.name}"},
                          "finish_reason": "stop"}
            else:
                choice = {"index": 0, "text": f"hello from {engine.name}", "finish_reason": "length"}
            self._send(200, json.dumps({"id": "cmpl-1", "object": "text_completion", "model": "fake",
                                        "server": engine.name, "choices": [choice]}).encode())

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    return Handler
