"""asrptd's Unix socket: every user's ``asrpt queue``, ``eta`` and ``explain``, without giving
users the database.

Why: the history holds every user's commands and, on PostgreSQL, the URL that reads it also
writes it. The daemon already reads it; over a local socket it learns who asks from the kernel
(SO_PEERCRED: a client cannot claim another uid) and applies Slurm's PrivateData for that uid
(:class:`asrpt.cli.queue_reader.QueueReader`, as the CLI does on the database). The socket is
world-connectable (0666) and read-only: three views, nothing else. The protocol is in
:mod:`asrpt.cli.queue_socket`.

It never takes what the cycle needs: its own database engine, one thread per connection, at
most ``max_connections`` at once (beyond that an immediate "busy" answer), a deadline for the
whole request and a size limit. The path is checked at start: a live daemon on it is an error,
a socket left by a killed one is replaced, anything else there is left alone and refused.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
import time
from typing import Any, Callable

from asrpt.cli.queue_privacy import JobPrivacy
from asrpt.cli.queue_reader import QueueReader
from asrpt.cli.queue_socket import MAX_REQUEST_BYTES, VIEWS, row_json
from asrpt.exceptions import AsrptError, ConfigError, UnknownJob

log = logging.getLogger(__name__)

#: Seconds a client has to send its request, and for each write of the answer.
REQUEST_TIMEOUT_S = 10.0
#: Connections served at once.
MAX_CONNECTIONS = 16
#: How long Slurm's PrivateData setting is reused, seconds.
PRIVACY_TTL_S = 60.0
#: Mode of the socket: anyone may connect (connecting needs write permission).
SOCKET_MODE = 0o666


def peer_uid(connection: socket.socket) -> int:
    """The uid of the process at the other end, from the kernel (Linux SO_PEERCRED)."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid


class _Refused(Exception):
    """A request that is not one of the views; the message is the answer."""


def _read_request(connection: socket.socket, *, timeout_s: float, limit: int) -> dict[str, Any]:
    deadline_s = time.monotonic() + timeout_s
    data = bytearray()
    while b"\n" not in data:
        if len(data) > limit:
            raise _Refused(f"request too long (over {limit} bytes)")
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise _Refused(f"request not received within {timeout_s:g} s")
        connection.settimeout(remaining_s)
        try:
            chunk = connection.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
    line = bytes(data).split(b"\n", 1)[0]
    if len(line) > limit:
        raise _Refused(f"request too long (over {limit} bytes)")
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise _Refused("request is not JSON (or nested too deeply)") from None
    if not isinstance(request, dict) or request.get("view") not in VIEWS:
        view = request.get("view") if isinstance(request, dict) else None
        raise _Refused(f"unknown view {view!r}; valid views: {', '.join(VIEWS)}")
    for key in ("user", "partition", "job_id"):
        if request.get(key) is not None and not isinstance(request[key], str):
            raise _Refused(f"{key} must be a string")
    if request["view"] != "queue" and not request.get("job_id"):
        raise _Refused(f"view {request['view']!r} needs a job_id")
    return request


class _Handler(socketserver.BaseRequestHandler):
    server: "QueueSocketServer"
    request: socket.socket

    def handle(self) -> None:
        try:
            uid = peer_uid(self.request)
            try:
                answer = self.server.answer(_read_request(self.request, timeout_s=self.server.request_timeout_s,
                                                          limit=self.server.max_request_bytes), uid)
            except _Refused as refused:
                answer = {"error": str(refused)}
            self.request.settimeout(self.server.request_timeout_s)
            self.request.sendall(json.dumps(answer).encode() + b"\n")
            _drain(self.request)
        except OSError as error:  # the client went away or stopped reading
            log.debug("socket client: %s", error)


def _drain(connection: socket.socket, *, limit: int = 1 << 20, timeout_s: float = 1.0) -> None:
    """Read what a refused client still sends (bounded), so that closing does not reset the
    connection before it has read the answer."""
    connection.shutdown(socket.SHUT_WR)
    deadline_s = time.monotonic() + timeout_s
    while limit > 0 and (remaining_s := deadline_s - time.monotonic()) > 0:
        connection.settimeout(remaining_s)
        try:
            chunk = connection.recv(1 << 16)
        except OSError:
            return
        if not chunk:
            return
        limit -= len(chunk)


class QueueSocketServer(socketserver.ThreadingUnixStreamServer):
    """The socket; ``serve_forever`` runs in a daemon thread started by :func:`start_socket_server`."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, path: str, repository: Any, job_privacy: Callable[[], JobPrivacy], *,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.path = path
        self.repository = repository
        self.privacy = job_privacy
        self.request_timeout_s = request_timeout_s
        self.max_request_bytes = max_request_bytes
        self._slots = threading.BoundedSemaphore(max_connections)
        self._identity: tuple[int, int] | None = None
        _clear_stale(path)
        super().__init__(path, _Handler)

    def server_bind(self) -> None:
        super().server_bind()
        os.chmod(self.path, SOCKET_MODE)
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def answer(self, request: dict[str, Any], uid: int) -> dict[str, Any]:
        """The view ``request`` names, as ``uid`` may see it."""
        try:
            reader = QueueReader(self.repository, self.privacy, uid)
            if request["view"] == "queue":
                return {"rows": [row_json(r) for r in reader.queue(user=request.get("user"), partition=request.get("partition"))]}
            if request["view"] == "eta":
                return {"row": row_json(reader.eta(request["job_id"]))}
            row, facts = reader.explain(request["job_id"])
            return {"row": row_json(row), "facts": facts}
        except UnknownJob as error:
            return {"error": str(error), "unknown_job": True}
        except AsrptError as error:
            return {"error": str(error)}
        except Exception:  # a broken answer must not take the socket (or the daemon) down
            log.exception("socket: answering %s for uid %d failed", request.get("view"), uid)
            return {"error": "internal error (see asrptd's log)"}

    # -- connection limit ----------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.setblocking(False)
                request.send(json.dumps({"error": "asrptd is busy; try again"}).encode() + b"\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        """Stop serving, close the socket and remove its file (if it is still this one's)."""
        super().shutdown()
        self.server_close()
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._identity:
                os.unlink(self.path)
        except OSError:
            pass
        self.repository.close()


def _clear_stale(path: str) -> None:
    """Make room for the socket: refuse a live daemon's or a non-socket, remove a dead one's."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"[daemon] socket_path {path!r} exists and is not a socket; remove it or choose another path")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # left by a daemon that was killed
            return
        except OSError:
            pass
    raise ConfigError(f"[daemon] socket_path {path!r}: another asrptd answers on it (stop it, or choose another path)")


def start_socket_server(path: str, repository: Any, *, job_privacy: Callable[[], JobPrivacy], **limits: Any) -> QueueSocketServer:
    """Serve the queue views on ``path`` from a daemon thread, reading ``repository`` (its own,
    closed by ``shutdown()``); ``limits``: ``request_timeout_s``, ``max_connections``, ``max_request_bytes``."""
    try:
        server = QueueSocketServer(path, repository, job_privacy, **limits)
    except OSError as error:
        repository.close()
        raise ConfigError(f"[daemon] socket_path {path!r}: cannot listen there: {error.strerror or error}") from None
    except ConfigError:
        repository.close()
        raise
    threading.Thread(target=server.serve_forever, name="asrptd-socket", daemon=True).start()
    log.info("queue views for every user on %s", path)
    return server
