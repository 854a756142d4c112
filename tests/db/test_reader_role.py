"""Issue 16: on PostgreSQL, users' reads need no write credentials. ``asrpt db grant-reader
ROLE`` gives a role SELECT on asrpt's tables and nothing else, and ``[database] read_url``
is what ``asrpt queue/eta/explain`` then use; the role cannot INSERT, UPDATE or DELETE.
Real PostgreSQL only (``ASRPT_TEST_POSTGRES_READER_URL``, from contrib/ci/start-postgres.sh)."""

from __future__ import annotations

import json
import os
import time

import pytest
from sqlalchemy import exc, text
from sqlalchemy.engine import make_url

from asrpt.cli.main import main
from asrpt.db.migrate import upgrade_engine
from asrpt.db.repository import ForecastRecord, HistoryRepository, OutcomeRecord, SubmissionRecord
from asrpt.db.session import make_engine
from tests.db.conftest import POSTGRES_URL_ENV, _wipe_postgres

READER_URL_ENV = "ASRPT_TEST_POSTGRES_READER_URL"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not (os.environ.get(POSTGRES_URL_ENV) and os.environ.get(READER_URL_ENV)),
                       reason=f"{POSTGRES_URL_ENV} and {READER_URL_ENV} are not set (contrib/ci/start-postgres.sh)"),
]

WRITES = (
    "INSERT INTO forecasts (slurm_job_id, made_at, current, policy, running, held, user_name, accelerators, first_made_at) "
    "VALUES ('666', now(), true, 'asrpt', false, false, 'mallory', 1, now())",
    "INSERT INTO predictions (submission_id, model_version, predicted_iterations, made_at) "
    "SELECT id, 'forged', 0, now() FROM submissions",
    "UPDATE forecasts SET user_name = 'mallory'",
    "DELETE FROM job_outcomes",
    "TRUNCATE submissions CASCADE",
    "CREATE TABLE asrpt_reader_made (x integer)",
)


@pytest.fixture
def history():
    engine = make_engine(os.environ[POSTGRES_URL_ENV])
    _wipe_postgres(engine)
    upgrade_engine(engine)
    repository = HistoryRepository(engine)
    now_s = time.time()
    repository.record_submission(SubmissionRecord(slurm_job_id="7", user="alice", submit_time_s=now_s - 90, source="slurm"))
    repository.record_outcome(OutcomeRecord(slurm_job_id="7", start_time_s=now_s - 80, end_time_s=now_s - 10, iterations=5.0))
    repository.record_forecasts(now_s, [ForecastRecord(slurm_job_id="8", user="alice", policy="asrpt", running=False, accelerators=1,
                                                       predicted_start_s=now_s + 5, predicted_end_s=now_s + 50, position=1)])
    yield engine
    engine.dispose()


def test_grant_reader_gives_select_only_and_queue_reads_through_read_url(history, tmp_path, monkeypatch, capsys) -> None:
    admin_url, reader_url = os.environ[POSTGRES_URL_ENV], os.environ[READER_URL_ENV]
    role = make_url(reader_url).username
    reader = make_engine(reader_url)
    try:
        with history.begin() as connection:  # a role that could write before: grant-reader takes it back
            connection.execute(text(f'GRANT INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public TO "{role}"'))
            connection.execute(text(f'GRANT CREATE ON SCHEMA public TO "{role}"'))
        assert main(["db", "grant-reader", role, "--url", admin_url]) == 0
        out = capsys.readouterr().out
        assert role in out and "SELECT" in out and make_url(admin_url).password not in out

        # The users' configuration: no socket, a writer URL that would not even connect, the reader's URL.
        config = tmp_path / "asrpt.toml"
        config.write_text(f'[daemon]\nsocket_path = ""\n[database]\nurl = "postgresql+psycopg://nobody@127.0.0.1:1/x"\n'
                          f'read_url = "{reader_url}"\n')
        monkeypatch.setenv("ASRPT_CONFIG", str(config))
        monkeypatch.delenv("ASRPT_DATABASE_URL", raising=False)
        assert main(["queue", "--json"]) == 0
        assert [j["job_id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["8"]
        assert main(["explain", "8"]) == 0

        for statement in WRITES:
            with pytest.raises(exc.ProgrammingError, match="permission denied"), reader.begin() as connection:
                connection.execute(text(statement))
        with reader.connect() as connection:  # what the CLI needs, it has
            assert connection.execute(text("SELECT count(*) FROM submissions")).scalar() == 1
        with history.connect() as connection:  # nothing changed
            assert connection.execute(text("SELECT count(*) FROM job_outcomes")).scalar() == 1
            assert connection.execute(text("SELECT count(*) FROM predictions")).scalar() == 0
            assert connection.execute(text("SELECT user_name FROM forecasts")).scalars().all() == ["alice"]

        # A table a later migration adds is readable too (default privileges), and no more.
        with history.begin() as connection:
            connection.execute(text("CREATE TABLE asrpt_later_table (x integer)"))
            connection.execute(text("INSERT INTO asrpt_later_table VALUES (1)"))
        try:
            with reader.connect() as connection:
                assert connection.execute(text("SELECT x FROM asrpt_later_table")).scalar() == 1
            with pytest.raises(exc.ProgrammingError, match="permission denied"), reader.begin() as connection:
                connection.execute(text("INSERT INTO asrpt_later_table VALUES (2)"))
        finally:
            with history.begin() as connection:
                connection.execute(text("DROP TABLE asrpt_later_table"))
    finally:
        reader.dispose()


def test_grant_reader_errors_name_the_problem(history, capsys) -> None:
    admin_url = os.environ[POSTGRES_URL_ENV]
    assert main(["db", "grant-reader", "no_such_role_x", "--url", admin_url]) == 1
    err = capsys.readouterr().err
    assert "no role 'no_such_role_x'" in err and "CREATE ROLE" in err and make_url(admin_url).password not in err
    assert main(["db", "grant-reader", 'x"; DROP TABLE outcomes; --', "--url", admin_url]) == 1
    with history.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM job_outcomes")).scalar() == 1


def test_grant_reader_on_sqlite_says_file_modes_decide(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert main(["db", "upgrade", "--url", url]) == 0
    assert main(["db", "grant-reader", "anyone", "--url", url]) == 1
    assert "PostgreSQL" in capsys.readouterr().err


def test_a_role_without_select_gets_one_line_saying_what_to_grant(history, capsys) -> None:
    reader_url = os.environ[READER_URL_ENV]
    role = make_url(reader_url).username
    with history.begin() as connection:  # default privileges of an earlier grant would let it read
        connection.execute(text(f'REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM "{role}"'))
    assert main(["queue", "--url", reader_url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "permission denied" in err and "asrpt db grant-reader" in err, err
    assert make_url(reader_url).password not in err
