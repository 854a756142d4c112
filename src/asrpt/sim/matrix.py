"""The scenario matrix (``asrpt bench policies``): every policy on several traces, loads and seeds.

One figure of one trace on one cluster says little about a scheduler; the matrix replays each
trace at three offered loads (about 0.5, 0.8 and 1.1 of capacity) and several workload-mapping
seeds, under every policy, and reports per cell the mean and spread over seeds.

**Offered load** of a trace slice on a cluster = sum over jobs of (accelerators x ideal
duration) / (accelerators of the cluster x submission span), where the ideal duration is the
true iterations x alpha_min (the job alone on its best placement) and the span runs from the
first to the last submission. Load > 1 means work arrives faster than the cluster could do it
even with perfect packing and no communication cost.

**Calibration** scales the built-in cluster's node counts (types, node sizes and bandwidths stay)
so that the slice offers the target load. By default each partition is scaled by its own load
(``per_partition=True``): a job's work is charged to the partitions it may use, split in
proportion to their accelerators. That is the honest choice for PAI, whose jobs are pinned to a
GPU type: scaling all partitions by the total load would leave the busy T4/MISC partitions
overloaded and the rest idle at a "0.5" load. Jobs allowed anywhere (Philly, Gavel) split in
proportion to capacity, so there every partition gets the same factor. Every partition keeps
enough nodes for the largest job that may run on it (else the slice would change with the load)
and at least one node, so the *achieved* load can differ from the target; it is reported per
cell, in total and per partition. The cluster is calibrated once per (trace, load), on the
first seed's jobs, and shared by all seeds, so the seeds vary the workload mapping only.

Policies are labelled as in :data:`MATRIX_POLICIES`: baselines run with the ``history``
predictor (the group/user median qssf was designed around; only ``spwf`` and ``qssf`` read
predictions), A-SRPT once per predictor (``asrpt/oracle``, ``asrpt/history``, ``asrpt/rf``);
an rf label may add predictor options after colons (:data:`LABEL_OPTIONS`), and a preemptive
A-SRPT label its preemption options (:data:`PREEMPT_LABEL_OPTIONS`), ``asrpt-preempt/rf:ratio=16``.
Each (trace, load, seed, policy) replay is one independent cell, run in a process pool.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from asrpt.core.model import Job, Node, derived_shape
from asrpt.core.speed import SpeedTable
from asrpt.exceptions import AsrptError, ConfigError
from asrpt.sim.cluster import RequeueCost
from asrpt.sim.clusters import ClusterSpec
from asrpt.sim.traces import TraceRecord

__all__ = [
    "MatrixTrace",
    "MATRIX_TRACES",
    "MATRIX_POLICIES",
    "BASELINES",
    "DEFAULT_LOADS",
    "DEFAULT_SEEDS",
    "QUICK_JOBS",
    "OfferedLoad",
    "offered_load",
    "calibrate_cluster",
    "scaled_cluster",
    "resolve_traces",
    "run_matrix",
    "summarise",
    "format_table",
    "format_markdown",
    "cluster_lines",
]

#: Target offered loads of the three cluster sizes per trace.
DEFAULT_LOADS: tuple[float, ...] = (0.5, 0.8, 1.1)
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)
#: Jobs per trace with ``--quick`` (tests, smoke runs).
QUICK_JOBS = 120

#: Matrix label -> (policy name for ``make_policy``, predictor for ``make_predictions``).
MATRIX_POLICIES: dict[str, tuple[str, str]] = {
    "fifo": ("fifo", "history"),
    "multifactor": ("multifactor", "history"),
    "qssf": ("qssf", "history"),
    "spwf": ("spwf", "history"),
    "tiresias": ("tiresias", "history"),
    "sjf-oracle": ("sjf-oracle", "oracle"),
    "asrpt/oracle": ("asrpt", "oracle"),
    "asrpt/history": ("asrpt", "history"),
    "asrpt/rf": ("asrpt", "rf"),
    "asrpt-preempt/oracle": ("asrpt-preempt", "oracle"),
    "asrpt-preempt/rf": ("asrpt-preempt", "rf"),
}
#: Options a label may add after colons, ``asrpt/rf:unseen=zero:estimate=mean`` (the paper's
#: unseen rule, expected-work ranking): option -> keyword of ``make_predictions``.
LABEL_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "unseen": ("rf_unseen_policy", str),
    "estimate": ("rf_estimate", str),
    "clip": ("rf_unseen_residual_clip", float),
    "ref": ("rf_unseen_reference", str),
    "rerank": ("rf_rerank", lambda text: {"1": True, "0": False}[text]),
}


#: Options an ``asrpt-preempt`` label may add after colons: option -> ``ASRPTOptions`` field.
PREEMPT_LABEL_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "ratio": ("preempt_ratio", float),
    "requeues": ("max_requeues", int),
    "exempt": ("preempt_exempt_s", float),
}


def parse_label(label: str) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(policy, predictor, make_predictions keywords, ASRPTOptions fields) of a matrix label
    (``LABEL_OPTIONS`` for rf labels, ``PREEMPT_LABEL_OPTIONS`` for asrpt-preempt labels)."""
    base, _, rest = label.partition(":")
    if base not in MATRIX_POLICIES:
        raise ConfigError(f"unknown matrix policy {base!r}; valid: {', '.join(MATRIX_POLICIES)}")
    policy, predictor = MATRIX_POLICIES[base]
    allowed: dict[str, tuple[dict[str, tuple[str, Callable[[str], Any]]], dict[str, Any]]] = {}
    predictor_options: dict[str, Any] = {}
    policy_options: dict[str, Any] = {}
    if predictor == "rf":
        allowed.update({key: (LABEL_OPTIONS, predictor_options) for key in LABEL_OPTIONS})
    if policy == "asrpt-preempt":
        allowed.update({key: (PREEMPT_LABEL_OPTIONS, policy_options) for key in PREEMPT_LABEL_OPTIONS})
    for item in filter(None, rest.split(":")):
        key, _, value = item.partition("=")
        if key not in allowed or not value:
            valid = ", ".join(k + "=..." for k in allowed) or "none"
            raise ConfigError(f"matrix label {label!r}: {item!r} is not an option of this label (valid: {valid}; "
                              f"predictor options for rf labels, preemption options for asrpt-preempt labels)")
        table, into = allowed[key]
        keyword, parse = table[key]
        try:
            into[keyword] = parse(value)
        except (KeyError, ValueError):
            raise ConfigError(f"matrix label {label!r}: bad value in {item!r}") from None
    if policy_options:
        from asrpt.core.policies import ASRPTOptions

        try:
            ASRPTOptions(**policy_options)
        except ValueError as error:
            raise ConfigError(f"matrix label {label!r}: {error}") from None
    return policy, predictor, predictor_options, policy_options


