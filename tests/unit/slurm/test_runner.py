"""The runner's three outcomes, with small fake Slurm commands on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from asrpt.exceptions import SlurmOutputMalformed, SlurmUnreachable
from asrpt.slurm.runner import Outcome, SlurmRunner, classify, command_key

from .conftest import FIXTURES


def fake(bin_dir: Path, name: str, body: str) -> Path:
    """A fake command: a shell script with ``body``."""
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


def runner_on_path(bin_dir: Path, **kwargs) -> SlurmRunner:
    """A runner that finds the fakes through PATH (fakes first), as a site's PATH would."""
    return SlurmRunner(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}, **kwargs)


def test_ok_passes_stdout_and_slurm_conf(bin_dir):
    fake(bin_dir, "squeue", 'echo "conf=$SLURM_CONF args=$*"')
    result = runner_on_path(bin_dir, slurm_conf="/etc/x/slurm.conf").run(["squeue", "--json"])
    assert result.outcome is Outcome.OK and result.ok and result.returncode == 0
    assert result.stdout == "conf=/etc/x/slurm.conf args=--json\n"
    result.raise_for_outcome()


def test_bin_dir_resolves_commands(bin_dir):
    fake(bin_dir, "sinfo", "echo from-bin-dir")
    result = SlurmRunner(bin_dir=str(bin_dir)).run(["sinfo"])
    assert result.ok and result.stdout.strip() == "from-bin-dir"
    assert result.argv[0] == str(bin_dir / "sinfo")


@pytest.mark.parametrize(
    "stderr",
    [
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
        "Unexpected message received for job 20",  # 22.05 scontrol update, controller down
        "squeue: fatal: Could not establish a configuration source",
        "squeue: error: Munge encode failed: Failed to access munge.socket",
        "squeue: fatal: Unable to process configuration file",
    ],
)
def test_controller_down_is_unreachable(bin_dir, stderr):
    fake(bin_dir, "scontrol", f"echo '{stderr}' >&2; exit 1")
    result = runner_on_path(bin_dir).run(["scontrol", "update", "JobId=1", "Priority=5"])
    assert result.outcome is Outcome.UNREACHABLE and result.returncode == 1
    with pytest.raises(SlurmUnreachable, match="scontrol update"):
        result.raise_for_outcome()


def test_recorded_unreachable_stderr_classifies():
    for name in ("squeue_text", "scontrol_update", "scontrol_hold"):
        folder = FIXTURES / "22.05" / "unreachable"
        rc = int((folder / f"{name}.rc").read_text())
        assert classify(rc, (folder / f"{name}.stderr").read_text()) is Outcome.UNREACHABLE, name


def test_recorded_rejections_are_malformed_not_unreachable():
    for line in (FIXTURES / "22.05" / "update_errors.txt").read_text().splitlines():
        _argv, rc, stderr = line.split(" | ", 2)
        assert classify(int(rc), stderr) is Outcome.MALFORMED, line


def test_missing_command_is_unreachable(tmp_path):
    result = SlurmRunner(bin_dir=str(tmp_path)).run(["squeue", "--json"])
    assert result.outcome is Outcome.UNREACHABLE and result.returncode is None
    assert "cannot run" in result.stderr


def test_timeout_is_unreachable(bin_dir):
    fake(bin_dir, "squeue", "exec sleep 5")
    result = runner_on_path(bin_dir, timeout_s=0.3).run(["squeue"])
    assert result.outcome is Outcome.UNREACHABLE and result.returncode is None
    assert "timed out" in result.stderr and result.duration_s < 3


def test_other_failure_is_malformed(bin_dir):
    fake(bin_dir, "scontrol", "echo 'Invalid job id specified for job 99' >&2; exit 1")
    result = runner_on_path(bin_dir).run(["scontrol", "update", "JobId=99", "Priority=5"])
    assert result.outcome is Outcome.MALFORMED
    with pytest.raises(SlurmOutputMalformed, match="Invalid job id"):
        result.raise_for_outcome()


def test_resource_temporarily_unavailable_is_retried(bin_dir, tmp_path):
    counter = tmp_path / "attempts"
    fake(bin_dir, "scontrol", f"""
n=$(cat {counter} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {counter}
if [ $n -lt 3 ]; then echo 'slurm_update error: Resource temporarily unavailable' >&2; exit 1; fi
echo updated""")
    sleeps: list[float] = []
    runner = runner_on_path(bin_dir, retries=3, retry_delay_s=0.5, sleep=sleeps.append)
    result = runner.run(["scontrol", "update", "JobId=1", "Partition=npu"])
    assert result.ok and result.attempts == 3 and result.stdout.strip() == "updated"
    assert sleeps == [0.5, 1.0]
    assert runner.counts["scontrol update"] == 1  # one logical call


def test_retries_give_up(bin_dir):
    fake(bin_dir, "scontrol", "echo 'Resource temporarily unavailable' >&2; exit 1")
    sleeps: list[float] = []
    result = runner_on_path(bin_dir, retries=2, retry_delay_s=0.1, sleep=sleeps.append).run(["scontrol", "release", "1"])
    assert result.outcome is Outcome.MALFORMED and result.attempts == 3 and len(sleeps) == 2


def test_counts_and_history(bin_dir):
    for name in ("squeue", "sinfo", "scontrol"):
        fake(bin_dir, name, "true")
    runner = runner_on_path(bin_dir)
    runner.run(["squeue", "--json"])
    runner.run(["scontrol", "update", "JobId=1", "Priority=1"])
    runner.run(["scontrol", "update", "JobId=2", "Priority=2"])
    runner.run(["scontrol", "hold", "3"])
    assert runner.counts == {"squeue": 1, "scontrol update": 2, "scontrol hold": 1}
    assert [r.argv[0] for r in runner.history][-1] == "scontrol"
    assert command_key(["/usr/bin/scontrol", "--version"]) == "scontrol"


def test_output_is_never_run_through_a_shell(bin_dir):
    fake(bin_dir, "scontrol", 'for a in "$@"; do echo "[$a]"; done')
    result = runner_on_path(bin_dir).run(["scontrol", "update", "JobId=1", "AdminComment=a b; rm -rf / $(x)"])
    assert result.stdout.splitlines()[-1] == "[AdminComment=a b; rm -rf / $(x)]"


def test_bad_arguments():
    with pytest.raises(ValueError):
        SlurmRunner(timeout_s=0)
    with pytest.raises(ValueError):
        SlurmRunner().run([])


def test_an_argument_with_a_nul_is_refused_not_raised(bin_dir):
    """A NUL in a job's AdminComment (squeue shows it) comes back in the scontrol update
    asrpt writes; subprocess raises ValueError for it, which stopped the whole apply."""
    fake(bin_dir, "scontrol", "exit 0")
    result = runner_on_path(bin_dir).run(["scontrol", "update", "JobId=7", "AdminComment=a\x00b"])
    assert result.outcome is Outcome.MALFORMED and result.returncode is None
    assert "NUL" in result.stderr
