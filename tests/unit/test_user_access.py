"""Issue 16, security: who can read (and write) asrpt's history.

The SQLite file (and its WAL side files) asrpt creates is private to its owner; a plain user
reads the queue through asrptd's Unix socket, which learns the caller's uid from the kernel
(SO_PEERCRED) and applies Slurm's PrivateData for that uid; without the daemon the user gets
one clear line saying how to get access. ``asrpt db upgrade`` finds the database as ``queue``
does. The end-to-end tests run ``asrpt`` as the user nobody, with a real daemon on a real
SQLite file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asrpt.cli.main import main
from asrpt.cli.queue_privacy import parse_slurm_conf
from asrpt.daemon.config import load_config, parse_config
from asrpt.db.migrate import upgrade
from asrpt.db.repository import ForecastRecord, HistoryRepository, SubmissionRecord
from asrpt.exceptions import ConfigError
from tests.helpers import can_run_as_nobody, run_as_nobody

NOW_S = time.time()
needs_nobody = pytest.mark.skipif(not can_run_as_nobody(), reason="runs asrpt as nobody: needs root and setpriv")


def _row(job_id: str, user: str, *, running: bool = False, position: int | None = None) -> ForecastRecord:
    return ForecastRecord(slurm_job_id=job_id, user=user, running=running, accelerators=2, predicted_start_s=NOW_S + 60,
                          predicted_end_s=NOW_S + 120, job_name=f"name-of-{user}", partition="a100", position=position,
                          policy="asrpt", partitions=("a100",))


def _fill(url: str) -> None:
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    try:
        repository.record_submission(SubmissionRecord(slurm_job_id="102", user="nobody", submit_time_s=NOW_S - 60, source="slurm",
                                                      recurrence_group="g"))
        repository.record_prediction("102", predicted_iterations=500.0, model_version="untrained", made_at_s=NOW_S - 50)
        repository.record_forecasts(NOW_S, [_row("100", "alice", running=True), _row("101", "alice", position=1),
                                            _row("102", "nobody", position=2)])
    finally:
        repository.close()


def _others_bits(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode) & 0o007


@pytest.fixture
def shared_dir():
    """A directory nobody can enter (pytest's tmp_path is private to root); files in it keep
    the modes asrpt gives them."""
    path = Path(tempfile.mkdtemp(prefix="asrpt-access-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _env(shared_dir: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path), "HOME": str(shared_dir),
            "ASRPT_CONFIG": str(shared_dir / "asrpt.toml"), **extra}


def _write_config(shared_dir: Path, url: str, *, private: bool = True) -> Path:
    (shared_dir / "slurm.conf").write_text(f"ClusterName=test\nPrivateData={'jobs' if private else 'usage'}\nSlurmUser=root\n")
    config = shared_dir / "asrpt.toml"
    config.write_text(
        f'[daemon]\nsocket_path = "{shared_dir / "asrptd.sock"}"\nstate_dir = "{shared_dir / "state"}"\n'
        f'[database]\nurl = "{url}"\n[spool]\ndir = "{shared_dir / "spool"}"\n'
        f'[slurm]\nslurm_conf = "{shared_dir / "slurm.conf"}"\nbin_dir = "{shared_dir / "bin"}"\n'
    )
    for path in shared_dir.iterdir():
        if path.suffix in (".toml", ".conf"):
            path.chmod(0o644)
    return config


def _asrpt_as_nobody(shared_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_as_nobody([sys.executable, "-m", "asrpt.cli.main", *argv], cwd=shared_dir, env=_env(shared_dir))


# -- asrpt db upgrade finds the database as asrpt queue does ------------------------------------


def test_db_upgrade_honours_asrpt_config(tmp_path, monkeypatch, capsys) -> None:
    database = tmp_path / "from-config.db"
    config = tmp_path / "asrpt.toml"
    config.write_text(f'[database]\nurl = "sqlite:///{database}"\n')
    monkeypatch.delenv("ASRPT_DATABASE_URL", raising=False)
    monkeypatch.setenv("ASRPT_CONFIG", str(config))
    assert main(["db", "upgrade"]) == 0
    assert database.exists() and str(database) in capsys.readouterr().out
    assert main(["db", "prune", "--older-than-days", "30"]) == 0
    assert str(database) in capsys.readouterr().out


# -- the SQLite file is private to its owner ------------------------------------------------------


def test_a_sqlite_history_asrpt_creates_is_not_readable_by_other_users(tmp_path, capsys) -> None:
    database = tmp_path / "asrpt.db"
    old_umask = os.umask(0o022)  # the usual one: files 0644 unless asrpt says otherwise
    try:
        assert main(["db", "upgrade", "--url", f"sqlite:///{database}"]) == 0
        repository = HistoryRepository.from_url(f"sqlite:///{database}")
        try:
            repository.record_submission(SubmissionRecord(slurm_job_id="1", user="u", submit_time_s=0.0, source="slurm",
                                                          command="export HF_TOKEN=secret"))
            for side in ("-wal", "-shm"):
                side_file = Path(f"{database}{side}")
                assert side_file.exists() and _others_bits(side_file) == 0, oct(side_file.stat().st_mode)
        finally:
            repository.close()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


# -- configuration keys -----------------------------------------------------------------------------


def test_new_keys_are_validated_and_typos_name_the_valid_keys(tmp_path) -> None:
    config = tmp_path / "asrpt.toml"
    config.write_text('[daemon]\nsocket_path = "/run/x/asrptd.sock"\n[database]\nread_url = "postgresql://r@h/db"\n')
    loaded = load_config(config, environ={})
    assert loaded.daemon.socket_path == "/run/x/asrptd.sock" and loaded.database.read_url == "postgresql://r@h/db"
    assert parse_config({}, {}).daemon.socket_path == "/run/asrpt/asrptd.sock" and parse_config({}, {}).database.read_url == ""
    config.write_text('[database]\nreader_url = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'reader_url' in \[database\]; valid keys: read_url, url"):
        load_config(config, environ={})
    config.write_text('[daemon]\nsocket = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'socket'.*socket_path"):
        load_config(config, environ={})
    config.write_text('[daemon]\nsocket_path = "relative.sock"\n')
    with pytest.raises(ConfigError, match=r"socket_path = 'relative.sock'.*absolute"):
        load_config(config, environ={})


# -- without the daemon: one clear line, never SQLite's "readonly database" ------------------------


@needs_nobody
def test_without_the_daemon_a_plain_user_is_told_how_to_get_access(shared_dir) -> None:
    database = shared_dir / "asrpt.db"
    url = f"sqlite:///{database}"
    _fill(url)
    _write_config(shared_dir, url)
    assert _others_bits(database) == 0
    for argv in (["queue"], ["eta", "102"], ["explain", "102"]):
        result = _asrpt_as_nobody(shared_dir, *argv)
        assert result.returncode == 2, result
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert "asrptd" in result.stderr and str(shared_dir / "asrptd.sock") in result.stderr, result.stderr
        assert "cannot read" in result.stderr and str(database) in result.stderr, result.stderr

    # A history made before this fix: 0644, readable, but SQLite (WAL) wants to create its -shm
    # file in a directory only root may write: "attempt to write a readonly database".
    for path in shared_dir.glob("asrpt.db*"):
        path.chmod(0o644)
    assert not list(shared_dir.glob("asrpt.db-*"))
    result = _asrpt_as_nobody(shared_dir, "queue")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result
    assert "readonly database" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "asrptd" in result.stderr and str(database) in result.stderr, result.stderr


# -- through the daemon's socket -----------------------------------------------------------------


@needs_nobody
def test_a_plain_user_reads_the_queue_through_the_socket_with_private_data_applied_for_their_uid(shared_dir) -> None:
    from asrpt.daemon.local_socket import start_socket_server

    url = f"sqlite:///{shared_dir / 'asrpt.db'}"
    _fill(url)
    _write_config(shared_dir, url)
    privacy = parse_slurm_conf("PrivateData=jobs\nSlurmUser=root\n")
    server = start_socket_server(str(shared_dir / "asrptd.sock"), HistoryRepository.from_url(url), job_privacy=lambda: privacy)
    try:
        assert stat.S_IMODE((shared_dir / "asrptd.sock").stat().st_mode) == 0o666
        queue = _asrpt_as_nobody(shared_dir, "queue", "--noheader", "--format", "%i %u")
        assert queue.returncode == 0, queue.stderr
        assert queue.stdout.split() == ["102", "nobody"]  # the file itself is 0600: this came through the socket
        jobs = json.loads(_asrpt_as_nobody(shared_dir, "queue", "--json").stdout)["jobs"]
        assert [j["job_id"] for j in jobs] == ["102"]

        eta = _asrpt_as_nobody(shared_dir, "eta", "101")
        assert eta.returncode == 2 and "PrivateData=jobs" in eta.stderr and "alice" not in eta.stdout + eta.stderr
        assert "102" in _asrpt_as_nobody(shared_dir, "eta", "102").stdout

        explain = _asrpt_as_nobody(shared_dir, "explain", "102", "--json")
        facts = json.loads(explain.stdout)
        assert [a["job_id"] for a in facts["ahead"]] == [None] and facts["history"]["iterations_hint"] is None
        assert [r["user"] for r in facts["running_on_its_partitions"]] == [None]
        text = _asrpt_as_nobody(shared_dir, "explain", "102")
        assert text.returncode == 0 and "another user's job" in text.stdout and "alice" not in text.stdout

        # Root (uid 0 from SO_PEERCRED) sees everything, through the same socket.
        root = subprocess.run([sys.executable, "-m", "asrpt.cli.main", "queue", "--noheader", "--format", "%i"],
                              capture_output=True, text=True, timeout=60, env=_env(shared_dir))
        assert root.stdout.split() == ["100", "101", "102"], root.stderr
    finally:
        server.shutdown()
    assert not (shared_dir / "asrptd.sock").exists()


def _ask(path: Path, payload: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(payload)
        client.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    return json.loads(data)


def test_the_socket_answers_bad_requests_with_errors_and_keeps_serving(tmp_path) -> None:
    from asrpt.cli.queue_privacy import PUBLIC
    from asrpt.daemon.local_socket import start_socket_server

    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    _fill(url)
    path = tmp_path / "asrptd.sock"
    server = start_socket_server(str(path), HistoryRepository.from_url(url), job_privacy=lambda: PUBLIC)
    try:
        assert "not JSON" in _ask(path, b"{nope\n")["error"]
        answer = _ask(path, b'{"view": "drop"}\n')
        assert "'drop'" in answer["error"] and "eta, explain, queue" in answer["error"]
        assert "too long" in _ask(path, b"x" * 100_000)["error"]
        assert _ask(path, b'{"view": "eta", "job_id": "999"}\n')["unknown_job"]
        assert [r["slurm_job_id"] for r in _ask(path, b'{"view": "queue"}\n')["rows"]] == ["100", "101", "102"]
        # The one connected: uid 0 here, so everything; the request cannot claim another uid.
        assert len(_ask(path, b'{"view": "queue", "uid": 65534}\n')["rows"]) == 3
    finally:
        server.shutdown()


def test_a_stale_socket_is_replaced_and_a_live_one_or_a_file_is_refused(tmp_path) -> None:
    from asrpt.cli.queue_privacy import PUBLIC
    from asrpt.daemon.local_socket import start_socket_server

    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    _fill(url)
    path = tmp_path / "run" / "asrptd.sock"
    path.parent.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # a daemon killed with SIGKILL leaves this
    server = start_socket_server(str(path), HistoryRepository.from_url(url), job_privacy=lambda: PUBLIC)
    try:
        with pytest.raises(ConfigError, match="another asrptd answers"):
            start_socket_server(str(path), HistoryRepository.from_url(url), job_privacy=lambda: PUBLIC)
    finally:
        server.shutdown()
    path.write_text("not a socket")
    with pytest.raises(ConfigError, match="not a socket"):
        start_socket_server(str(path), HistoryRepository.from_url(url), job_privacy=lambda: PUBLIC)
    assert path.read_text() == "not a socket"


@needs_nobody
def test_a_running_asrptd_serves_a_plain_user_over_its_socket(shared_dir) -> None:
    """The real daemon process (its loop; Slurm here does not answer, the history does)."""
    url = f"sqlite:///{shared_dir / 'asrpt.db'}"
    _fill(url)
    _write_config(shared_dir, url, private=True)
    bin_dir = shared_dir / "bin"
    bin_dir.mkdir()
    for command in ("squeue", "sinfo", "scontrol", "sacct"):
        (bin_dir / command).write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
        (bin_dir / command).chmod(0o755)
    daemon = subprocess.Popen([sys.executable, "-m", "asrpt.daemon.main", "--config", str(shared_dir / "asrpt.toml")],
                              env=_env(shared_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (shared_dir / "asrptd.sock").exists() and daemon.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert daemon.poll() is None, daemon.stderr.read()[-2000:]  # type: ignore[union-attr]
        queue = _asrpt_as_nobody(shared_dir, "queue", "--noheader", "--format", "%i %u")
        assert queue.returncode == 0 and queue.stdout.split() == ["102", "nobody"], queue
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, stderr[-2000:]
    assert not (shared_dir / "asrptd.sock").exists()


def test_asrptd_takes_other_users_read_access_away_from_an_older_history(tmp_path, caplog) -> None:
    """A history made before asrpt created it 0600 (0644, and its -wal/-shm) is closed to other
    users when the daemon starts, and the log says so; the owner's group keeps what it had."""
    from asrpt.daemon.main import build_daemon

    database = tmp_path / "asrpt.db"
    url = f"sqlite:///{database}"
    _fill(url)
    held = HistoryRepository.from_url(url)  # keeps -wal/-shm in place
    held.latest_forecasts()
    for path in tmp_path.glob("asrpt.db*"):
        path.chmod(0o644)
    (tmp_path / "state").mkdir()
    (tmp_path / "asrpt.toml").write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\nsocket_path = ""\n[database]\nurl = "{url}"\n'
        f'[spool]\ndir = "{tmp_path / "spool"}"\n[[slurm.partitions]]\nname = "gpu"\naccelerator = "v100"\n'
    )
    with caplog.at_level("WARNING"):
        daemon = build_daemon(str(tmp_path / "asrpt.toml"), dry_run=True)
    daemon.repository.close()
    held.close()
    assert stat.S_IMODE(database.stat().st_mode) == 0o640
    assert any(str(database) in r.getMessage() and "other users" in r.getMessage() for r in caplog.records)