#: The non-oracle baselines A-SRPT is compared with ("vs best baseline").
BASELINES: tuple[str, ...] = ("fifo", "multifactor", "qssf", "spwf", "tiresias")
#: Rough relative cost of one replay, to start the slow cells first (better packing on the pool).
_COST_RANK = {"asrpt/rf": 0, "tiresias": 1, "multifactor": 2}


@dataclass(frozen=True, slots=True)
class MatrixTrace:
    """A trace of the matrix: where it is, how to read it, the built-in cluster it is scaled from."""

    name: str
    fmt: str
    cluster: str
    #: ``bundled:<file>`` (in ``asrpt/data/traces``), a path relative to the traces folder, or absolute.
    location: str
    #: Leading jobs replayed by default (sized so the default matrix runs in < 20 min on 2 cores).
    default_jobs: int
    note: str = ""


MATRIX_TRACES: dict[str, MatrixTrace] = {
    "pai": MatrixTrace("pai", "pai", "pai", "bundled:pai_slice.csv", 2000,
                       "Alibaba PAI 2020, jobs pinned to 5 GPU types"),
    "philly": MatrixTrace("philly", "philly", "philly", "philly-pollux/philly.csv", 2000,
                          "Microsoft Philly (Pollux copy), leading slice, one V100 partition"),
    "gavel": MatrixTrace("gavel", "gavel", "gavel", "gavel/msr-seed0/6214e9.trace", 1000,
                         "Gavel msr VC 6214e9: real arrivals with model type and steps, V100/P100/K80"),
}


