"""Cost of the simulator's predictors: the same jobs replayed under A-SRPT with each predictor
in one process, wall and CPU time of each and their ratios to the history predictor (issue 14's target:
rf at most 2x history). Also prints total JCT and the error of the arrival predictions
(mean |log1p predicted - log1p true| iterations), so a faster predictor that predicts worse shows.
Not a timed test: run it, read it, put the figures in bench/README.md.

    .venv/bin/python bench/bench_predictors.py [--limit 3000] [--seed 0] [--predictors history,rf]
        [--rf-unseen-policy zero|fallback|model]

Uses only the public simulator API, so the same script measures an older checkout
(``PYTHONPATH=<worktree>/src python bench/bench_predictors.py``; without --rf-unseen-policy).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from asrpt.core.policies import make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.metrics import lower_bound_total_jct_s, policy_metrics
from asrpt.sim.predictors import make_predictions
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs

PAI = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "traces"
    / "alibaba-pai-2020"
    / "pai_job_duration_estimate_head.csv"
)


class Recorded:
    """Wraps a predictor; keeps (predicted, true) iterations of every arrival and the time
    spent inside it (the replay's cost also depends on the schedule the predictions make)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.pairs: list[tuple[float, float]] = []
        self.inside_s = 0.0

    def predict(self, job, now_s):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        predicted = self.inner.predict(job, now_s)
        self.inside_s += time.perf_counter() - started
        self.pairs.append((float(predicted.predicted_iterations or 0.0), float(job.true_iterations or 0.0)))
        return predicted

    def observe_finished(self, job, record, now_s):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        self.inner.observe_finished(job, record, now_s)
        self.inside_s += time.perf_counter() - started

    def annotate(self, snapshot, now_s):  # type: ignore[no-untyped-def]
        return self.inner.annotate(snapshot, now_s)


def prediction_error(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Mean |log1p error| over all arrivals, over those predicted > 0 (the rest are unseen:
    "run it first"), and the share predicted > 0."""
    predicted, actual = np.array(pairs).T
    error = np.abs(np.log1p(predicted) - np.log1p(actual))
    seen = predicted > 0
    return float(error.mean()), float(error[seen].mean()) if seen.any() else float("nan"), float(seen.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=PAI)
    parser.add_argument("--format", default="pai")
    parser.add_argument("--cluster", default="pai")
    parser.add_argument("--policy", default="asrpt")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N trace rows")
    parser.add_argument("--seed", type=int, default=0, help="workload mapping and predictor seed")
    parser.add_argument("--rf-unseen-policy", default=None,
                        help="rf's prediction for a job without group history (default: the project's default)")
    parser.add_argument("--predictors", default="history,rf", help="the first is the baseline of the ratio")
    args = parser.parse_args()
    cluster = load_cluster(args.cluster)
    speed = cluster.speed_table(default_speed_table())
    read = read_trace(args.trace, args.format, limit=args.limit)
    jobs = build_jobs(read.records, cluster, speed, seed=args.seed).jobs
    bound_s = lower_bound_total_jct_s(jobs, cluster.partitions, cluster.nodes, speed)["total_jct_s"]
    names = args.predictors.split(",")
    print(f"{len(jobs)} jobs, policy {args.policy}, cluster {args.cluster}, seed {args.seed}, lower bound {bound_s:,.0f} s")
    print("| predictor | wall s | x first | CPU s | x first | inside predictor s | total JCT s | x bound | MAE log1p iters | same, predicted > 0 | share > 0 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    baseline_wall_s = baseline_cpu_s = None
    for name in names:
        # Only passed when asked for, so that the script runs against checkouts without it.
        options = {} if args.rf_unseen_policy is None else {"rf_unseen_policy": args.rf_unseen_policy}
        predictions = Recorded(make_predictions(name, seed=args.seed, **options))
        started, started_cpu = time.perf_counter(), time.process_time()
        result = simulate(jobs, cluster.partitions, cluster.nodes, make_policy(args.policy, speed), predictions)
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
        baseline_wall_s = baseline_wall_s or wall_s
        baseline_cpu_s = baseline_cpu_s or cpu_s
        total_s = policy_metrics(result)["total_jct_s"]
        mae_all, mae_seen, share_seen = prediction_error(predictions.pairs)
        print(
            f"| {name} | {wall_s:.1f} | {wall_s / baseline_wall_s:.2f} | {cpu_s:.1f} | {cpu_s / baseline_cpu_s:.2f} "
            f"| {predictions.inside_s:.1f} | {total_s:,.0f} | {total_s / bound_s:.3f} "
            f"| {mae_all:.3f} | {mae_seen:.3f} | {share_seen:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
