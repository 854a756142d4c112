"""Issue 16, the communication-heavy hold race, on a real slurmctld with job_submit.lua.

Slurm starts a new job as soon as it fits, often within a second of sbatch; the daemon sees
it only at its next cycle. A job that only fits split across nodes (8-way tensor parallel on
two half-free nodes) would run split before asrptd could hold it for one node. The plugin's
``FIRST_LOOK_S`` gives such a job a begin time that far ahead and ``asrpt-look`` in its
AdminComment; the daemon's first cycle clears both (or holds the job). With no daemon the
job starts at the begin time anyway. This module runs its own lua-enabled test-bed with
``FIRST_LOOK_S = 10`` (``ASRPT_FIRST_LOOK_PLUGIN=FILE`` runs another plugin copy instead,
e.g. one without the option, to see the race).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrpt.db.repository import SubmissionRecord

from .conftest import SBIN_PATH, TESTBED_SCRIPTS, LocalCluster, _unavailable
from .test_daemon_slurm import _daemon, _jobs

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
FIRST_LOOK_S = 10


@pytest.fixture(scope="module")
def look_bed() -> Iterator[LocalCluster]:
    if shutil.which("slurmctld", path=SBIN_PATH) is None or shutil.which("sbatch", path=SBIN_PATH) is None:
        _unavailable("Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)")
    if os.geteuid() != 0:
        _unavailable("the Slurm test-bed needs root (slurmd runs jobs as their users)")
    folder = Path(tempfile.mkdtemp(prefix="asrpt-look-bed-", dir="/tmp"))
    os.chmod(folder, 0o755)
    plugin = os.environ.get("ASRPT_FIRST_LOOK_PLUGIN")
    if not plugin:
        source = (REPO / "contrib" / "slurm" / "job_submit.lua").read_text()
        source, count = re.subn(r"\nlocal FIRST_LOOK_S = \d+", f"\nlocal FIRST_LOOK_S = {FIRST_LOOK_S}", source)
        assert count == 1
        plugin = str(folder / "job_submit-look.lua")
        Path(plugin).write_text(source)
    env = {**os.environ, "PATH": SBIN_PATH, "ASRPT_TESTBED_LUA": plugin}
    up = subprocess.run([str(TESTBED_SCRIPTS / "up.sh"), str(folder / "bed"), "--with-lua-plugin"],
                        capture_output=True, text=True, env=env, timeout=180)  # fmt: skip
    if up.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"up.sh --with-lua-plugin failed ({up.returncode}):\n{up.stderr[-3000:]}")
    try:
        yield LocalCluster(folder / "bed")
    finally:
        subprocess.run([str(TESTBED_SCRIPTS / "down.sh"), str(folder / "bed"), "--purge"],
                       capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def bed(look_bed: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("SLURM_CONF", look_bed.slurm_conf)
    try:
        yield look_bed
    finally:
        look_bed.cancel_all()


def _half_busy(bed: LocalCluster) -> list[str]:
    """4 of 8 a100 busy on node1 and on node2: 8 accelerators free, but only split 4+4."""
    fillers = [bed.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:4", wrap="sleep 300") for node in ("node1", "node2")]
    for job_id in fillers:
        bed.wait_state(job_id, "RUNNING")
    return fillers


def _tp8(bed: LocalCluster) -> tuple[str, float]:
    submitted_s = time.time()
    return bed.sbatch("-p", "a100", "--gpus=8", "--comment", "asrpt:tp=8,class=resnet50", wrap="sleep 5"), submitted_s


def test_a_job_slurm_could_split_waits_for_the_daemons_first_look_and_is_held(bed, tmp_path):
    fillers = _half_busy(bed)
    tp8, _ = _tp8(bed)
    daemon = _daemon(bed, tmp_path, queue_order="remaining", comm_heavy_tau=1.0)
    daemon.repository.record_submission(SubmissionRecord(slurm_job_id=tp8, user="root", submit_time_s=0.0, source="wrapper"))
    daemon.repository.record_prediction(tp8, predicted_iterations=1e6, model_version="test", made_at_s=0.0)
    time.sleep(3)  # the gap until the daemon's next cycle: Slurm would have started it split by now
    job = _jobs(bed)[tp8]
    assert job.state == "PENDING" and job.reason == "BeginTime" and "asrpt-look" in job.admin_comment

    decision = daemon.cycle()
    assert decision is not None and tp8 in decision.holds, decision.reasons.get(tp8)
    assert daemon.backend.last_apply.first_looks == 1
    bed.wait_for("the hold", lambda: _jobs(bed)[tp8].is_held)
    job = _jobs(bed)[tp8]
    assert "asrpt-look" not in job.admin_comment and "asrpt-rec:" in job.admin_comment
    time.sleep(FIRST_LOOK_S)  # past the plugin's bound: held, still not split
    assert _jobs(bed)[tp8].state == "PENDING"

    # Once one node frees, the daemon releases it onto that node alone.
    bed.run("scancel", fillers[1])
    for _ in range(20):
        decision = daemon.cycle()
        if decision is not None and any(p.job_id == tp8 for p in decision.starts):
            break
        time.sleep(0.5)
    bed.wait_state(tp8, "RUNNING", "COMPLETED", timeout=30)
    assert _jobs(bed)[tp8].nodes == ("node2",)


def test_with_the_daemon_stopped_the_job_still_starts_after_the_bound(bed):
    _half_busy(bed)
    tp8, submitted_s = _tp8(bed)
    time.sleep(3)
    assert _jobs(bed)[tp8].state == "PENDING" and _jobs(bed)[tp8].reason == "BeginTime"
    bed.wait_state(tp8, "RUNNING", "COMPLETED", timeout=FIRST_LOOK_S + 20)
    started = _jobs(bed)[tp8].start_time_s
    assert started is not None and submitted_s + FIRST_LOOK_S - 2 <= started <= submitted_s + FIRST_LOOK_S + 15


def test_a_job_the_daemon_does_not_hold_starts_at_its_first_look_not_at_the_bound(bed, tmp_path):
    tp8, submitted_s = _tp8(bed)  # the cluster is idle: it fits on one node
    daemon = _daemon(bed, tmp_path)
    assert daemon.cycle() is not None
    assert daemon.backend.last_apply.first_looks == 1
    bed.wait_state(tp8, "RUNNING", "COMPLETED", timeout=FIRST_LOOK_S)
    job = _jobs(bed)[tp8]
    assert job.start_time_s is not None and job.start_time_s < submitted_s + FIRST_LOOK_S - 2
    assert len(job.nodes) == 1 and "asrpt-look" not in job.admin_comment


def test_jobs_slurm_cannot_split_do_not_wait(bed):
    job = bed.sbatch("-p", "a100", "--gres=gpu:a100:8", wrap="sleep 5")
    bed.wait_state(job, "RUNNING", "COMPLETED", timeout=8)
    assert "asrpt-look" not in _jobs(bed)[job].admin_comment