# -- offered load and calibration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OfferedLoad:
    """Offered load of a job set on a cluster (see the module docstring)."""

    total: float
    by_partition: dict[str, float]
    span_s: float
    #: Accelerator-seconds of ideal work, in total.
    work_s: float


def _ideal_work(jobs: Sequence[Job], cluster: ClusterSpec, speed: SpeedTable) -> list[tuple[Job, float]]:
    from asrpt.core.placement import alpha_min_s

    cache: dict[tuple[Any, ...], float] = {}
    out = []
    for job in jobs:
        key = (job.workload_class, job.parallel, job.allowed_accelerators, job.allowed_partitions)
        alpha = cache.get(key)
        if alpha is None:
            alpha = cache[key] = alpha_min_s(job, cluster.partitions, cluster.nodes, speed)
        if not math.isfinite(alpha):
            raise AsrptError(f"job {job.job_id} does not fit cluster {cluster.name!r}; offered load undefined")
        out.append((job, job.accelerators * float(job.true_iterations or 0.0) * alpha))
    return out


def _capacity(cluster: ClusterSpec) -> dict[str, int]:
    capacity = {p.name: 0 for p in cluster.partitions}
    for node in cluster.nodes:
        capacity[node.partition] += node.accelerators_total
    return capacity


def _work_by_partition(work: Iterable[tuple[Job, float]], cluster: ClusterSpec) -> dict[str, float]:
    """Each job's work charged to the partitions it may use, in proportion to their accelerators."""
    capacity = _capacity(cluster)
    by_partition = {p.name: 0.0 for p in cluster.partitions}
    allowed_cache: dict[tuple[Any, ...], tuple[str, ...]] = {}
    for job, work_s in work:
        key = (job.allowed_accelerators, job.allowed_partitions)
        allowed = allowed_cache.get(key)
        if allowed is None:
            allowed = allowed_cache[key] = tuple(p.name for p in cluster.partitions if job.allows(p))
        share = sum(capacity[p] for p in allowed)
        for p in allowed:
            by_partition[p] += work_s * capacity[p] / share
    return by_partition


def _submission_span_s(jobs: Sequence[Job]) -> float:
    span_s = max(j.submit_time_s for j in jobs) - min(j.submit_time_s for j in jobs)
    if span_s <= 0:
        raise AsrptError("offered load is undefined: every job is submitted at the same time")
    return span_s


def offered_load(jobs: Sequence[Job], cluster: ClusterSpec, speed: SpeedTable) -> OfferedLoad:
    """Total and per-partition offered load of ``jobs`` on ``cluster`` (module docstring)."""
    if len(jobs) < 2:
        raise AsrptError("offered load needs at least 2 jobs (the submission span of one job is 0)")
    span_s = _submission_span_s(jobs)
    work = _ideal_work(jobs, cluster, speed)
    capacity = _capacity(cluster)
    by_partition = {p: w / (capacity[p] * span_s) for p, w in _work_by_partition(work, cluster).items()}
    total_s = sum(w for _, w in work)
    return OfferedLoad(total_s / (cluster.accelerators_total * span_s), by_partition, span_s, total_s)


def scaled_cluster(base: ClusterSpec, nodes_by_partition: dict[str, int], *, name: str | None = None) -> ClusterSpec:
    """``base`` with ``nodes_by_partition[p]`` nodes in partition p (same node type, names p-001...)."""
    templates = {}
    for node in base.nodes:
        templates.setdefault(node.partition, node)
    nodes: list[Node] = []
    for partition in base.partitions:
        count = nodes_by_partition[partition.name]
        if not isinstance(count, int) or count < 1:
            raise ConfigError(f"partition {partition.name}: node count must be a positive integer, got {count!r}")
        width = max(3, len(str(count)))
        template = templates[partition.name]
        nodes.extend(replace(template, name=f"{partition.name}-{i:0{width}d}",
                             accelerators_free=template.accelerators_total) for i in range(1, count + 1))
    return replace(base, name=name or base.name, nodes=tuple(nodes))


