"""The argparse pieces for `asrpt db ...` and `asrpt predict evaluate`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from asrpt.cli.db_commands import DATABASE_URL_ENV, add_db_parser, resolve_database_url
from asrpt.cli.predict_commands import add_predict_parser
from asrpt.db.repository import HistoryRepository, SubmissionRecord
from asrpt.paths import DEFAULT_DATABASE_URL


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="asrpt")
    commands = root.add_subparsers(dest="command", required=True)
    add_db_parser(commands)
    add_predict_parser(commands)
    return root


def run(*argv: str) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


def test_database_url_precedence() -> None:
    assert resolve_database_url("sqlite:///x.db", {DATABASE_URL_ENV: "sqlite:///y.db"}) == "sqlite:///x.db"
    assert resolve_database_url(None, {DATABASE_URL_ENV: "sqlite:///y.db"}) == "sqlite:///y.db"
    assert resolve_database_url(None, {}) == DEFAULT_DATABASE_URL == "sqlite:////var/lib/asrpt/asrpt.db"


def test_db_upgrade_and_prune(tmp_path: Path, monkeypatch, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    assert run("db", "upgrade") == 0
    from asrpt.db.migrate import head_revision

    assert f"revision {head_revision()}" in capsys.readouterr().out

    repository = HistoryRepository.from_url(url)
    try:
        repository.record_submission(
            SubmissionRecord(slurm_job_id="1", user="u", submit_time_s=0.0, source="slurm")
        )
    finally:
        repository.close()
    assert run("db", "prune", "--older-than-days", "30", "--url", url) == 0
    assert "deleted 1 submissions" in capsys.readouterr().out

    missing = f"sqlite:///{tmp_path / 'nothing.db'}"
    assert run("db", "prune", "--older-than-days", "30", "--url", missing) == 1
    assert missing in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser().parse_args(["db", "prune", "--older-than-days", "-1"])


def test_predict_evaluate_writes_json(any_pai_trace_path: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report.json"
    head = tmp_path / "head.csv"
    lines = any_pai_trace_path.read_text().splitlines()[:1500]
    head.write_text("\n".join(lines) + "\n")
    assert run("predict", "evaluate", "--trace", str(head), "--json", str(out)) == 0
    assert "global-median" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert set(report["models"]["rf"]) >= {"median_ape", "mae_log", "recurring", "first_seen"}
    assert run("predict", "evaluate", "--trace", str(tmp_path / "absent.csv")) == 1
