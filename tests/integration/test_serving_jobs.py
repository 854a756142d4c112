"""LLM serving jobs on the real local Slurm: submitted through asrpt-sbatch with
``#ASRPT serve-model=NAME tp=auto``, placed by the plan ``asrpt serving plan`` wrote.

The plan is made in the test with the real commands (``asrpt serving fit`` on synthetic
splitwise profiles of llama2-70b on A100s, then ``asrpt serving plan --cluster a100x8+v100x4``,
the test-bed's GPU machine types): the 70B model does not fit in the memory of 4 V100s, so
the plan offers only the a100 machine type, at its best tensor-parallel degree.

The queue: node1 busy, and an exclusive three-node job ahead of everyone in Slurm's own
(FIFO) order, waiting for node1. Slurm therefore keeps the later jobs pending although nodes
are free, and ``asrptd --once`` decides where they start: the serving job
(``--partition=a100,v100``) only on a100, pinned there, with ``serve tp=T`` in its
AdminComment; a job naming an unknown model as an ordinary job. When only the v100 node is
free, the serving job must wait (asrpt holds it) instead of being started there by Slurm.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from asrpt.slurm.cli_backend import PRIORITY_AUTO_MAX

from tests.serving.helpers import write_azure_trace, write_splitwise_profile

from .conftest import LocalCluster

pytestmark = pytest.mark.slurm

MODEL = "llama2-70b"
GANG = 4

SERVE = f"""#!/bin/bash
#SBATCH --job-name=serve-70b
#SBATCH --partition=a100,v100
#SBATCH --gres=gpu:{GANG}
#SBATCH --time=120
#SBATCH -o /dev/null
#ASRPT serve-model=llama-2-70b tp=auto
sleep 120
"""

UNKNOWN = f"""#!/bin/bash
#SBATCH --job-name=serve-unknown
#SBATCH --gres=gpu:{GANG}
#SBATCH --time=120
#SBATCH -o /dev/null
#ASRPT serve-model=not-a-model tp=auto
sleep 120
"""

ORDINARY = f"""#!/bin/bash
#SBATCH --job-name=train
#SBATCH --gres=gpu:{GANG}
#SBATCH --time=120
#SBATCH -o /dev/null
sleep 120
"""

# Waits for node1 (busy), reserving node1-3 whole: Slurm starts nothing behind it on its own.
BLOCKER = """#!/bin/bash
#SBATCH --job-name=big-training
#SBATCH --nodes=3 --exclusive --gres=gpu:4
#SBATCH --time=60
#SBATCH -o /dev/null
#ASRPT iterations=1000000
sleep 60
"""


def _bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        pytest.fail(f"{path} is not installed (pip install -e .)")
    return str(path)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """``asrpt serving fit`` + ``asrpt serving plan`` for the test-bed's GPU machine types:
    (the plan file, its content)."""
    work = tmp_path_factory.mktemp("serving-plan")
    env = dict(os.environ)
    tp2 = write_splitwise_profile(work / "a100-tp2.csv", hardware="a100-80gb", tp=2, scale=1.0, model=MODEL)
    tp4 = write_splitwise_profile(work / "a100-tp4.csv", hardware="a100-80gb", tp=4, scale=0.8, model=MODEL, seed=1)
    trace = write_azure_trace(work / "azure.csv", count=300)
    fit, path = work / "fit.json", work / "serving" / f"{MODEL}.json"
    path.parent.mkdir()
    commands = [
        ["serving", "fit", "--profile", str(tp2), "--profile", str(tp4), "--profile-format", "splitwise", "--json-out", str(fit)],
        ["serving", "plan", "--model", MODEL, "--cluster", "a100x8+v100x4", "--fit", str(fit), "--trace", str(trace),
         "--json-out", str(path), "--no-check", "--sample-requests", "100"],
    ]
    for argv in commands:
        result = subprocess.run([_bin("asrpt"), *argv], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, f"asrpt {' '.join(argv[:2])}: {result.stderr[-2000:]}"
    return path, json.loads(path.read_text())


def _expected(plan: dict) -> tuple[str, int]:
    """(the plan's accelerator for the job, the degree: its best_tp, or the best-ranked
    feasible degree that divides the gang)."""
    usable = [m for m in plan["machines"] if m["best_tp"] is not None]
    assert [m["accelerator"] for m in usable] == ["a100-80gb"], plan["machines"]  # 70B: not on 4 x 32 GB
    [machine] = usable
    ranked = sorted((c for c in machine["candidates"] if c["feasible"]), key=lambda c: -c["machine_tok_s"])
    assert ranked[0]["tp"] == machine["best_tp"]
    degree = next(c["tp"] for c in ranked if GANG % c["tp"] == 0)
    return machine["accelerator"], degree


def _show_job(cluster: LocalCluster, job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields (AdminComment is a whole line: it may hold spaces)."""
    fields: dict[str, str] = {}
    for line in cluster.run("scontrol", "show", "job", job_id).stdout.splitlines():
        line = line.strip()
        if line.startswith("AdminComment="):
            fields["AdminComment"] = line[len("AdminComment="):].strip()
            continue
        for item in line.split():
            key, sep, value = item.partition("=")
            if sep:
                fields.setdefault(key, value)
    return fields


