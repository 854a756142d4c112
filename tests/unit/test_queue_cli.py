"""``asrpt queue``, ``asrpt eta`` and ``asrpt explain`` against a real SQLite database filled
through the repository, as the daemon fills it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from asrpt.cli import queue_view
from asrpt.cli.main import main
from asrpt.cli.queue_commands import resolve_database_url
from asrpt.db.migrate import upgrade, upgrade_engine
from asrpt.db.repository import ForecastRecord, HistoryRepository, OutcomeRecord, SubmissionRecord
from asrpt.db.session import make_engine

NOW_S = 1_750_000_000.0  # 2025-06-15T15:06:40Z


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def _forecasts() -> list[ForecastRecord]:
    common = dict(policy="asrpt", partitions=("a100", "v100"))
    return [
        ForecastRecord(slurm_job_id="100", user="bob", running=True, accelerators=8, predicted_start_s=NOW_S - 3600,
                       predicted_end_s=NOW_S + 1800, job_name="bert-large", partition="a100", predicted_iterations=5000.0,
                       expected_iterations=5000.0, **common),
        ForecastRecord(slurm_job_id="102", user="alice", running=False, accelerators=8, predicted_start_s=NOW_S + 1800,
                       predicted_end_s=NOW_S + 5400, job_name="train-resnet", partition="a100", position=2,
                       predicted_iterations=1100.0, expected_iterations=1100.0, virtual_remaining_s=0.0, virtual_size_s=420.0,
                       reason=f"waiting for 8 accelerators; reserved on a100 from t={NOW_S + 1800:.0f}s", **common),
        ForecastRecord(slurm_job_id="101", user="carol", running=False, accelerators=4, predicted_start_s=NOW_S + 1800,
                       predicted_end_s=NOW_S + 2400, job_name="llm-tp", partition="v100", position=1, held=True,
                       predicted_iterations=0.0, expected_iterations=700.0, virtual_remaining_s=0.0, virtual_size_s=0.0,
                       reason="communication-heavy: best placement now is 2.10x its ideal per-iteration time; "
                              f"held until t={NOW_S + 300:.0f}s for a consolidated placement", **common),
        ForecastRecord(slurm_job_id="103", user="dave", running=False, accelerators=64, predicted_start_s=None,
                       predicted_end_s=None, job_name="huge", position=3, predicted_iterations=10.0, policy="asrpt",
                       partitions=("t4",), reason="no partition it allows can ever hold it"),
    ]


@pytest.fixture
def url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    for i, iterations in enumerate((1000.0, 1100.0, 1300.0)):
        repository.record_submission(SubmissionRecord(slurm_job_id=f"old{i}", user="alice", submit_time_s=NOW_S - 90_000, source="slurm", recurrence_group="resnet"))
        repository.record_outcome(OutcomeRecord(slurm_job_id=f"old{i}", start_time_s=NOW_S - 80_000, end_time_s=NOW_S - 70_000, iterations=iterations))
    repository.record_submission(SubmissionRecord(slurm_job_id="102", user="alice", submit_time_s=NOW_S - 600, source="slurm", recurrence_group="resnet", job_name="train-resnet"))
    repository.record_prediction("102", predicted_iterations=1100.0, model_version="rf-3-1749990000", made_at_s=NOW_S - 590)
    repository.record_forecasts(NOW_S - 30, _forecasts())
    repository.close()
    return url


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_queue_lists_jobs_in_scheduling_order_like_squeue(url, capsys) -> None:
    code, out, err = run(capsys, "queue", "--url", url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "START", "END", "ACCEL"]
    assert [line.split()[0] for line in lines[1:]] == ["100", "101", "102", "103"]
    assert lines[1].split() == ["100", "a100", "bert-large", "bob", "R", "2025-06-15T14:06:40", "2025-06-15T15:36:40", "8"]
    assert lines[2].split()[4:7] == ["PD", "2025-06-15T15:36:40", "2025-06-15T15:46:40"]
    assert lines[4].split() == ["103", "t4", "huge", "dave", "PD", "N/A", "N/A", "64"]
    assert len({len(line) for line in lines[:4]}) == 1, "fixed-width columns"
    assert "is asrptd running?" in err  # made long ago in wall-clock time

    code, out, _ = run(capsys, "queue", "--url", url, "--noheader", "--format", "%i|%Q|%t|%T|%b|%.6u|%r%%")
    first, held = out.splitlines()[:2]
    assert first == "100||R|RUNNING|8|   bob|running%"
    assert held.startswith("101|1|PD|PENDING|4| carol|communication-heavy: best placement now is 2.10x")
    assert "held until 2025-06-15T15:11:40 for" in held  # epoch times in reasons become local times

    code, out, _ = run(capsys, "queue", "--url", url, "--user", "alice,dave", "--noheader")
    assert [line.split()[0] for line in out.splitlines()] == ["102", "103"]
    code, out, _ = run(capsys, "queue", "--url", url, "-p", "v100", "--noheader")
    assert [line.split()[0] for line in out.splitlines()] == ["100", "101", "102"]  # run in, or allow, v100

    code, _, err = run(capsys, "queue", "--url", url, "--format", "%i %Z")
    assert code == 2 and "unknown format code %Z" in err


def test_queue_json_shape(url, capsys) -> None:
    code, out, _ = run(capsys, "queue", "--url", url, "--json")
    document = json.loads(out)
    assert set(document) == {"made_at", "made_at_s", "policy", "jobs"}
    assert document["policy"] == "asrpt" and document["made_at"] == "2025-06-15T15:06:10Z"
    jobs = {j["job_id"]: j for j in document["jobs"]}
    assert list(jobs) == ["100", "101", "102", "103"]
    assert jobs["102"] == {
        "job_id": "102", "name": "train-resnet", "user": "alice", "state": "PENDING", "held": False, "position": 2,
        "partition": "a100", "partitions": ["a100", "v100"], "accelerators": 8,
        "predicted_start": "2025-06-15T15:36:40Z", "predicted_end": "2025-06-15T16:36:40Z",
        "predicted_start_s": NOW_S + 1800, "predicted_end_s": NOW_S + 5400,
        "predicted_iterations": 1100.0, "expected_iterations": 1100.0, "virtual_remaining_s": 0.0,
        "virtual_size_s": 420.0, "reason": jobs["102"]["reason"], "policy": "asrpt",
        "made_at": "2025-06-15T15:06:10Z", "current": True,
        "end_unknown": False, "latest_end": None, "latest_end_s": None,
    }
    assert jobs["103"]["predicted_start"] is None and jobs["103"]["predicted_start_s"] is None


def test_eta(url, capsys) -> None:
    code, out, _ = run(capsys, "eta", "102", "--url", url)
    assert code == 0
    assert out.splitlines()[:3] == [
        "job 102 (train-resnet, alice): pending, 2nd in asrpt's order",
        out.splitlines()[1],
        out.splitlines()[2],
    ]
    assert "predicted start 2025-06-15T15:36:40" in out and "on a100" in out
    assert "predicted end   2025-06-15T16:36:40" in out
    code, out, _ = run(capsys, "eta", "100", "--url", url)
    assert "running on a100 since 2025-06-15T14:06:40" in out
    code, out, _ = run(capsys, "eta", "103", "--url", url)
    assert "predicted start unknown" in out and "why: no partition it allows can ever hold it" in out
    code, out, _ = run(capsys, "eta", "101", "--url", url, "--json")
    eta = json.loads(out)
    assert (eta["job_id"], eta["held"], eta["predicted_end"]) == ("101", True, "2025-06-15T15:46:40Z")

    # The next cycle no longer sees 100: it finished.
    repository = HistoryRepository.from_url(url)
    repository.record_forecasts(NOW_S, [f for f in _forecasts() if f.slurm_job_id != "100"])
    repository.close()
    code, out, _ = run(capsys, "eta", "100", "--url", url)
    assert code == 0 and "job 100 (bert-large, bob) has left the queue" in out
    code, out, _ = run(capsys, "queue", "--url", url, "--noheader")
    assert [line.split()[0] for line in out.splitlines()] == ["101", "102", "103"]


def test_explain_says_why(url, capsys) -> None:
    code, out, _ = run(capsys, "explain", "102", "--url", url)
    assert code == 0
    assert "why: waiting for 8 accelerators; reserved on a100 from 2025-06-15T15:36:40" in out
    assert "predicted iterations: 1,100" in out
    assert "first predicted 1,100 on 2025-06-15T14:56:50 by the random-forest model rf-3-1749990000 (trained on 3 finished jobs)" in out
    assert "history: 3 finished run(s) of its group 'resnet' before then (median 1,100 iterations)" in out
    assert "virtual remaining work: 0 of 420 s" in out
    assert "jobs ahead: 1 pending, 4 accelerators in all:" in out and "1. 101 carol" in out
    assert "running on its partition(s): 1 job(s) on 8 accelerators" in out
    assert "communication-heavy hold: no" in out
    assert "partition: predicted to start on a100 (allowed: a100, v100)" in out

    code, out, _ = run(capsys, "explain", "101", "--url", url)
    assert "communication-heavy hold: yes" in out and "held until 2025-06-15T15:11:40" in out
    assert "a prediction of 0 means no usable history" in out
    assert "the forecast assumes 700 iterations" in out
    assert "jobs ahead: none pending" in out

    code, out, _ = run(capsys, "explain", "102", "--url", url, "--json")
    facts = json.loads(out)
    assert facts["history"]["group_runs"]["count"] == 3 and [a["job_id"] for a in facts["ahead"]] == ["101"]


def test_unknown_job_and_missing_or_old_database_are_one_line_errors(url, tmp_path, capsys) -> None:
    code, out, err = run(capsys, "eta", "999", "--url", url)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("asrpt: error: job 999 has no forecast")
    code, _, err = run(capsys, "explain", "999", "--url", url)
    assert code == 2 and "job 999 has no forecast" in err

    missing = f"sqlite:///{tmp_path / 'absent.db'}"
    code, _, err = run(capsys, "queue", "--url", missing)
    assert code == 2 and err.count("\n") == 1 and "asrpt db upgrade" in err

    old = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{old}", create=True)
    upgrade_engine(engine, revision="0001")
    engine.dispose()
    code, _, err = run(capsys, "queue", "--url", f"sqlite:///{old}")
    assert code == 2 and err.count("\n") == 1 and "forecasts" in err and "asrpt db upgrade" in err


def test_database_url_resolution(tmp_path) -> None:
    config = tmp_path / "asrpt.toml"
    config.write_text('[database]\nurl = "sqlite:////srv/asrpt.db"\n[slurm]\nunknown_key = 1\n')
    env = {"ASRPT_CONFIG": str(config)}
    assert resolve_database_url("sqlite:///cli.db", env) == "sqlite:///cli.db"
    assert resolve_database_url(None, {**env, "ASRPT_DATABASE_URL": "sqlite:///env.db"}) == "sqlite:///env.db"
    assert resolve_database_url(None, env) == "sqlite:////srv/asrpt.db"  # other sections are not validated here
    assert resolve_database_url(None, {"ASRPT_CONFIG": str(tmp_path / "none.toml")}) == "sqlite:////var/lib/asrpt/asrpt.db"
    config.write_text("not toml [")
    assert resolve_database_url(None, env) == "sqlite:////var/lib/asrpt/asrpt.db"


def test_view_helpers() -> None:
    assert queue_view.slurm_duration(59) == "0:59"
    assert queue_view.slurm_duration(3 * 3600 + 5) == "03:00:05"
    assert queue_view.slurm_duration(2 * 86400 + 61) == "2-00:01:01"
    assert queue_view.slurm_duration(None) == "N/A"
    assert queue_view.human_delta(4320) == "in 1 h 12 min" and queue_view.human_delta(-180, future=False) == "3 min ago"
    with pytest.raises(queue_view.FormatError):
        queue_view.parse_format("%i %")


_HEAVY = ("numpy", "sklearn", "networkx", "scipy", "matplotlib")


def _imports_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(','.join(m for m in {_HEAVY + ('sqlalchemy',)!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return [m for m in result.stdout.strip().split(",") if m]


def test_queue_help_imports_nothing_heavy() -> None:
    loaded = _imports_after(
        "import io, contextlib\nfrom asrpt.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['queue', '--help'])\n    except SystemExit:\n        pass"
    )
    assert loaded == []


def test_reading_commands_never_load_the_scientific_stack(url) -> None:
    runs = "\n".join(
        f"    assert main({command + ['--url', url]!r}) == 0"
        for command in (["queue"], ["eta", "102"], ["explain", "102"])
    )
    loaded = _imports_after(
        "import io, contextlib\nfrom asrpt.cli.main import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n{runs}"
    )
    assert set(loaded) <= {"sqlalchemy"}, loaded


EVIL_NAME = "x\x1b]0;owned\x07\x1b[2J\nfake 1 row\u202e"


def test_control_characters_in_job_names_are_shown_not_obeyed(url, capsys) -> None:
    """A job name is the submitter's text: an ESC sequence must not drive the reader's terminal
    and a newline must not forge a row."""
    repository = HistoryRepository.from_url(url)
    evil = ForecastRecord(slurm_job_id="104", user="mallory", running=False, accelerators=1, predicted_start_s=NOW_S + 60,
                          predicted_end_s=NOW_S + 120, job_name=EVIL_NAME, partition="a100", position=4, policy="asrpt",
                          partitions=("a100",), reason="waiting\x1b[31m")
    repository.record_forecasts(NOW_S, [*_forecasts(), evil])
    repository.close()

    shown = "x\\x1b]0;owned\\x07\\x1b[2J\\nfake 1 row\\u202e"
    code, out, _ = run(capsys, "queue", "--url", url, "--format", "%i|%j|%r")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert out.splitlines()[-1] == f"104|{shown}|waiting\\x1b[31m"
    assert len(out.splitlines()) == 6  # header and five jobs: no forged row
    code, out, _ = run(capsys, "queue", "--url", url, "--noheader")
    assert len(out.splitlines()) == 5 and "\x1b" not in out

    for command in ("eta", "explain"):
        code, out, _ = run(capsys, command, "104", "--url", url)
        assert code == 0 and "\x1b" not in out and "\x07" not in out, command
        assert out.splitlines()[0].startswith(f"job 104 ({shown}, mallory): pending"), command

    code, out, _ = run(capsys, "queue", "--url", url, "--json")
    assert {j["job_id"]: j["name"] for j in json.loads(out)["jobs"]}["104"] == EVIL_NAME  # JSON keeps the raw text
    assert "\x1b" not in out  # escaped by json
    code, out, _ = run(capsys, "explain", "104", "--url", url, "--json")
    assert json.loads(out)["job"]["name"] == EVIL_NAME


def test_printable() -> None:
    assert queue_view.printable("résumé-ünï 训练") == "résumé-ünï 训练"
    assert queue_view.printable("a\tb\x00c\x7f\x9b") == "a\\tb\\x00c\\x7f\\x9b"


def test_a_job_of_unknown_length_shows_unknown_at_most_its_limit_not_an_end(tmp_path, capsys) -> None:
    """No history: the stored end is its time limit's bound. `asrpt eta` says "unknown, at
    most ...", the table marks it "<=", and --json gives no predicted end, only the bound."""
    url = f"sqlite:///{tmp_path / 'asrpt.db'}"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    repository.record_forecasts(NOW_S - 30, [
        ForecastRecord(slurm_job_id="7", user="eve", running=True, accelerators=1, predicted_start_s=NOW_S - 600,
                       predicted_end_s=NOW_S + 1200, policy="asrpt", partition="a100", predicted_iterations=0.0,
                       end_unknown=True),
    ])
    repository.close()
    code, out, _ = run(capsys, "eta", "7", "--url", url)
    assert code == 0 and "predicted end   unknown, at most 2025-06-15T15:26:40" in out
    code, out, _ = run(capsys, "queue", "--url", url, "--format", "%i %e %L", "--noheader")
    assert out.split()[:2] == ["7", "<=2025-06-15T15:26:40"] and out.split()[2].startswith("<=")
    code, out, _ = run(capsys, "queue", "--url", url, "--json")
    job = json.loads(out)["jobs"][0]
    assert job["predicted_end"] is None and job["predicted_end_s"] is None and job["end_unknown"] is True
    assert job["latest_end"] == "2025-06-15T15:26:40Z" and job["latest_end_s"] == NOW_S + 1200


