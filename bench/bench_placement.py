#!/usr/bin/env python3
"""Heavy-Edge placement against the exact ILP, in one process, on fragmented random clusters.

    python bench/bench_placement.py --jobs 300 --seed 1 --time-limit 5

Every job is drawn so that it does NOT fit on one node (the single-node case is trivially
optimal for both), on a partition of 4-8 eight-accelerator nodes with random free counts.
For each job we run Heavy-Edge (default, and bytes order only), the ILP minimising the cut
weight and the ILP minimising alpha, and report every method's alpha / alpha(ILP min alpha)
and cut / cut(ILP min cut), plus wall time per placement (Heavy-Edge averaged over 20 runs).
An ILP that hits the time limit returns its best solution, which may be worse than Heavy-Edge
(ratio < 1); those runs are counted separately. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np

from asrpt.core.model import Job, Node, ParallelConfig, Partition
from asrpt.core.placement import best_placement, heavy_edge_place
from asrpt.core.placement_ilp import ilp_place
from asrpt.core.speed import default_speed_table

PARTITION = Partition(name="gpu", accelerator="a100", intra_node_gbps=150.0, inter_node_gbps=12.5)
LAYOUTS = [(d, p, t) for d in (1, 2, 3, 4, 8) for p in (1, 2, 4) for t in (1, 2, 4, 8) if 2 <= d * p * t <= 32]


def draw_case(rng: random.Random, classes: tuple[str, ...], max_workers: int) -> tuple[Job, list[Node]]:
    while True:
        d, p, t = rng.choice(LAYOUTS)
        g = d * p * t
        if g > max_workers:
            continue
        n_nodes = rng.randint(4, 8)
        frees = [rng.choice([0, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8]) for _ in range(n_nodes)]
        if max(frees) < g <= sum(frees):
            break
    job = Job(job_id="bench", submit_time_s=0.0, workload_class=rng.choice(classes),
              parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=rng.choice([1, 2, 4, 8])))
    nodes = [Node(name=f"n{i:02d}", partition="gpu", accelerator="a100", accelerators_total=8, accelerators_free=f)
             for i, f in enumerate(frees)]
    return job, nodes


def timed(fn, *args, repeat: int = 1, **kwargs):
    start = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args, **kwargs)
    return out, (time.perf_counter() - start) / repeat


def summary(values: list[float]) -> tuple[float, float, float]:
    arr = np.asarray(values)
    return float(arr.mean()), float(np.percentile(arr, 95)), float(arr.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=5.0, help="per ILP solve, seconds")
    ap.add_argument("--max-workers", type=int, default=32)
    args = ap.parse_args()

    speed = default_speed_table()
    rng = random.Random(args.seed)
    classes = ("bert", "transformer", "lm", "resnet50", "imagenet", "deepspeech2", "yolov3")
    rows = []
    for i in range(args.jobs):
        job, nodes = draw_case(rng, classes, args.max_workers)
        he, he_s = timed(heavy_edge_place, job, nodes, PARTITION, speed, repeat=20)
        hb, hb_s = timed(heavy_edge_place, job, nodes, PARTITION, speed, repeat=20, alpha_aware=False)
        by_cut, cut_s = timed(ilp_place, job, nodes, PARTITION, speed, time_limit_s=args.time_limit, objective="cut")
        by_alpha, alpha_s = timed(ilp_place, job, nodes, PARTITION, speed, time_limit_s=args.time_limit,
                                  objective="alpha")
        assert he is not None and hb is not None and by_cut is not None and by_alpha is not None
        rows.append({
            "g": job.accelerators,
            "he": (he.iteration_time_s / by_alpha.iteration_time_s, he.cut_gb / by_cut.cut_gb, he_s * 1e3),
            "hb": (hb.iteration_time_s / by_alpha.iteration_time_s, hb.cut_gb / by_cut.cut_gb, hb_s * 1e3),
            "ilp_alpha": (1.0, by_alpha.cut_gb / by_cut.cut_gb, alpha_s * 1e3),
            "ilp_cut": (by_cut.iteration_time_s / by_alpha.iteration_time_s, 1.0, cut_s * 1e3),
            "alpha_timeout": alpha_s >= 0.98 * args.time_limit,
            "cut_timeout": cut_s >= 0.98 * args.time_limit,
        })
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{args.jobs} jobs", file=sys.stderr)

    # Fast path and partition choice, for scale: a job that fits on one node of a 64-node, 3-partition cluster.
    parts = [Partition(name=n, accelerator=n) for n in ("a100", "v100", "t4")]
    big = tuple(Node(name=f"{p.name}-{i:02d}", partition=p.name, accelerator=p.accelerator, accelerators_total=8,
                     accelerators_free=rng.randint(0, 8)) for p in parts for i in range(64))
    small = Job(job_id="s", submit_time_s=0.0, workload_class="bert", parallel=ParallelConfig(data=2, tensor=2))
    _, fast_s = timed(best_placement, small, big, parts, speed, repeat=2000)
    _, fresh_s = timed(lambda: best_placement(small, tuple(big), parts, speed), repeat=500)

    names = {
        "he": "Heavy-Edge (default, alpha-aware)",
        "hb": "Heavy-Edge, bytes order only",
        "ilp_alpha": "ILP min alpha",
        "ilp_cut": "ILP min cut",
    }

    def block(bucket: str, subset: list[dict]) -> list[str]:
        out = []
        for key, label in names.items():
            a = summary([r[key][0] for r in subset])
            c = summary([r[key][1] for r in subset])
            ms = summary([r[key][2] for r in subset])
            timeouts = ""
            if key == "ilp_alpha":
                timeouts = str(sum(r["alpha_timeout"] for r in subset))
            elif key == "ilp_cut":
                timeouts = str(sum(r["cut_timeout"] for r in subset))
            out.append(
                f"| {bucket} ({len(subset)}) | {label} | {a[0]:.3f} | {a[1]:.3f} | {a[2]:.3f} | "
                f"{c[0]:.3f} | {c[1]:.3f} | {c[2]:.3f} | {ms[0]:.2f} | {ms[1]:.2f} | {timeouts} |"
            )
        return out

    buckets = [("2-8", [r for r in rows if r["g"] <= 8]), ("9-16", [r for r in rows if 8 < r["g"] <= 16]),
               ("17-32", [r for r in rows if r["g"] > 16]), ("all", rows)]
    lines = [
        f"`python bench/bench_placement.py --jobs {args.jobs} --seed {args.seed} --time-limit {args.time_limit:g}"
        f" --max-workers {args.max_workers}` (Python {sys.version.split()[0]}, scipy HiGHS)",
        "",
        "alpha ratio = alpha / alpha(ILP min alpha); cut ratio = cut / cut(ILP min cut); ms per placement.",
        "",
        "| workers (jobs) | method | alpha mean | alpha p95 | alpha max | cut mean | cut p95 | cut max "
        "| ms mean | ms p95 | ILP timeouts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for bucket, subset in buckets:
        if subset:
            lines.extend(block(bucket, subset))
    he_exact = sum(r["he"][0] <= 1 + 1e-9 for r in rows)
    lines += [
        "",
        f"Heavy-Edge (default) alpha <= ILP alpha in {he_exact}/{len(rows)} jobs.",
        f"best_placement of a 4-worker job that fits one node, 3 partitions x 64 nodes: "
        f"{fast_s * 1e6:.0f} us per call on the same snapshot tuple (node grouping cached), "
        f"{fresh_s * 1e6:.0f} us on a fresh tuple.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