@settings(max_examples=200, deadline=None)
@example(b"[" * 3000 + b"\n")  # json.loads: RecursionError
@given(st.one_of(st.binary(max_size=6000), st.builds(lambda v: json.dumps(v).encode() + b"\n", st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["view", "job_id", "user", "partition", "x"]), inner, max_size=4),
    max_leaves=10))))
def test_any_bytes_make_a_valid_request_or_a_refusal_never_another_error(payload: bytes) -> None:
    from asrpt.daemon.local_socket import _read_request, _Refused

    server_end, client_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with server_end, client_end:
        client_end.sendall(payload)
        client_end.shutdown(socket.SHUT_WR)
        try:
            request = _read_request(server_end, timeout_s=5.0, limit=4096)
        except _Refused as refused:
            assert str(refused)
            return
    assert request["view"] in ("eta", "explain", "queue")
    assert all(request.get(k) is None or isinstance(request[k], str) for k in ("user", "partition", "job_id"))
    assert request["view"] == "queue" or request["job_id"]


def test_through_the_socket_the_cli_loads_no_database_stack(tmp_path) -> None:
    """The socket path is the fast one: the records come as plain data, SQLAlchemy stays out."""
    from asrpt.cli.queue_privacy import PUBLIC
    from asrpt.daemon.local_socket import start_socket_server

    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    _fill(url)
    (tmp_path / "asrpt.toml").write_text(f'[daemon]\nsocket_path = "{tmp_path / "s.sock"}"\n[database]\nurl = "sqlite:///{tmp_path}/absent.db"\n')
    probe = (
        "import io, contextlib, sys\nfrom asrpt.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['queue']) == 0 and main(['eta', '102']) == 0 and main(['explain', '102']) == 0\n"
        "print(','.join(m for m in ('sqlalchemy', 'numpy', 'sklearn') if m in sys.modules))"
    )
    server = start_socket_server(str(tmp_path / "s.sock"), HistoryRepository.from_url(url), job_privacy=lambda: PUBLIC)
    try:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "ASRPT_CONFIG": str(tmp_path / "asrpt.toml")})
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_cli_reads_its_few_keys_once_with_the_daemons_overrides(tmp_path) -> None:
    from asrpt.cli.site_config import read_site_config, resolve_database_url

    config = tmp_path / "asrpt.toml"
    config.write_text('[daemon]\nsocket_path = "/s.sock"\n[database]\nurl = "sqlite:////w.db"\nread_url = "sqlite:////r.db"\n'
                      '[slurm]\nslurm_conf = "/etc/slurm.conf"\nnot_a_key = 1\n')
    env = {"ASRPT_CONFIG": str(config)}
    site = read_site_config(env)
    assert (site.socket_path, site.database_url, site.read_url, site.slurm_conf, site.bin_dir, site.problem) == (
        "/s.sock", "sqlite:////w.db", "sqlite:////r.db", "/etc/slurm.conf", None, None)
    assert read_site_config({**env, "ASRPT_DAEMON_SOCKET_PATH": ""}).socket_path == ""  # no socket
    assert resolve_database_url(None, env, for_reading=True) == "sqlite:////r.db"
    assert resolve_database_url(None, env) == "sqlite:////w.db"  # db upgrade/prune: the writer's
    assert resolve_database_url(None, {**env, "ASRPT_DATABASE_URL": "sqlite:////e.db"}, for_reading=True) == "sqlite:////e.db"
    assert resolve_database_url("sqlite:////cli.db", env) == "sqlite:////cli.db"
    config.write_text("not toml [")
    site = read_site_config(env)
    assert site.socket_path == "/run/asrpt/asrptd.sock" and site.database_url is None and str(config) in site.problem
