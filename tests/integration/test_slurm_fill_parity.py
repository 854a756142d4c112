"""The simulator's Slurm model (sim/slurmctld.py) against the real slurmctld: one small
scenario run through the test-bed with the daemon's writes (fifo) and through SimCluster on
the ``testbed`` cluster must start the same jobs in the same waves.

All jobs wait behind fillers while the daemon writes its priorities; the fillers are then
cancelled together, so both runs start from an empty cluster with every job pending, in
fifo order (priority = submit order):

    A  a100 1x8, runs 15 s, limit 2 min   fits: starts
    H  a100 2x8, runs  8 s, limit 1 min   needs both a100 nodes: blocked; reserved at A's limit
    S  a100 1x4, runs  5 s, limit 1 min   ends before the reservation: Slurm backfills it
    L  a100 1x4, runs  5 s, limit 10 min  fits, but would delay H: waits
    V  v100 1x2, runs  5 s, limit 1 min   another partition: H does not block it

fifo itself starts only A and V (H blocks a100); S starts because Slurm backfills it. Then H
when A ends, and L when H ends: waves {A, S, V}, {H}, {L}. Slurm's timing shifts starts by
seconds (backfill runs every bf_interval = 2 s and, seen in slurmctld's log, sometimes skips
a pass until the next job event, so S started 1.5 s or 5.5 s after A in different runs). So
the test does not compare exact times or gap-separated waves: every job of an earlier
simulated wave must have started on Slurm before every job of a later one. S before H is the
backfill (once A ends H goes first and takes both nodes); H before L is the reservation.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from asrpt.core.model import Job, ParallelConfig
from asrpt.core.placement import alpha_min_s
from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.daemon.config import load_config
from asrpt.daemon.service import Daemon
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import OraclePredictions
from asrpt.slurm.parsing import parse_squeue_json

from .conftest import LocalCluster

pytestmark = pytest.mark.slurm

# name: (partition, nodes, accelerators per node, run s, time limit min)
SCENARIO = {
    "A": ("a100", 1, 8, 15, 2),
    "H": ("a100", 2, 8, 8, 1),
    "S": ("a100", 1, 4, 5, 1),
    "L": ("a100", 1, 4, 5, 10),
    "V": ("v100", 1, 2, 5, 1),
}
EXPECTED_WAVES = [{"A", "S", "V"}, {"H"}, {"L"}]


def _waves(starts_s: dict[str, float], gap_s: float) -> list[set[str]]:
    waves: list[set[str]] = []
    last_s = None
    for name, t_s in sorted(starts_s.items(), key=lambda item: item[1]):
        if last_s is None or t_s - last_s >= gap_s:
            waves.append(set())
        waves[-1].add(name)
        last_s = t_s
    return waves


def _simulated_waves() -> list[set[str]]:
    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    jobs = []
    for index, (name, (partition, nodes, per_node, run_s, limit_min)) in enumerate(SCENARIO.items()):
        job = Job(job_id=str(index + 1), submit_time_s=0.0, parallel=ParallelConfig.data_parallel(nodes * per_node),
                  workload_class=speed.workload_classes[0], allowed_partitions=(partition,), time_limit_s=60.0 * limit_min)
        n = run_s / alpha_min_s(job, cluster.partitions, cluster.nodes, speed)
        jobs.append(dataclasses.replace(job, true_iterations=n, predicted_iterations=n))
    result = simulate(jobs, cluster.partitions, cluster.nodes, make_policy("fifo", speed), OraclePredictions())
    names = list(SCENARIO)
    return _waves({names[int(j) - 1]: r.first_start_s for j, r in result.records.items()}, 1.0)


def test_the_scenario_on_the_simulator():
    """The simulator's side alone (no Slurm needed): the waves the docstring derives."""
    assert _simulated_waves() == EXPECTED_WAVES


def _jobs(cluster: LocalCluster):
    return {j.job_id: j for j in parse_squeue_json(cluster.run("squeue", "--json").stdout)[1]}


def test_slurm_starts_what_the_simulator_says(cluster, tmp_path):
    config = load_config(cluster.dir / "asrpt.toml", environ={})
    url = f"sqlite:///{tmp_path}/parity.db"
    config = dataclasses.replace(
        config,
        daemon=dataclasses.replace(config.daemon, policy="fifo"),
        database=dataclasses.replace(config.database, url=url),
        spool=dataclasses.replace(config.spool, dir=str(tmp_path / "spool")),
    )
    upgrade(url)
    daemon = Daemon(config, repository=HistoryRepository.from_url(url))

    fillers = [cluster.sbatch("-p", "a100", "-w", node, "--gres=gpu:a100:8", wrap="sleep 300") for node in ("node1", "node2")]
    fillers.append(cluster.sbatch("-p", "v100", "-w", "node3", "--gres=gpu:v100:4", wrap="sleep 300"))
    for job_id in fillers:
        cluster.wait_state(job_id, "RUNNING")
    ids = {}
    for name, (partition, nodes, per_node, run_s, limit_min) in SCENARIO.items():
        ids[name] = cluster.sbatch("-p", partition, "-N", str(nodes), f"--gres=gpu:{partition}:{per_node}",
                                   f"--time={limit_min}", "-J", name, wrap=f"sleep {run_s}")
    assert daemon.cycle() is not None  # priorities in fifo order; nothing fits yet
    priorities = [_jobs(cluster)[ids[name]].priority for name in SCENARIO]
    assert priorities == sorted(priorities, reverse=True)

    cluster.run("scancel", *fillers)
    t0 = time.monotonic()
    first_seen_s: dict[str, float] = {}
    while len(first_seen_s) < len(SCENARIO) and time.monotonic() - t0 < 90:
        daemon.cycle()
        jobs = _jobs(cluster)
        for name, job_id in ids.items():
            job = jobs.get(job_id)
            if name not in first_seen_s and job is not None and job.state in ("RUNNING", "COMPLETING", "COMPLETED"):
                first_seen_s[name] = time.monotonic() - t0
        time.sleep(0.3)
    assert set(first_seen_s) == set(SCENARIO), f"started: {first_seen_s}"
    simulated = _simulated_waves()
    assert simulated == EXPECTED_WAVES
    for i, earlier in enumerate(simulated):
        for later in simulated[i + 1:]:
            for x in earlier:
                for y in later:
                    assert first_seen_s[x] < first_seen_s[y], f"{x} should start before {y}: {first_seen_s}"
