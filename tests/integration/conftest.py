"""A real Slurm for the integration tests: contrib/slurm/testbed/up.sh, once per session.

``ASRPT_TESTBED_DIR=DIR`` reuses a test-bed that is already up (``eval "$(up.sh DIR)"``
exports it); otherwise one is started in a temporary directory and stopped at the end.
Without Slurm (or as non-root) the tests skip with the reason, unless
``ASRPT_REQUIRE_SERVICES=1`` (CI), where they fail instead. Every test ends by cancelling
all jobs of the test-bed: do not point ASRPT_TESTBED_DIR at a cluster in use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTBED_SCRIPTS = REPO / "contrib" / "slurm" / "testbed"
REQUIRE_SERVICES = os.environ.get("ASRPT_REQUIRE_SERVICES") == "1"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _unavailable(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"ASRPT_REQUIRE_SERVICES=1 but the Slurm test-bed is unavailable: {reason}")
    pytest.skip(reason)


@dataclass
class LocalCluster:
    """A running test-bed and small helpers to drive it like a user and an admin would."""

    dir: Path

    @property
    def slurm_conf(self) -> str:
        return str(self.dir / "etc" / "slurm.conf")

    @property
    def jobcomp_log(self) -> str:
        return str(self.dir / "log" / "jobcomp.log")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.slurm_conf, "PATH": SBIN_PATH}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.dir)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def sbatch(self, *args: str, wrap: str = "sleep 60") -> str:
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", wrap).stdout
        return out.strip().split(";")[0]

    def field(self, job_id: str, fmt: str) -> str:
        return self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", fmt, check=False).stdout.strip()

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.2)

    def wait_state(self, job_id: str, *states: str, timeout: float = 30.0) -> None:
        self.wait_for(f"job {job_id} to be {'/'.join(states)} (is {self.field(job_id, '%T')})",
                      lambda: self.field(job_id, "%T") in states, timeout)

    def cancel_all(self) -> None:
        ids = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if ids:
            self.run("scancel", *ids, check=False)
        self.wait_for("all jobs to end",
                      lambda: not self.run("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i", check=False).stdout.strip(), 30)

    def slurmctld(self, action: str) -> None:
        self.run(str(TESTBED_SCRIPTS / "slurmctld.sh"), str(self.dir), action, timeout=90)


def _controller_up(testbed: LocalCluster) -> bool:
    try:
        return "is UP" in testbed.run("scontrol", "ping", check=False, timeout=15).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    given = os.environ.get("ASRPT_TESTBED_DIR")
    if given:
        bed = LocalCluster(Path(given).resolve())
        if not (bed.dir / "etc" / "slurm.conf").is_file():
            _unavailable(f"ASRPT_TESTBED_DIR={given} has no etc/slurm.conf (start it with contrib/slurm/testbed/up.sh)")
        if not _controller_up(bed):
            _unavailable(f"the test-bed in ASRPT_TESTBED_DIR={given} does not answer scontrol ping")
        yield bed
        return
    if shutil.which("slurmctld", path=SBIN_PATH) is None or shutil.which("sbatch", path=SBIN_PATH) is None:
        _unavailable("Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)")
    if os.geteuid() != 0:
        _unavailable("the Slurm test-bed needs root (slurmd runs jobs as their users)")
    folder = tmp_path_factory.mktemp("slurm-testbed")
    env = {**os.environ, "PATH": SBIN_PATH}
    up = subprocess.run([str(TESTBED_SCRIPTS / "up.sh"), str(folder)], capture_output=True, text=True, env=env, timeout=180)
    if up.returncode != 0:
        pytest.fail(f"up.sh failed ({up.returncode}):\n{up.stderr[-3000:]}")
    assert up.stdout.strip().splitlines()[-1] == f"export SLURM_CONF={folder}/etc/slurm.conf"
    try:
        yield LocalCluster(folder)
    finally:
        subprocess.run([str(TESTBED_SCRIPTS / "down.sh"), str(folder), "--purge"],
                       capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def cluster(testbed: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    """The test-bed with SLURM_CONF exported for the test; all jobs cancelled afterwards."""
    monkeypatch.setenv("SLURM_CONF", testbed.slurm_conf)
    if not _controller_up(testbed):  # a previous test may have left it stopped
        testbed.slurmctld("start")
    try:
        yield testbed
    finally:
        if not _controller_up(testbed):
            testbed.slurmctld("start")
        testbed.cancel_all()