def test_squeue_selection_options_jobs_states_and_start(url, capsys) -> None:
    code, out, _ = run(capsys, "queue", "--url", url, "--noheader", "-j", "103,100")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["100", "103"]  # asrpt's order
    code, out, _ = run(capsys, "queue", "--url", url, "--noheader", "-t", "R")
    assert [line.split()[0] for line in out.splitlines()] == ["100"]
    code, out, _ = run(capsys, "queue", "--url", url, "--noheader", "--states", "pending,RUNNING")
    assert [line.split()[0] for line in out.splitlines()] == ["100", "101", "102", "103"]
    code, out, _ = run(capsys, "queue", "--url", url, "--start")
    header, *rows = out.splitlines()
    assert header.split()[:6] == ["JOBID", "PARTITION", "NAME", "USER", "ST", "START"]
    assert [line.split()[0] for line in rows] == ["101", "102", "103"]  # pending only, as squeue --start
    with pytest.raises(SystemExit):
        main(["queue", "--url", url, "-t", "COMPLETED"])
    assert "invalid state 'COMPLETED'" in capsys.readouterr().err


def test_queue_unknown_user_errors_as_squeue_does(url, capsys) -> None:
    code, out, err = run(capsys, "queue", "--url", url, "-u", "no-such-user-s21d")
    assert (code, out) == (1, "")
    assert "Invalid user: no-such-user-s21d" in err
    code, _, _ = run(capsys, "queue", "--url", url, "-u", "root")  # known here, no jobs: an empty queue
    assert code == 0


def test_queue_says_as_of_when_the_forecasts_were_made(url, capsys) -> None:
    _, _, err = run(capsys, "queue", "--url", url)
    assert f"forecasts as of {queue_view.iso_utc(NOW_S - 30)}" in err
