"""One core, three drivers (DESIGN.md section 3): the same small trace through the simulator and
through the daemon's cycle (history database, enrichment, restart-safe state) against a fake
cluster backend must give identical decisions at identical times."""

from __future__ import annotations

import math
from pathlib import Path

from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.daemon.config import parse_config
from asrpt.daemon.service import Daemon, policy_options
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository
from asrpt.sim.cluster import SimCluster
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import OraclePredictions
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs

SLICE = Path(__file__).parent / "data" / "philly_slice.csv"


class FakeSlurm(SimCluster):
    """SimCluster as the daemon's backend: what the daemon needs beyond snapshot/apply."""

    jobs: dict = {}

    def finished_jobs(self, since_s: float):
        return ()


class ManualClock:
    def __init__(self) -> None:
        self.t_s = 0.0

    def now_s(self) -> float:
        return self.t_s


def test_simulator_and_daemon_cycle_decide_the_same(tmp_path):
    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    jobs = build_jobs(read_trace(SLICE, "philly").records[:30], cluster, speed, seed=3).jobs
    jobs = [j for j in jobs if j.accelerators <= 8]
    # types without a public profile carry their relative speed, as in a real asrpt.toml
    relative = {r.accelerator: {"relative_speed": r.factor, "relative_to": r.reference} for r in cluster.relative_speeds}
    document = {
        "daemon": {"policy": "asrpt"},
        "spool": {"dir": str(tmp_path / "no-spool")},
        "slurm": {"partitions": [{"name": p.name, "accelerator": p.accelerator, "intra_node_gbps": p.intra_node_gbps, "inter_node_gbps": p.inter_node_gbps,
                                  **relative.get(p.accelerator, {})} for p in cluster.partitions]},  # fmt: skip
    }
    config = parse_config(document, {})
    options = policy_options(config)

    simulated = simulate(jobs, cluster.partitions, cluster.nodes, make_policy("asrpt", speed, options), OraclePredictions(), keep_events=True)

    url = f"sqlite:///{tmp_path}/parity.db"
    upgrade(url)
    repository = HistoryRepository.from_url(url)
    backend = FakeSlurm(cluster.partitions, cluster.nodes, speed=speed)
    clock = ManualClock()
    daemon = Daemon(config, repository=repository, backend=backend, clock=clock, speed=speed)
    # The daemon's predictor predicts perfectly here, as the simulator's oracle does.
    by_id = {j.job_id: j for j in jobs}
    daemon.enrichment.predict = lambda submissions: [by_id[s.slurm_job_id].true_iterations for s in submissions]

    events = []
    arrivals = sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id))
    next_arrival, wake_s = 0, math.inf
    while next_arrival < len(arrivals) or backend.pending or backend.running:
        arrival_s = arrivals[next_arrival].submit_time_s if next_arrival < len(arrivals) else math.inf
        t_s = max(min(arrival_s, backend.next_end_s(), wake_s), clock.t_s)
        clock.t_s = backend.now_s = t_s
        for running in backend.finish_until(t_s):
            events.append((t_s, running.job.job_id, "end"))
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time_s <= t_s:
            backend.submit(arrivals[next_arrival])
            next_arrival += 1
        decision = daemon.cycle()
        events.extend((t_s, p.job_id, f"start {p.partition} {','.join(p.worker_nodes)}") for p in decision.starts)
        events.extend((t_s, p.job_id, f"start {p.partition} {','.join(p.worker_nodes)}") for p in backend.last_fills)
        wake_s = decision.wake_at_s if decision.wake_at_s is not None and decision.wake_at_s > t_s else math.inf
    assert events == simulated.events
    assert len([e for e in events if e[2] == "end"]) == len(jobs)
