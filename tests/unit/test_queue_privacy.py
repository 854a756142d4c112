"""Slurm's PrivateData=jobs in asrpt's queue views: fake slurm.conf files and a fake
``scontrol show config`` text; the end-to-end test runs ``asrpt`` as the user nobody."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from asrpt.cli.queue_privacy import counts, parse_show_config, parse_slurm_conf, read_job_privacy, redacted
from asrpt.db.migrate import upgrade
from asrpt.db.repository import ForecastRecord, HistoryRepository
from tests.helpers import can_run_as_nobody, run_as_nobody

NOW_S = 1_750_000_000.0
NOBODY = pwd.getpwnam("nobody")

SHOW_CONFIG = """Configuration data as of 2025-06-15T15:06:40
AccountingStorageType   = (null)
PrivateData             = jobs,usage
SlurmUser               = slurm(64030)
SlurmdUser              = root(0)
"""


def test_private_data_from_slurm_conf_and_show_config() -> None:
    conf = parse_slurm_conf("ClusterName=c\n# PrivateData=none\nprivatedata=usage,Jobs  # hide\nSlurmUser=nobody\n")
    assert conf.private_jobs and conf.admin_uids == {0, NOBODY.pw_uid}
    assert not parse_slurm_conf("PrivateData=usage\n").private_jobs
    assert not parse_slurm_conf("ClusterName=c\n").private_jobs  # Slurm's default: nothing private
    shown = parse_show_config(SHOW_CONFIG)
    assert shown.private_jobs and shown.admin_uids == {0, 64030}
    assert not parse_show_config("PrivateData = none\nSlurmUser = root(0)\n").private_jobs
    with pytest.raises(ValueError):
        parse_show_config("scontrol: error: nothing\n")


def test_who_sees_what(tmp_path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("PrivateData=jobs\nSlurmUser=root\n")
    privacy, warning = read_job_privacy(slurm_conf=str(conf), environ={})
    assert warning is None and privacy.private_jobs and privacy.source == str(conf)
    rows = [_row("1", "nobody"), _row("2", "alice")]
    assert [r.slurm_job_id for r in privacy.visible(rows, NOBODY.pw_uid)] == ["1"]
    assert [r.slurm_job_id for r in privacy.visible(rows, 0)] == ["1", "2"]  # root
    assert privacy.visible(rows, 4_000_000_000) == []  # a uid with no name sees nothing
    conf.write_text("PrivateData=usage\n")
    assert len(read_job_privacy(slurm_conf=None, environ={"SLURM_CONF": str(conf)})[0].visible(rows, NOBODY.pw_uid)) == 2

    # Nothing to read (no slurm.conf, no scontrol): fail closed, and say so.
    privacy, warning = read_job_privacy(slurm_conf=str(tmp_path / "absent.conf"), bin_dir=str(tmp_path), environ={})
    assert privacy.private_jobs and "PrivateData" in warning and "scontrol show config" in warning
    assert redacted({"job_id": "2", "user": "alice", "name": "n", "reason": "r", "accelerators": 4}) == {
        "job_id": None, "user": None, "name": None, "reason": None, "accelerators": 4}
    assert counts(rows) == {"running": 0, "pending": 2, "held": 0, "accelerators_running": 0, "accelerators_pending": 2}


def _row(job_id: str, user: str, *, running: bool = False, position: int | None = None, **extra) -> ForecastRecord:
    return ForecastRecord(slurm_job_id=job_id, user=user, running=running, accelerators=1, predicted_start_s=NOW_S + 60,
                          predicted_end_s=NOW_S + 120, job_name=f"name-of-{user}", partition="a100", position=position,
                          policy="asrpt", partitions=("a100",), **extra)


@pytest.fixture
def shared_dir():
    """A directory the user nobody can read and write (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="asrpt-privacy-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(not can_run_as_nobody(), reason="runs asrpt as nobody: needs root and setpriv")
@pytest.mark.parametrize("private", [True, False])
def test_asrpt_as_another_user_sees_only_their_jobs_under_private_data(shared_dir, private) -> None:
    url = f"sqlite:///{shared_dir / 'asrpt.db'}"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    repository.record_forecasts(NOW_S, [
        _row("100", "alice", running=True),
        _row("101", "alice", position=1),
        _row("102", "nobody", position=2),
    ])
    repository.close()
    (shared_dir / "asrpt.db").chmod(0o666)
    (shared_dir / "slurm.conf").write_text(f"ClusterName=test\nPrivateData={'jobs' if private else 'usage'}\nSlurmUser=root\n")
    (shared_dir / "asrpt.toml").write_text(f'[slurm]\nslurm_conf = "{shared_dir / "slurm.conf"}"\n')
    for path in shared_dir.iterdir():
        path.chmod(0o666)

    def asrpt(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_as_nobody(
            [sys.executable, "-m", "asrpt.cli.main", *argv, "--url", url], cwd=shared_dir,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path), "ASRPT_CONFIG": str(shared_dir / "asrpt.toml"),
                 "HOME": str(shared_dir)},
        )

    queue = asrpt("queue", "--noheader", "--format", "%i %u")
    assert queue.returncode == 0, queue.stderr
    listed = [line.split()[0] for line in queue.stdout.splitlines()]
    assert listed == (["102"] if private else ["100", "101", "102"])
    jobs = json.loads(asrpt("queue", "--json").stdout)["jobs"]
    assert [j["job_id"] for j in jobs] == listed

    eta = asrpt("eta", "101")
    if private:
        assert eta.returncode == 2 and "PrivateData=jobs" in eta.stderr and "alice" not in eta.stdout + eta.stderr
    else:
        assert eta.returncode == 0 and "alice" in eta.stdout

    explain = asrpt("explain", "102")
    assert explain.returncode == 0, explain.stderr
    assert ("another user's job" in explain.stdout) == private and ("alice" in explain.stdout) != private
    facts = json.loads(asrpt("explain", "102", "--json").stdout)
    assert [a["job_id"] for a in facts["ahead"]] == ([None] if private else ["101"])
    assert [r["user"] for r in facts["running_on_its_partitions"]] == ([None] if private else ["alice"])