def _node_floor(jobs: Sequence[Job], cluster: ClusterSpec) -> dict[str, int]:
    """Nodes each partition needs so that every job that may run there still fits there, in the
    shape it asks for (a prime 17 on 8-GPU nodes needs 17 nodes, not ceil(17/8) = 3)."""
    per_node = {p.name: cluster.accelerators_per_node(p.name) for p in cluster.partitions}
    floor = {p: 1 for p in per_node}
    for job in jobs:
        for partition in cluster.partitions:
            if job.allows(partition):
                shape = job.request_shape
                need = shape.nodes if shape.nodes is not None else derived_shape(job.accelerators, per_node[partition.name])[0]
                if need > floor[partition.name]:
                    floor[partition.name] = need
    return floor


def calibrate_cluster(
    records: Sequence[TraceRecord],
    base: ClusterSpec,
    speed: SpeedTable,
    target: float,
    *,
    seed: int,
    per_partition: bool = True,
    rounds: int = 4,
) -> tuple[ClusterSpec, OfferedLoad]:
    """The cluster, scaled from ``base``, on which ``records`` offer about ``target`` load.

    Returns the cluster and the load achieved on it (node counts are whole and floored, see the
    module docstring). ``per_partition=False`` scales every partition by the total load instead.
    """
    from asrpt.sim.workload import build_jobs

    if not (math.isfinite(target) and target > 0):
        raise ConfigError(f"target load must be a positive number, got {target!r}")
    jobs = build_jobs(records, base, speed, seed=seed).jobs
    if len(jobs) < 2:
        raise AsrptError(f"only {len(jobs)} job(s) of the trace fit cluster {base.name!r}; cannot calibrate a load")
    floor = _node_floor(jobs, base)
    per_node = {p.name: base.accelerators_per_node(p.name) for p in base.partitions}
    base_counts = {p: _capacity(base)[p] // per_node[p] for p in per_node}
    span_s = _submission_span_s(jobs)
    work = _ideal_work(jobs, base, speed)  # alpha_min does not depend on the node count once jobs fit
    cluster = base
    for _ in range(rounds if per_partition else 1):
        if per_partition:
            demand = _work_by_partition(work, cluster)
            counts = {p: max(floor[p], round(demand[p] / (target * span_s * per_node[p]))) for p in per_node}
        else:
            factor = sum(w for _, w in work) / (base.accelerators_total * span_s) / target
            counts = {p: max(floor[p], round(base_counts[p] * factor)) for p in per_node}
        cluster = scaled_cluster(base, counts, name=f"{base.name}@{target:g}")
    return cluster, offered_load(jobs, cluster, speed)


# -- trace resolution ----------------------------------------------------------------------------


def default_traces_dirs() -> list[Path]:
    """Where the shared traces are looked for: next to the repository, then next to the cwd."""
    repo = Path(__file__).resolve().parents[3]  # src/asrpt/sim/matrix.py -> repository root
    return [repo.parent / "shared" / "traces", Path.cwd().parent / "shared" / "traces"]


def resolve_traces(
    names: Sequence[str], traces_dir: Path | None, warn: Callable[[str], None]
) -> list[tuple[MatrixTrace, Path]]:
    """The matrix traces called ``names`` that exist; a missing one is reported through ``warn``."""
    unknown = [n for n in names if n not in MATRIX_TRACES]
    if unknown:
        raise ConfigError(f"unknown matrix trace(s) {', '.join(unknown)}; valid: {', '.join(MATRIX_TRACES)}")
    found = []
    for name in names:
        trace = MATRIX_TRACES[name]
        if trace.location.startswith("bundled:"):
            path = Path(str(resources.files("asrpt.data") / "traces" / trace.location.split(":", 1)[1]))
            candidates = [path]
        elif os.path.isabs(trace.location):
            candidates = [Path(trace.location)]
        else:
            folders = [traces_dir] if traces_dir is not None else default_traces_dirs()
            candidates = [folder / trace.location for folder in folders]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            warn(f"skipping trace {name}: not found at {', '.join(map(str, candidates))} (give --traces-dir)")
            continue
        found.append((trace, path))
    return found


# -- one cell ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Cell:
    trace: MatrixTrace
    path: str
    jobs_limit: int
    load: float
    seed: int
    calibration_seed: int
    policy: str
    per_partition: bool
    requeue_cost: RequeueCost = RequeueCost()


@functools.lru_cache(maxsize=4)
def _records(path: str, fmt: str, limit: int) -> tuple[TraceRecord, ...]:
    from asrpt.sim.traces import read_trace

    return tuple(read_trace(path, fmt, limit=limit).records)


# Caches live per worker process; sized for every (trace, load, seed) of the default matrix, so a
# cell rebuilds nothing another cell of the same worker already built.
@functools.lru_cache(maxsize=32)
def _calibrated(trace: MatrixTrace, path: str, limit: int, load: float, seed: int, per_partition: bool):
    from asrpt.core.speed import default_speed_table
    from asrpt.sim.clusters import load_cluster

    base = load_cluster(trace.cluster)
    speed = base.speed_table(default_speed_table())
    return (*calibrate_cluster(_records(path, trace.fmt, limit), base, speed, load, seed=seed,
                               per_partition=per_partition), speed)


@functools.lru_cache(maxsize=64)
def _workload(trace: MatrixTrace, path: str, limit: int, load: float, seed: int, calibration_seed: int,
              per_partition: bool):
    from asrpt.sim.metrics import lower_bound_total_jct_s
    from asrpt.sim.workload import build_jobs

    cluster, achieved, speed = _calibrated(trace, path, limit, load, calibration_seed, per_partition)
    jobs = build_jobs(_records(path, trace.fmt, limit), cluster, speed, seed=seed).jobs
    bound = lower_bound_total_jct_s(jobs, cluster.partitions, cluster.nodes, speed)["total_jct_s"]
    return cluster, speed, jobs, bound, offered_load(jobs, cluster, speed)


def _run_cell(cell: _Cell) -> dict[str, Any]:
    from asrpt.core.policies import make_policy
    from asrpt.sim.engine import simulate
    from asrpt.sim.metrics import policy_metrics
    from asrpt.sim.predictors import make_predictions

    cluster, speed, jobs, bound, load = _workload(cell.trace, cell.path, cell.jobs_limit, cell.load, cell.seed,
                                                  cell.calibration_seed, cell.per_partition)
    from asrpt.core.policies import ASRPTOptions

    policy_name, predictor, options, policy_options = parse_label(cell.policy)
    started = time.perf_counter()
    policy = make_policy(policy_name, speed, ASRPTOptions(**policy_options))
    outcome = simulate(jobs, cluster.partitions, cluster.nodes, policy,
                       make_predictions(predictor, seed=cell.seed, **options), requeue_cost=cell.requeue_cost)
    metrics = policy_metrics(outcome)
    wall_s = time.perf_counter() - started
    return {
        "trace": cell.trace.name,
        "load_target": cell.load,
        "load": load.total,
        "load_by_partition": load.by_partition,
        "nodes_by_partition": {p: sum(1 for n in cluster.nodes if n.partition == p) for p in load.by_partition},
        "accelerators": cluster.accelerators_total,
        "seed": cell.seed,
        "policy": cell.policy,
        "jobs": len(jobs),
        "lower_bound_s": bound,
        "total_jct_s": metrics["total_jct_s"],
        "ratio_to_lower_bound": metrics["total_jct_s"] / bound if bound > 0 else math.nan,
        "p99_jct_s": metrics["p99_jct_s"],
        "max_queue_s": metrics["max_queue_s"],
        "avg_queue_s": metrics["avg_queue_s"],
        "utilization": metrics["utilization"],
        "wall_s": wall_s,
    }


# -- the matrix ----------------------------------------------------------------------------------


def run_matrix(
    traces: Sequence[tuple[MatrixTrace, Path]],
    *,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    policies: Sequence[str] = tuple(MATRIX_POLICIES),
    loads: Sequence[float] = DEFAULT_LOADS,
    jobs_per_trace: int | None = None,
    per_partition: bool = True,
    workers: int = 2,
    progress: Callable[[str], None] | None = None,
    requeue_cost: RequeueCost = RequeueCost(),
) -> dict[str, Any]:
    """Run every (trace, load, seed, policy) cell; returns the report (``--json-out``'s content).

    ``jobs_per_trace`` overrides each trace's ``default_jobs``; ``workers`` > 1 runs cells in a
    process pool (they are independent), 1 runs them here. ``requeue_cost`` is what every
    preemption costs (tiresias and asrpt-preempt preempt).
    """
    for label in policies:
        parse_label(label)
    if not traces:
        raise AsrptError("no trace to run: every requested trace is missing")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct and at least one, got {list(seeds)}")
    if not policies or len(set(policies)) != len(policies):
        raise ConfigError(f"policies must be distinct and at least one, got {list(policies)}")
    if jobs_per_trace is not None and jobs_per_trace < 2:
        raise ConfigError(f"jobs per trace must be >= 2, got {jobs_per_trace}")
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    cells = [
        _Cell(trace, str(path), jobs_per_trace or trace.default_jobs, float(load), seed, seeds[0], policy, per_partition,
              requeue_cost)
        for trace, path in traces for load in loads for seed in seeds for policy in policies
    ]
    order = sorted(range(len(cells)), key=lambda i: (_COST_RANK.get(cells[i].policy.partition(":")[0], 9), -cells[i].load, i))
    started = time.perf_counter()
    results: list[dict[str, Any] | None] = [None] * len(cells)

    def done(i: int, row: dict[str, Any], count: int) -> None:
        results[i] = row
        if progress is not None:
            c = cells[i]
            progress(f"cell {count}/{len(cells)} {c.trace.name} load {c.load:g} seed {c.seed} {c.policy}: "
                     f"{row['ratio_to_lower_bound']:.2f}x bound, {row['wall_s']:.1f} s; elapsed {time.perf_counter() - started:.0f} s")

    if workers == 1:
        for count, i in enumerate(order, 1):
            done(i, _run_cell(cells[i]), count)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_run_cell, cells[i]): i for i in order}
            for count, future in enumerate(as_completed(futures), 1):
                done(futures[future], future.result(), count)
    rows = [r for r in results if r is not None]
    return {
        "config": {
            "traces": [{"name": t.name, "path": str(p), "format": t.fmt, "cluster": t.cluster,
                        "jobs": jobs_per_trace or t.default_jobs, "note": t.note} for t, p in traces],
            "seeds": list(seeds),
            "policies": list(policies),
            "loads": list(loads),
            "per_partition_load": per_partition,
            "workers": workers,
            "requeue_cost": {"checkpoint_interval_s": requeue_cost.checkpoint_interval_s, "restart_s": requeue_cost.restart_s},
        },
        "cells": rows,
        "summary": summarise(rows),
        "wall_s": time.perf_counter() - started,
    }


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (trace, load, policy): mean and spread over seeds; A-SRPT rows also get
    ``vs_best_baseline``, total JCT over the best baseline's of the same seed (< 1: A-SRPT wins)."""
    by_seed: dict[tuple[str, float, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_seed.setdefault((r["trace"], r["load_target"], r["seed"]), {})[r["policy"]] = r
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["trace"], r["load_target"], r["policy"]), []).append(r)
    out = []
    for (trace, load, policy), runs in groups.items():
        entry: dict[str, Any] = {
            "trace": trace,
            "load_target": load,
            "policy": policy,
            "seeds": [r["seed"] for r in runs],
            "jobs": runs[0]["jobs"],
            "load": _spread([r["load"] for r in runs]),
            "ratio_to_lower_bound": _spread([r["ratio_to_lower_bound"] for r in runs]),
            "p99_jct_s": _spread([r["p99_jct_s"] for r in runs]),
            "max_queue_s": _spread([r["max_queue_s"] for r in runs]),
        }
        if policy.startswith("asrpt"):
            ratios = []
            for r in runs:
                peers = by_seed[(trace, load, r["seed"])]
                best = min((peers[b]["total_jct_s"] for b in BASELINES if b in peers), default=None)
                if best:
                    ratios.append(r["total_jct_s"] / best)
            if ratios:
                entry["vs_best_baseline"] = _spread(ratios)
        out.append(entry)
    return out