@dataclass
class Bed:
    cluster: LocalCluster
    config: Path
    env: dict[str, str]
    spool: Path
    work: Path
    #: What the plan implies for a job of GANG accelerators: accelerator, tensor-parallel degree.
    accelerator: str
    degree: int

    def submit(self, name: str, body: str) -> str:
        script = self.work / f"{name}.sh"
        script.write_text(body)
        result = subprocess.run([_bin("asrpt-sbatch"), "--parsable", str(script)], capture_output=True, text=True,
                                env=self.env, cwd=self.work, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", f"asrpt-sbatch warned: {result.stderr}"
        return result.stdout.strip().split(";")[0]

    def wait_pending(self, *job_ids: str) -> None:
        """Slurm has looked at each job and left it pending (the blocker is ahead)."""
        for job_id in job_ids:
            self.cluster.wait_for(f"job {job_id} to wait with a reason",
                                  lambda j=job_id: self.cluster.field(j, "%T") == "PENDING"
                                  and self.cluster.field(j, "%r") not in ("", "None"))

    def asrptd_once(self) -> str:
        """One ``asrptd --once`` cycle as a process; its log."""
        result = subprocess.run([_bin("asrptd"), "--config", str(self.config), "--once", "--log-level", "INFO"],
                                capture_output=True, text=True, env=self.env, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        assert not list(self.spool.iterdir()), "the daemon ingests every wrapper record"
        return result.stderr


@pytest.fixture
def bed(cluster: LocalCluster, tmp_path: Path, plan: tuple[Path, dict]) -> Bed:
    """One configuration for asrpt-sbatch and asrptd: the test-bed's, with a private database
    and spool, and the plans' directory in [serving]; node1 busy and the blocker queued."""
    plan_path, document = plan
    accelerator, degree = _expected(document)
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chmod(spool, 0o1777)
    work = tmp_path / "work"
    work.mkdir()
    text = (cluster.dir / "asrpt.toml").read_text()
    text = text.replace(f"sqlite:///{cluster.dir}/asrpt.db", f"sqlite:///{tmp_path}/asrpt.db")
    text = text.replace(f'dir = "{cluster.dir}/spool-asrpt"', f'dir = "{spool}"')
    assert f"sqlite:///{tmp_path}/asrpt.db" in text and f'dir = "{spool}"' in text
    config = tmp_path / "asrpt.toml"
    config.write_text(f'{text}\n[serving]\nplan = "{plan_path.parent}"\n')
    env = {key: value for key, value in cluster.env.items() if key not in ("ASRPT_REAL_SBATCH", "ASRPT_SPOOL_DIR")}
    env["ASRPT_CONFIG"] = str(config)
    return Bed(cluster, config, env, spool, work, accelerator, degree)


def _filler(cluster: LocalCluster, node: str) -> str:
    job_id = cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8", "-t", "10", wrap="sleep 300")
    cluster.wait_state(job_id, "RUNNING")
    return job_id


def test_serving_job_is_pinned_into_the_plans_partition_and_an_unknown_model_is_ordinary(bed):
    cluster = bed.cluster
    assert bed.accelerator == "a100-80gb" and GANG % bed.degree == 0
    _filler(cluster, "node1")
    blocker = bed.submit("blocker", BLOCKER)
    serve = bed.submit("serve", SERVE)
    unknown = bed.submit("unknown", UNKNOWN)
    assert len(list(bed.spool.iterdir())) == 3
    bed.wait_pending(blocker, serve, unknown)
    before = _show_job(cluster, serve)
    assert before["Partition"] == "a100,v100" and before["ReqNodeList"] == "(null)"
    assert "serve" not in before.get("AdminComment", "")

    log = bed.asrptd_once()

    # The serving job: pinned into the plan's partition (node2, the free a100 node), with its
    # tensor-parallel degree in the AdminComment for its script.
    job = _show_job(cluster, serve)
    assert job["ReqNodeList"] == "node2", job
    assert re.fullmatch(rf"asrpt\[pin\]: eta start \S+ end (?:unknown, at most )?\S+ serve tp={bed.degree}", job["AdminComment"]), log[-4000:]
    assert int(job["Priority"]) > PRIORITY_AUTO_MAX
    assert f"job {serve}: serving {MODEL}: partition a100 (a100-80gbx8, " in log, log[-3000:]
    assert f"TP {bed.degree} " in log
    # Slurm follows the pin: it starts the job there, in partition a100.
    cluster.wait_state(serve, "RUNNING", timeout=30)
    job = _show_job(cluster, serve)
    assert (job["NodeList"], job["Partition"]) == ("node2", "a100"), job

    # The unknown model: one warning, then an ordinary job (asrpt's priority and ETA, no serving).
    warning = f"job {unknown} (serve-model=not-a-model): 'not-a-model' is not a model the serving tools know"
    assert log.count(warning) == 1, log[-3000:]
    assert "; scheduling it as an ordinary job" in log
    other = _show_job(cluster, unknown)
    assert int(other["Priority"]) > PRIORITY_AUTO_MAX, other
    assert re.match(r"asrpt(\[pin\])?: eta start ", other["AdminComment"]), other
    assert "serve" not in other["AdminComment"]

    # The blocker stays behind both, ordered by asrpt too.
    big = _show_job(cluster, blocker)
    assert big["JobState"] == "PENDING" and PRIORITY_AUTO_MAX < int(big["Priority"]) < int(job["Priority"])


def test_serving_job_waits_for_the_plans_partition_while_only_an_excluded_one_is_free(bed):
    """Only node3 (v100) free: the plan rules v100 out for the 70B model, so the serving job
    must not start there, neither by asrpt nor by Slurm (which knows nothing of the plan and
    would start a top-priority job on the first free node of its partitions): asrpt holds it.
    An ordinary job takes node3. Once node2 (a100) frees, the next cycle releases the serving
    job pinned there."""
    cluster = bed.cluster
    _filler(cluster, "node1")
    second = _filler(cluster, "node2")
    blocker = bed.submit("blocker", BLOCKER)
    serve = bed.submit("serve", SERVE)
    ordinary = bed.submit("ordinary", ORDINARY)
    bed.wait_pending(blocker, serve, ordinary)

    bed.asrptd_once()
    cluster.wait_state(ordinary, "RUNNING", timeout=30)
    assert cluster.field(ordinary, "%N") == "node3"
    time.sleep(3)  # a few of Slurm's scheduling passes (sched_interval=2): it must not start the job
    job = _show_job(cluster, serve)
    assert (job["JobState"], job["Reason"], job["NodeList"]) == ("PENDING", "JobHeldAdmin", ""), job
    assert re.fullmatch(rf"asrpt\[held\]: eta start \S+ end (?:unknown, at most )?\S+ serve tp={bed.degree}", job["AdminComment"]), job

    cluster.run("scancel", second)
    cluster.wait_for("node2 to free", lambda: cluster.field(second, "%T") not in ("RUNNING", "COMPLETING"))
    bed.asrptd_once()
    cluster.wait_state(serve, "RUNNING", timeout=30)
    job = _show_job(cluster, serve)
    assert (job["NodeList"], job["Partition"], job["ReqNodeList"]) == ("node2", "a100", "node2"), job
    assert re.fullmatch(rf"asrpt\[pin\]: eta start \S+ end (?:unknown, at most )?\S+ serve tp={bed.degree}", job["AdminComment"]), job
