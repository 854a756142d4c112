"""Simulator throughput: jobs per second replaying the Philly trace under A-SRPT, at several
trace lengths (the cost should grow near-linearly), with FIFO measured in the same process as
the baseline. Not a timed test: run it, read it, put the figures in bench/README.md. CPU
seconds (``time.process_time``) are printed beside wall seconds: on a shared machine they move
much less with other tenants' load; each policy's ratio to the first policy of the same size
is of CPU time.

    .venv/bin/python bench/bench_simulator.py [--sizes 5000,10000,20000,82247] [--cluster philly]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import GroupHistoryPredictions
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs

PHILLY = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly-pollux" / "philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=PHILLY)
    parser.add_argument("--cluster", default="philly")
    parser.add_argument("--sizes", default="5000,10000,20000")
    parser.add_argument("--policies", default="asrpt,fifo")
    args = parser.parse_args()
    cluster = load_cluster(args.cluster)
    speed = cluster.speed_table(default_speed_table())
    read = read_trace(args.trace, "philly")
    print("| jobs | policy | wall s | jobs/s (wall) | CPU s | jobs/s (CPU) | CPU / first policy | decisions |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for size in [int(s) for s in args.sizes.split(",")]:
        jobs = build_jobs(read.records[:size], cluster, speed, seed=0).jobs
        first_cpu_s: float | None = None
        for name in args.policies.split(","):
            started_wall, started_cpu = time.perf_counter(), time.process_time()
            result = simulate(jobs, cluster.partitions, cluster.nodes, make_policy(name, speed), GroupHistoryPredictions())
            wall_s, cpu_s = time.perf_counter() - started_wall, time.process_time() - started_cpu
            first_cpu_s = cpu_s if first_cpu_s is None else first_cpu_s
            print(f"| {len(jobs)} | {name} | {wall_s:.1f} | {len(jobs) / wall_s:,.0f} | {cpu_s:.1f} | "
                  f"{len(jobs) / cpu_s:,.0f} | {cpu_s / first_cpu_s:.2f} | {result.decisions} |", flush=True)


if __name__ == "__main__":
    main()