_HEADER = ("trace", "load (achieved)", "policy", "JCT/bound mean (min..max)", "p99 JCT h", "max wait h", "vs best baseline")


def _row_cells(entry: dict[str, Any]) -> tuple[str, ...]:
    r = entry["ratio_to_lower_bound"]
    vs = entry.get("vs_best_baseline")
    return (
        f"{entry['trace']} ({entry['jobs']})",
        f"{entry['load_target']:g} ({entry['load']['mean']:.2f})",
        entry["policy"],
        f"{r['mean']:.2f} ({r['min']:.2f}..{r['max']:.2f})",
        f"{entry['p99_jct_s']['mean'] / 3600:.1f}",
        f"{entry['max_queue_s']['mean'] / 3600:.1f}",
        f"{vs['mean']:.2f} ({vs['min']:.2f}..{vs['max']:.2f})" if vs else "",
    )


def _ordered(report: dict[str, Any]) -> list[dict[str, Any]]:
    policies = report["config"]["policies"]
    return sorted(report["summary"], key=lambda e: (e["trace"], e["load_target"], policies.index(e["policy"])))


def cluster_lines(report: dict[str, Any]) -> list[str]:
    """Per (trace, load): the scaled cluster (nodes per partition) and each partition's achieved load."""
    seen: dict[tuple[str, float], dict[str, Any]] = {}
    for cell in report["cells"]:
        seen.setdefault((cell["trace"], cell["load_target"]), cell)
    lines = []
    for (trace, load), cell in sorted(seen.items()):
        parts = ", ".join(f"{p} {cell['nodes_by_partition'][p]} nodes {x:.2f}" for p, x in cell["load_by_partition"].items())
        lines.append(f"{trace} at {load:g}: {cell['accelerators']} accelerators, load {cell['load']:.2f} ({parts})")
    return lines


