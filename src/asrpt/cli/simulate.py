"""``asrpt simulate`` and ``asrpt demo``: replay a real trace through the scheduling core under
several policies and compare them with the lower bound."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from asrpt.core.prediction import (  # light: names and defaults only, no scikit-learn
    DEFAULT_RF_ESTIMATE,
    DEFAULT_RF_UNSEEN_POLICY,
    DEFAULT_RF_UNSEEN_REFERENCE,
    ESTIMATES,
    UNSEEN_POLICIES,
    UNSEEN_REFERENCES,
)
from asrpt.cli.arg_types import float_at_least, output_file
from asrpt.cli.progress import Progress, human_duration
from asrpt.cli.conventions import add_deprecated_alias, add_json_options, add_trace_format, require, seed_list
from asrpt.exceptions import AsrptError

#: asrpt.sim.cluster.DEFAULT_REQUEUE_COST, literal so that `asrpt --help` stays fast; a test checks it.
REQUEUE_COST_DEFAULT = "1800,60"


def parse_requeue_cost(text: str) -> Any:
    """``--requeue-cost`` as a :class:`asrpt.sim.cluster.RequeueCost` (a clear error if bad)."""
    from asrpt.sim.cluster import RequeueCost

    try:
        return RequeueCost.parse(text)
    except ValueError as error:
        raise AsrptError(f"--requeue-cost {error}") from None

# Literal so `asrpt --help` stays fast (no numpy/networkx); tests check them against the
# registries they mirror (core.policies.POLICIES, sim.traces.TRACE_FORMATS, ...).
POLICY_NAMES = ("asrpt", "asrpt-preempt", "asrpt-strict", "asrpt-oracle", "fifo", "sjf-oracle", "spwf", "qssf", "tiresias", "multifactor")
TRACE_FORMAT_NAMES = ("pai", "philly", "gavel", "sia", "csv", "sacct")
PREDICTOR_NAMES = ("oracle", "history", "rf")
DISPATCH_MODES = ("strict", "backfill", "greedy")
QUEUE_ORDERS = ("work", "virtual_completion", "remaining")
VIRTUAL_MACHINES = ("cluster", "pool")

#: Jobs the demo replays by default: enough for the afternoon queue to form, quick to run.
DEMO_JOBS = 1500
DEMO_POLICIES = ("asrpt", "asrpt-oracle", "fifo", "sjf-oracle", "spwf", "qssf", "tiresias", "multifactor")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sim = commands.add_parser("simulate", help="replay a trace under several policies and compare them")
    sim.add_argument("--trace", required=True, type=Path, help="trace file")
    add_trace_format(sim, TRACE_FORMAT_NAMES, default=None)
    sim.add_argument("--columns", default=None, help="for --trace-format csv: submit=COL,duration=COL,gpus=COL[,user=...]")
    _add_common(sim)
    sim.set_defaults(func=run_simulate)

    demo = commands.add_parser("demo", help="replay the bundled PAI trace slice; no set-up needed")
    demo.add_argument("--plot", type=output_file, default="asrpt-demo.png", help="where to write the JCT CDF plot")
    add_json_options(demo, what="the comparison")
    demo.add_argument(
        "--limit",
        type=int,
        default=DEMO_JOBS,
        help=f"replay the first N jobs of the slice (default {DEMO_JOBS}; the slice holds 2,000 GPU jobs)",
    )
    demo.set_defaults(func=run_demo)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, help="cluster TOML file or built-in name (pai, philly, gavel, testbed)")
    parser.add_argument("--policy", action="append", choices=POLICY_NAMES, help="policy to run (repeatable)")
    parser.add_argument(
        "--predictor",
        choices=PREDICTOR_NAMES,
        default="rf",
        help="where predicted iterations come from (default rf: the random forest the daemon uses, learning only "
        "from jobs finished earlier in the replay)",
    )
    parser.add_argument(
        "--rf-unseen-policy",
        choices=UNSEEN_POLICIES,
        default=DEFAULT_RF_UNSEEN_POLICY,
        help=f"rf, jobs with no group history: model (the forest's correction to the reference), fallback (the "
        f"reference alone) or zero (the paper: predict 0, they go first); default {DEFAULT_RF_UNSEEN_POLICY}",
    )
    parser.add_argument(
        "--rf-unseen-reference",
        choices=UNSEEN_REFERENCES,
        default=DEFAULT_RF_UNSEEN_REFERENCE,
        help="rf, the reference of jobs with no group history: the user's or global median (history) or the "
        f"time limit scaled by the typical iterations/limit ratio (time_limit); default {DEFAULT_RF_UNSEEN_REFERENCE}",
    )
    parser.add_argument(
        "--rf-estimate",
        choices=ESTIMATES,
        default=DEFAULT_RF_ESTIMATE,
        help="rf, the point of the trees' distribution: median (log-space mean), mean (linear-space mean over "
        f"trees: expected work) or lognormal (exp(mu + sigma^2/2)); default {DEFAULT_RF_ESTIMATE}",
    )
    parser.add_argument(
        "--no-time-limit-cap",
        action="store_true",
        help="A-SRPT: do not cap predictions at what fits in the job's time limit (the paper's unbounded belief)",
    )
    parser.add_argument("--seeds", type=seed_list, default=None, metavar="SEED[,SEED...]",
                        help="workload-mapping seed, or a comma-separated sweep (default 0)")
    add_deprecated_alias(parser, "--seed", dest="seeds", new_option="--seeds", convert=seed_list, append=True, metavar="N")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--strict", action="store_true", help="fail on the first bad trace row instead of skipping it")
    parser.add_argument("--mode", choices=DISPATCH_MODES, default="backfill", help="A-SRPT dispatch mode")
    parser.add_argument(
        "--queue-order",
        choices=QUEUE_ORDERS,
        default="work",
        help="A-SRPT's queue Q: virtually completed jobs by predicted work (default), in virtual completion order "
        "(the paper), or every released job by remaining virtual work",
    )
    parser.add_argument(
        "--overdue-after-s",
        type=float_at_least(0.0),
        default=7 * 86400.0,
        help="A-SRPT work order: the longest-waiting job pending at least this long heads the queue "
        "(starvation guard; default a week; inf turns it off)",
    )
    parser.add_argument(
        "--virtual-machine",
        choices=VIRTUAL_MACHINES,
        default="cluster",
        help="A-SRPT's virtual machine: the whole cluster (the paper) or one per pool of partitions",
    )
    parser.add_argument("--comm-heavy", type=float_at_least(1.0), default=1.5, help="alpha/alpha_min ratio that makes a job communication-heavy")
    parser.add_argument("--tau", type=float_at_least(0.0), default=0.1, help="comm-heavy hold budget, in multiples of the job's ideal runtime")
    parser.add_argument(
        "--baseline-comm-heavy-hold",
        action="store_true",
        help="give the baselines A-SRPT's communication-heavy hold too (--comm-heavy, --tau); off by default, "
        "as Slurm never holds a job for a better placement",
    )
    add_json_options(parser, what="the comparison")
    parser.add_argument(
        "--jobs",
        type=output_file,
        default=None,
        metavar="OUT.csv",
        help="write one CSV row per job, policy and seed: submit, first start, end, wait, JCT, partition, "
        "nodes and accelerators of the first run, preemptions",
    )
    parser.add_argument("--plot", type=output_file, default=None, help="write JCT CDFs (PNG)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--forecast",
        action="store_true",
        help=(
            "also measure forecast accuracy: at the submission of a seeded sample of jobs, forecast their start "
            "and end as the daemon would (multifactor: as Slurm's backfill on time limits would) and compare "
            "with what happened"
        ),
    )
    parser.add_argument(
        "--no-slurm-fill",
        dest="slurm_fills",
        action="store_false",
        help="the idealised cluster: start exactly the policy's starts, not also what Slurm's own scheduler "
        "and backfill would start from the priorities written (the default models them)",
    )
    parser.add_argument(
        "--requeue-cost",
        default=REQUEUE_COST_DEFAULT,
        metavar="CHECKPOINT_S,RESTART_S",
        help="what a preemption (tiresias, asrpt-preempt) costs the job, as a Slurm requeue would: it keeps the "
        "work up to its last checkpoint (one every CHECKPOINT_S of run; 0 keeps all) and spends RESTART_S "
        f"starting again; 'free' = 0,0 (default {REQUEUE_COST_DEFAULT})",
    )
    parser.add_argument("--forecast-samples", type=int, default=200, metavar="N", help="jobs forecast per policy with --forecast (default 200)")


@dataclass(frozen=True)
class Comparison:
    report: dict[str, Any]
    jct_by_policy: dict[str, list[float]]
    #: Per-job rows (``asrpt.sim.job_rows.JOB_COLUMNS``) when ``compare(job_rows=True)``.
    job_rows: list[dict[str, Any]] | None = None


def run_simulate(args: argparse.Namespace) -> int:
    from asrpt.core.dispatch import DispatchOptions
    from asrpt.core.policies import ASRPTOptions

    from asrpt.sim.traces import parse_columns

    columns = parse_columns(args.columns) if args.columns else None
    if args.jobs is not None and args.forecast:
        raise AsrptError("--jobs cannot be combined with --forecast (forecasts replay hypothetical starts through the policy)")
    comparison = compare(
        trace=args.trace,
        fmt=require(args, "fmt", "--trace-format"),
        columns=columns,
        cluster_name=args.cluster,
        policies=args.policy or ["asrpt", "fifo", "multifactor"],
        predictor=args.predictor,
        predictor_options={
            "rf_unseen_policy": args.rf_unseen_policy,
            "rf_unseen_reference": args.rf_unseen_reference,
            "rf_estimate": args.rf_estimate,
        },
        seeds=args.seeds or [0],
        limit=args.limit,
        strict=args.strict,
        options=ASRPTOptions(
            dispatch=DispatchOptions(mode=args.mode, comm_heavy_ratio=args.comm_heavy, comm_heavy_tau=args.tau),
            queue_order=args.queue_order,
            overdue_after_s=args.overdue_after_s,
            virtual_machine=args.virtual_machine,
            time_limit_cap=not args.no_time_limit_cap,
        ),
        progress=not args.no_progress,
        forecast_samples=args.forecast_samples if args.forecast else 0,
        slurm_fills=args.slurm_fills,
        baseline_comm_heavy_hold=args.baseline_comm_heavy_hold,
        job_rows=args.jobs is not None,
        requeue_cost=parse_requeue_cost(args.requeue_cost),
    )
    if args.jobs is not None:
        from asrpt.sim.job_rows import write_jobs_csv

        rows = write_jobs_csv(args.jobs, comparison.job_rows or [])
        print(f"asrpt: wrote {rows} job rows to {args.jobs}", file=sys.stderr)
    _emit(comparison, args.json_out, args.plot, json_stdout=args.json)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from asrpt.core.policies import ASRPTOptions

    trace = resources.files("asrpt.data") / "traces" / "pai_slice.csv"
    with resources.as_file(trace) as path:
        comparison = compare(
            trace=path,
            fmt="pai",
            columns=None,
            cluster_name="pai",
            policies=list(DEMO_POLICIES),
            predictor="rf",  # the default of simulate and of the daemon
            seeds=[0],
            limit=args.limit,
            strict=False,
            options=ASRPTOptions(),
            progress=True,
        )
    _emit(comparison, args.json_out, args.plot, json_stdout=args.json)
    print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def compare(
    *,
    trace: Path,
    fmt: str,
    columns: dict[str, str] | None,
    cluster_name: str,
    policies: Sequence[str],
    predictor: str,
    seeds: Sequence[int],
    limit: int | None,
    strict: bool,
    options: Any,
    progress: bool,
    forecast_samples: int = 0,
    slurm_fills: bool = True,
    baseline_comm_heavy_hold: bool = False,
    job_rows: bool = False,
    predictor_options: dict[str, Any] | None = None,
    requeue_cost: Any = None,
) -> Comparison:
    """Run every policy on the same jobs for every seed; the report is ``--json``'s content.

    With ``forecast_samples`` > 0 each policy's block also has ``"forecast"``: the errors of
    forecasts made at the submission of that many sampled jobs (``asrpt.sim.forecast_accuracy``);
    ``wall_s`` then excludes the time spent forecasting. ``job_rows`` also collects one row per
    job, policy and seed (``Comparison.job_rows``); it cannot be combined with forecasts.
    ``slurm_fills=False`` replays on the idealised cluster that starts only the policies'
    starts (``SimCluster``). ``requeue_cost`` (a ``RequeueCost``) is what a preemption costs;
    default the simulator's (``DEFAULT_REQUEUE_COST``).
    """
    if job_rows and forecast_samples > 0:
        raise ValueError("job_rows and forecast_samples cannot be combined")
    from asrpt.core.policies import make_policy
    from asrpt.core.speed import default_speed_table
    from asrpt.sim.cluster import DEFAULT_REQUEUE_COST, RequeueCost
    from asrpt.sim.clusters import load_cluster
    from asrpt.sim.engine import simulate
    from asrpt.sim.metrics import jct_values_s, lower_bound_total_jct_s, policy_metrics
    from asrpt.sim.predictors import make_predictions
    from asrpt.sim.traces import read_trace
    from asrpt.sim.workload import build_jobs

    if requeue_cost is None:
        requeue_cost = RequeueCost.parse(DEFAULT_REQUEUE_COST)
    read = read_trace(trace, fmt, columns=columns, strict=strict, limit=limit)
    if read.skipped:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(read.skipped.items()))
        lines = ", ".join(str(n) for n in read.bad_lines[:5])
        print(f"asrpt: skipped trace rows: {skipped}" + (f" (first bad lines: {lines})" if lines else ""), file=sys.stderr)
    cluster = load_cluster(cluster_name)
    speed = cluster.speed_table(default_speed_table())
    per_seed: list[dict[str, Any]] = []
    jct_by_policy: dict[str, list[float]] = {}
    rows: list[dict[str, Any]] | None = [] if job_rows else None
    reported_skips: dict[str, int] = {}
    for seed in seeds:
        built = build_jobs(read.records, cluster, speed, seed=seed)
        if built.skipped and built.skipped != reported_skips:
            left_out = ", ".join(f"{n} {why}" for why, n in sorted(built.skipped.items()))
            print(f"asrpt: seed {seed}: trace jobs left out on cluster {cluster_name}: {left_out}", file=sys.stderr)
            reported_skips = built.skipped
        if not built.jobs:
            raise AsrptError(f"no job of {trace} can run on cluster {cluster_name!r} ({built.skipped})")
        bound = lower_bound_total_jct_s(built.jobs, cluster.partitions, cluster.nodes, speed)
        results: dict[str, dict[str, float]] = {}
        for name in policies:
            policy = make_policy(name, speed, options, baseline_comm_heavy_hold=baseline_comm_heavy_hold)
            started = time.perf_counter()
            bar = Progress(f"{name} seed {seed}") if progress else None
            accuracy = None
            if forecast_samples > 0:
                from asrpt.sim.forecast_accuracy import measure_forecasts

                outcome, accuracy = measure_forecasts(
                    built.jobs,
                    cluster.partitions,
                    cluster.nodes,
                    policy,
                    make_predictions(predictor, seed=seed, **(predictor_options or {})),
                    speed=speed,
                    samples=forecast_samples,
                    seed=seed,
                    progress=bar.update if bar else None,
                    slurm_fills=slurm_fills,
                )
            else:
                outcome = simulate(
                    built.jobs,
                    cluster.partitions,
                    cluster.nodes,
                    policy,
                    make_predictions(predictor, seed=seed, **(predictor_options or {})),
                    progress=bar.update if bar else None,
                    slurm_fills=slurm_fills,
                    requeue_cost=requeue_cost,
                )
            if bar:
                bar.close()
            metrics = policy_metrics(outcome)
            metrics["wall_s"] = time.perf_counter() - started
            if accuracy is not None:
                metrics["wall_s"] -= accuracy.forecast_wall_s
                metrics["forecast"] = accuracy.as_dict()
            metrics["ratio_to_lower_bound"] = metrics["total_jct_s"] / bound["total_jct_s"] if bound["total_jct_s"] > 0 else float("nan")
            results[name] = metrics
            if rows is not None:
                from asrpt.sim.job_rows import job_rows as rows_of

                rows.extend(rows_of(outcome, seed=seed))
            if seed == seeds[0]:
                jct_by_policy[name] = jct_values_s(outcome)
        per_seed.append({"seed": seed, "jobs": len(built.jobs), "skipped": built.skipped, "lower_bound": bound, "policies": results})
    first = per_seed[0]
    report: dict[str, Any] = {
        "trace": str(trace),
        "format": fmt,
        "cluster": cluster_name,
        "predictor": predictor,
        "slurm_fills": slurm_fills,
        "requeue_cost": {"checkpoint_interval_s": requeue_cost.checkpoint_interval_s, "restart_s": requeue_cost.restart_s},
        "jobs": first["jobs"],
        "trace_rows_skipped": read.skipped,
        "workload_skipped": first["skipped"],
        "lower_bound": first["lower_bound"],
        "policies": first["policies"],
    }
    if len(per_seed) > 1:
        report["seeds"] = per_seed
        report["sweep"] = _sweep(per_seed)
    return Comparison(report, jct_by_policy, rows)


def _sweep(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean and spread of each policy's metrics across seeds (the referee's ask)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in per_seed[0]["policies"]:
        out[name] = {}
        for metric in ("total_jct_s", "avg_jct_s", "ratio_to_lower_bound"):
            values = [run["policies"][name][metric] for run in per_seed]
            out[name][metric] = {
                "mean": statistics.fmean(values),
                "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
                "min": min(values),
                "max": max(values),
            }
    return out


def _emit(comparison: Comparison, json_path: Path | None, plot_path: Path | None, *, json_stdout: bool = False) -> None:
    report = comparison.report
    try:  # the paths were checked at parse time; the disk can still fill or the directory go
        if json_path is not None:
            json_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    except OSError as error:
        raise AsrptError(f"cannot write {json_path}: {error.strerror or error}") from error
    print(json.dumps(report, indent=2, sort_keys=True) if json_stdout else format_table(report))
    if plot_path is not None:
        try:
            plot_jct_cdfs(comparison.jct_by_policy, plot_path, title=f"{Path(report['trace']).name} on {report['cluster']}")
        except OSError as error:
            raise AsrptError(f"cannot write {plot_path}: {error.strerror or error}") from error


def format_table(report: dict[str, Any]) -> str:
    bound = report["lower_bound"]["total_jct_s"]
    lines = [
        f"{report['jobs']} jobs from {Path(report['trace']).name} on cluster {report['cluster']} "
        f"(predictor: {report['predictor']}); lower bound on total JCT {bound:,.0f} s ({human_duration(bound)})",
        "",
        f"{'policy':<14}{'total JCT s':>16}{'x bound':>9}{'avg JCT s':>21}{'p50 s':>21}{'p99 s':>21}"
        f"{'avg queue s':>21}{'util':>7}{'wall s':>8}",
    ]
    forecasts = any("forecast" in m for m in report["policies"].values())
    if forecasts:
        lines[-1] += f"{'ETA err start/end s':>22}"
    ranked = sorted(report["policies"].items(), key=lambda item: item[1]["total_jct_s"])
    for name, m in ranked:
        line = (
            f"{name:<14}{m['total_jct_s']:>16,.0f}{m['ratio_to_lower_bound']:>9.2f}{_seconds_and_human(m['avg_jct_s']):>21}"
            f"{_seconds_and_human(m['p50_jct_s']):>21}{_seconds_and_human(m['p99_jct_s']):>21}"
            f"{_seconds_and_human(m['avg_queue_s']):>21}"
            f"{m['utilization']:>7.2f}{m['wall_s']:>8.1f}"
        )
        if forecasts and "forecast" in m:
            f = m["forecast"]
            line += f"{_error_text(f['median_abs_start_error_s']) + ' / ' + _error_text(f['median_abs_end_error_s']):>22}"
        lines.append(line)
    if forecasts:
        samples = {m["forecast"]["samples"] for m in report["policies"].values() if "forecast" in m}
        lines += [
            "",
            f"ETA err: median absolute error of the start and end forecast at submission ({'/'.join(map(str, sorted(samples)))} "
            "sampled jobs); multifactor forecasts as Slurm's backfill does, on requested time limits",
        ]
    if "sweep" in report:
        lines += ["", "across seeds (mean +- stdev of total JCT / lower bound):"]
        for name, stats in report["sweep"].items():
            r = stats["ratio_to_lower_bound"]
            lines.append(f"  {name:<14}{r['mean']:.3f} +- {r['stdev']:.3f}  (min {r['min']:.3f}, max {r['max']:.3f})")
    return "\n".join(lines)


def _seconds_and_human(value: float) -> str:
    """``12,345 (3.4 h)``: seconds to compare, hours or days to read."""
    return f"{value:,.0f} ({human_duration(value)})"


def _error_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def plot_jct_cdfs(jct_by_policy: dict[str, list[float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in sorted(jct_by_policy.items()):
        xs = np.sort(np.maximum(np.asarray(values, dtype=float), 1.0))
        ys = np.arange(1, len(xs) + 1) / len(xs)
        ax.step(xs, ys, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
