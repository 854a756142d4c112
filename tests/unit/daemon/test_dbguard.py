"""Issue 16: a history database deleted, replaced or read-only is said clearly; asrptd never
creates an empty schema over a history it used before."""

from __future__ import annotations

import pytest

from asrpt.daemon.dbguard import DatabaseGuard, check_before_upgrade
from asrpt.daemon.main import build_daemon
from asrpt.exceptions import DatabaseUnavailable


def _config(tmp_path, url: str) -> str:
    path = tmp_path / "asrpt.toml"
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    path.write_text(
        f'[daemon]\nstate_dir = "{state}"\n[database]\nurl = "{url}"\n[spool]\ndir = "{tmp_path / "spool"}"\n'
        '[[slurm.partitions]]\nname = "gpu"\naccelerator = "v100"\n'
    )
    return str(path)


def test_a_deleted_database_is_not_replaced_by_an_empty_one_at_start(tmp_path) -> None:
    db = tmp_path / "asrpt.db"
    config = _config(tmp_path, f"sqlite:///{db}")
    daemon = build_daemon(config, dry_run=True)
    daemon.repository.close()
    db.unlink()
    with pytest.raises(DatabaseUnavailable, match="is missing, but asrptd kept its history there before"):
        build_daemon(config, dry_run=True)
    assert not db.exists()  # no empty schema was created


def test_a_replaced_database_is_refused_at_start(tmp_path) -> None:
    db = tmp_path / "asrpt.db"
    config = _config(tmp_path, f"sqlite:///{db}")
    build_daemon(config, dry_run=True).repository.close()
    db.unlink()
    db.write_bytes(b"")  # an admin's "touch", or a new empty file from elsewhere
    with pytest.raises(DatabaseUnavailable, match="not the history asrptd kept before"):
        build_daemon(config, dry_run=True)


def test_a_read_only_database_is_refused_at_start(tmp_path) -> None:
    db = tmp_path / "asrpt.db"
    build_daemon(_config(tmp_path, f"sqlite:///{db}"), dry_run=True).repository.close()
    read_only = _config(tmp_path, f"sqlite:///file:{db}?mode=ro&uri=true")
    with pytest.raises(DatabaseUnavailable, match="read-only|readonly"):
        build_daemon(read_only, dry_run=True)


def test_a_database_deleted_while_running_fails_each_cycle_with_the_reason(daemon, tmp_path) -> None:
    db = tmp_path / "asrpt.db"
    daemon.database_guard = DatabaseGuard(f"sqlite:///{db}", str(tmp_path / "state"))
    assert daemon.cycle() is not None
    db.rename(tmp_path / "moved.db")
    assert daemon.cycle() is None
    assert "was deleted while asrptd ran" in daemon.stats.last_error
    assert daemon.stats.escaped == 0  # an error asrpt names, not a crash


def test_a_first_start_needs_no_marker(tmp_path) -> None:
    check_before_upgrade(f"sqlite:///{tmp_path / 'new.db'}", str(tmp_path / "state"))


def test_a_damaged_sqlite_file_is_a_clear_error_not_a_traceback(tmp_path):
    """Issue 16: a corrupted history gave a traceback at start (exit 1, a restart loop)."""
    import pytest

    from asrpt.db.migrate import upgrade
    from asrpt.exceptions import DatabaseUnavailable

    damaged = tmp_path / "history.db"
    damaged.write_bytes(bytes(range(256)) * 32)
    with pytest.raises(DatabaseUnavailable, match="not a SQLite database or is damaged"):
        upgrade(f"sqlite:///{damaged}")
    assert damaged.read_bytes() == bytes(range(256)) * 32  # nothing written over it