def format_table(report: dict[str, Any]) -> str:
    """The summary as a fixed-width text table (one row per trace, load and policy)."""
    rows = [_HEADER, *(_row_cells(e) for e in _ordered(report))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    config = report["config"]
    lines += ["", "clusters (achieved offered load in total and per partition, first seed):", *("  " + x for x in cluster_lines(report))]
    lines.append("")
    lines.append(f"seeds {', '.join(map(str, config['seeds']))}; means over seeds; vs best baseline = total JCT / "
                 f"best of {', '.join(BASELINES)} (same seed); wall {report['wall_s']:.0f} s")
    return "\n".join(lines)


def format_markdown(report: dict[str, Any]) -> str:
    """The summary as a markdown table for bench/README.md."""
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(_row_cells(e)) + " |" for e in _ordered(report)]
    config = report["config"]
    lines.append("")
    lines.append(f"Seeds {', '.join(map(str, config['seeds']))}; traces: "
                 + "; ".join(f"{t['name']}: first {t['jobs']} jobs of `{Path(t['path']).name}` on a scaled `{t['cluster']}` cluster"
                             for t in config["traces"])
                 + f"; run time {report['wall_s'] / 60:.1f} min with {config['workers']} workers.")
    lines += ["", "Clusters (achieved offered load in total and per partition):", ""]
    lines += [f"- {x}" for x in cluster_lines(report)]
    return "\n".join(lines) + "\n"


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
