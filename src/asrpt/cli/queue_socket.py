"""How ``asrpt queue/eta/explain`` ask asrptd over its Unix socket, and what comes back.

One request per connection, one JSON object per direction: the client sends
``{"view": "queue", "user": ..., "partition": ...}``, ``{"view": "eta", "job_id": ...}`` or
``{"view": "explain", "job_id": ...}`` (a line, then it shuts its side), the daemon answers
``{"rows": [...]}``, ``{"row": ...}`` or ``{"row": ..., "facts": ...}``, or ``{"error": ...}``
(``"unknown_job": true`` when the job has no forecast the caller may see), and closes. The
caller's identity is not in the request: the daemon asks the kernel (SO_PEERCRED).
"""

from __future__ import annotations

import dataclasses
import json
import socket
from typing import Any

from asrpt.exceptions import AsrptError, UnknownJob

VIEWS = ("eta", "explain", "queue")
#: Longest request the daemon reads, bytes.
MAX_REQUEST_BYTES = 4096
#: Seconds the client waits for the daemon's answer (a large queue is read from the history).
ANSWER_TIMEOUT_S = 30.0


class DaemonNotListening(Exception):
    """Nothing answers on the socket (no daemon, or not one that serves it); the CLI may read
    the database itself instead. The message says why."""


def row_json(row: Any) -> dict[str, Any]:
    """A stored forecast as the socket carries it (every field, unlike ``queue_view.job_json``)."""
    return dataclasses.asdict(row)


def row_from_json(value: dict[str, Any]) -> Any:
    from asrpt.forecast_records import StoredForecast

    return StoredForecast(**{**value, "partitions": tuple(value.get("partitions") or ())})


class SocketViews:
    """The views of :class:`asrpt.cli.queue_reader.QueueReader`, answered by asrptd for the
    uid this process runs as."""

    def __init__(self, path: str, *, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s

    def queue(self, user: str | None = None, partition: str | None = None) -> list[Any]:
        return [row_from_json(r) for r in self._ask({"view": "queue", "user": user, "partition": partition})["rows"]]

    def eta(self, job_id: str) -> Any:
        return row_from_json(self._ask({"view": "eta", "job_id": job_id})["row"])

    def explain(self, job_id: str) -> tuple[Any, dict[str, Any]]:
        answer = self._ask({"view": "explain", "job_id": job_id})
        return row_from_json(answer["row"]), answer["facts"]

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(self.timeout_s)
            try:
                client.connect(self.path)
            except OSError as error:
                raise DaemonNotListening(error.strerror or str(error)) from None
            try:
                client.sendall(json.dumps(request).encode() + b"\n")
                client.shutdown(socket.SHUT_WR)
                data = bytearray()
                while chunk := client.recv(1 << 16):
                    data += chunk
                answer = json.loads(data)
            except (OSError, ValueError) as error:
                raise AsrptError(f"asrptd's socket {self.path} gave no usable answer ({error}); see asrptd's log") from None
        if not isinstance(answer, dict):
            raise AsrptError(f"asrptd's socket {self.path} gave no usable answer")
        if "error" in answer:
            if answer.get("unknown_job"):
                raise UnknownJob(answer["error"])
            raise AsrptError(f"asrptd: {answer['error']}")
        return answer
