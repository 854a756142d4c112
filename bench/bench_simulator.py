"""Simulator throughput: jobs per second replaying the Philly trace under A-SRPT, at several
trace lengths (the cost should grow near-linearly), with FIFO measured in the same process as
the baseline. Not a timed test: run it, read it, put the figures in bench/README.md.

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
    print(f"| jobs | policy | wall s | jobs/s | decisions |")
    print(f"|---:|---|---:|---:|---:|")
    for size in [int(s) for s in args.sizes.split(",")]:
        jobs = build_jobs(read.records[:size], cluster, speed, seed=0).jobs
        for name in args.policies.split(","):
            started = time.perf_counter()
            result = simulate(jobs, cluster.partitions, cluster.nodes, make_policy(name, speed), GroupHistoryPredictions())
            wall_s = time.perf_counter() - started
            print(f"| {len(jobs)} | {name} | {wall_s:.1f} | {len(jobs) / wall_s:,.0f} | {result.decisions} |", flush=True)


if __name__ == "__main__":
    main()
