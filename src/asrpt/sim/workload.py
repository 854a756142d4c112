"""From trace records to scheduler jobs: workload class, parallel layout, iterations, time limit.

Most traces say only how many GPUs a job held and for how long. A-SRPT schedules jobs with a
model and a mixed-parallel layout, so, as the paper did for the PAI trace, we assign both by a
seeded draw, and derive the iterations from the duration:

* **Workload class**: drawn uniformly from the speed table's classes (or ``classes``), once per
  recurrence group: all runs of a group train the same model. Records without a group are
  their own group. Traces that name the model (gavel, sia) keep it.
* **Parallel layout** ``d x p x t`` with ``d * p * t == accelerators``, drawn once per
  (group, accelerators): tensor parallelism ``t`` is a power of two up to 8 and up to the
  largest node the job may use (tensor parallel traffic is too heavy for a network); pipeline
  parallelism ``p`` (2..8 stages, a divisor) only for jobs larger than 8 accelerators, which
  need more than one server anyway; the rest is data parallelism. A pipelined job runs 4
  micro-batches per iteration, others 1. A 1-accelerator job is ``1 x 1 x 1``. Traces that name
  the model (gavel, sia) are data parallel, as those systems ran them.
* **Iterations** = duration / alpha_min, where alpha_min is the ideal per-iteration time on the
  partitions the job may use (:func:`asrpt.core.placement.alpha_min_s`), so an ideally placed
  job runs exactly as long as it did in the trace. Traces with iterations keep them, except
  that Gavel's steps, counted at the job type's own batch size, are converted to steps at the
  speed table's batch size for the class: ``steps x t(batch) / t(table)`` with t the V100 step
  times (Gavel's measurements, :data:`asrpt.sim.traces.GAVEL_V100_STEP_TIME_S`). Without this
  a "LM (batch size 5)" job would run 3.9x too long.
* **Allocation shape**: the derived request (:data:`asrpt.core.model.DERIVED`), the way users
  submit: on a partition of ``s``-accelerator nodes a job of ``g <= s`` asks for one node, a
  larger one for whole nodes (``n`` = the smallest ``n >= ceil(g/s)`` dividing ``g``, ``g/n``
  each: 16 on 8-GPU nodes is 2 x 8, 12 is 2 x 6, 9 is 3 x 3). alpha_min is that shape's alpha;
  a job whose shape fits no partition it may use (9 GPUs on two 8-GPU nodes) is skipped as
  "too large for cluster", like a job larger than the cluster.
* **Accelerator type**: a record that names a type may run only on partitions whose name or
  accelerator matches it (case-insensitively), else on a partition whose accelerator the speed
  table resolves to the same type ("V100M32" -> a v100 partition). If the cluster has neither,
  the restriction is dropped and counted in :attr:`WorkloadBuildResult.unrestricted`: the job is
  kept, not lost.
* **Time limit**: the trace's, raised to at least the duration. Traces rarely carry one, so
  otherwise one is drawn per job: duration x a lognormal factor with median 6 (users request
  about 6x the run time they use, as published studies of HPC and DL clusters report) and
  sigma 1 (a tenth of users ask for less than 1.7x, a tenth for more than 21x), at least 1.05x,
  rounded up to the next 5 minutes, the granularity people type.

Every draw comes from a hash of (seed, purpose, key), not from a shared random stream, so a
record's mapping does not depend on which other records are present or on their order.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Iterable, Sequence, TypeVar

from asrpt.core.model import DERIVED, Job, ParallelConfig, Partition
from asrpt.core.placement import alpha_min_s
from asrpt.core.speed import SpeedTable
from asrpt.exceptions import ConfigError
from asrpt.sim.clusters import ClusterSpec
from asrpt.sim.traces import GAVEL_V100_STEP_TIME_S, TraceRecord

__all__ = [
    "WorkloadOptions",
    "WorkloadBuildResult",
    "build_jobs",
    "draw_workload_class",
    "draw_parallel_config",
    "synthesise_time_limit_s",
]

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")
_STANDARD_NORMAL = NormalDist()
#: The accelerator Gavel's per-batch-size step times were measured on.
_GAVEL_REFERENCE = "v100"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadOptions:
    """Knobs of the synthetic mapping; the defaults are what the module docstring describes."""

    #: Classes to draw from; None = every class of the speed table.
    classes: tuple[str, ...] | None = None
    #: Largest tensor-parallel degree (a power of two).
    max_tensor: int = 8
    #: Jobs with more accelerators than this get pipeline parallelism where a divisor allows.
    pipeline_above: int = 8
    #: Most pipeline stages.
    max_pipeline: int = 8
    #: Micro-batches per iteration of a pipelined job (1 without pipelining).
    micro_batches: int = 4
    #: Convert Gavel's steps at the job type's batch size to the speed table's batch size.
    rescale_gavel_steps: bool = True
    #: Median of the lognormal over-request factor of synthesised time limits.
    limit_median_factor: float = 6.0
    #: Sigma (of the log) of that factor.
    limit_sigma: float = 1.0
    #: Smallest synthesised limit, as a multiple of the duration.
    limit_min_factor: float = 1.05
    #: Synthesised limits are rounded up to a multiple of this, seconds.
    limit_round_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_tensor < 1 or self.max_tensor & (self.max_tensor - 1):
            raise ConfigError(f"max_tensor must be a power of two >= 1, got {self.max_tensor}")
        for name in ("pipeline_above", "max_pipeline", "micro_batches"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.limit_median_factor >= 1 and self.limit_sigma >= 0 and self.limit_min_factor >= 1
                and self.limit_round_s > 0):
            raise ConfigError("time-limit factors must be >= 1, sigma >= 0 and the rounding > 0")


@dataclass(frozen=True, slots=True)
class WorkloadBuildResult:
    """Jobs ready for the simulator (true iterations set, no prediction yet) and what was lost."""

    jobs: list[Job]
    #: Records not turned into jobs, by reason ("too large for cluster", ...).
    skipped: dict[str, int] = field(default_factory=dict)
    #: Jobs whose trace type no partition matches, by type: kept, but allowed anywhere.
    unrestricted: dict[str, int] = field(default_factory=dict)
    #: Other adjustments, by kind ("time limit raised to duration", ...).
    adjusted: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{len(self.jobs)} jobs"]
        if self.skipped:
            parts.append("skipped " + ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items())))
        if self.unrestricted:
            parts.append("type not in cluster, allowed anywhere: "
                         + ", ".join(f"{t}: {n}" for t, n in sorted(self.unrestricted.items())))
        if self.adjusted:
            parts.append(", ".join(f"{r}: {n}" for r, n in sorted(self.adjusted.items())))
        return "; ".join(parts)


# -- seeded draws --------------------------------------------------------------------------------


def _uniforms(seed: int, purpose: str, key: str, n: int = 1) -> list[float]:
    """``n`` (<= 8) numbers in (0, 1) that depend only on (seed, purpose, key).

    Hash-based rather than a seeded stream, so the draws are stable across runs, platforms and
    Python versions, and independent of which other records are present or in which order.
    """
    digest = hashlib.blake2b(f"{seed}\x1f{purpose}\x1f{key}".encode(), digest_size=8 * n).digest()
    return [(int.from_bytes(digest[8 * i: 8 * i + 8], "big") + 0.5) / 2.0**64 for i in range(n)]


def _pick(options: Sequence[_T], u: float) -> _T:
    return options[min(int(u * len(options)), len(options) - 1)]


def draw_workload_class(group: str, classes: Sequence[str], *, seed: int) -> str:
    """The workload class of recurrence group ``group`` under ``seed`` (uniform over ``classes``)."""
    if not classes:
        raise ConfigError("no workload classes to draw from")
    return _pick(sorted(classes), _uniforms(seed, "class", group)[0])


def draw_parallel_config(
    group: str,
    accelerators: int,
    *,
    seed: int,
    node_size: int = 8,
    options: WorkloadOptions | None = None,
) -> ParallelConfig:
    """A ``d x p x t`` layout with ``d * p * t == accelerators``, drawn once per (group, size).

    ``node_size`` is the largest node the job may use: tensor parallelism stays within it.
    """
    if isinstance(accelerators, bool) or not isinstance(accelerators, int) or accelerators < 1:
        raise ValueError(f"accelerators must be a positive integer, got {accelerators!r}")
    opts = options or WorkloadOptions()
    if accelerators == 1:
        return _layout(1, 1, 1, 1)
    u_tensor, u_pipeline = _uniforms(seed, "layout", f"{group}\x1f{accelerators}", 2)
    tp_cap = min(opts.max_tensor, max(1, node_size))
    tensors = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= tp_cap and accelerators % t == 0]
    tensor = _pick(tensors, u_tensor)
    pipeline = 1
    if accelerators > opts.pipeline_above:
        rest = accelerators // tensor
        stages = [p for p in range(2, opts.max_pipeline + 1) if rest % p == 0]
        if stages:
            pipeline = _pick(stages, u_pipeline)
    data = accelerators // (tensor * pipeline)
    return _layout(data, pipeline, tensor, opts.micro_batches if pipeline > 1 else 1)


@functools.lru_cache(maxsize=1024)
def _layout(data: int, pipeline: int, tensor: int, micro_batches: int) -> ParallelConfig:
    """Shared immutable layouts: a replay has a few dozen distinct ones among many jobs."""
    return ParallelConfig(data=data, pipeline=pipeline, tensor=tensor, micro_batches=micro_batches)


def synthesise_time_limit_s(
    duration_s: float, job_id: str, *, seed: int, options: WorkloadOptions | None = None
) -> float:
    """A requested wall-time limit for a job that ran ``duration_s``: over-requested, seeded.

    ``duration_s x factor``, factor lognormal (median ``limit_median_factor``, sigma
    ``limit_sigma``) and at least ``limit_min_factor``, rounded up to ``limit_round_s``.
    Always >= ``duration_s``.
    """
    if not math.isfinite(duration_s) or duration_s < 0:
        raise ValueError(f"duration_s must be finite and >= 0, got {duration_s!r}")
    opts = options or WorkloadOptions()
    z = _STANDARD_NORMAL.inv_cdf(_uniforms(seed, "limit", job_id)[0])
    factor = math.exp(math.log(opts.limit_median_factor) + opts.limit_sigma * z)
    wanted = duration_s * max(opts.limit_min_factor, factor)
    step = opts.limit_round_s
    return max(step, math.ceil(wanted / step) * step)


# -- building jobs -------------------------------------------------------------------------------


class _TypeMatcher:
    """Which ``allowed_accelerators`` a trace's type becomes on one cluster (cached per type)."""

    def __init__(self, partitions: Sequence[Partition], speed: SpeedTable) -> None:
        self._partitions = partitions
        self._speed = speed
        self._cache: dict[str, tuple[tuple[str, ...], str]] = {}

    def __call__(self, trace_type: str) -> tuple[tuple[str, ...], str]:
        """(allowed accelerators, how): how is "exact", "alias" or "none"."""
        key = trace_type.strip().lower()
        hit = self._cache.get(key)
        if hit is None:
            hit = self._match(key)
            self._cache[key] = hit
        return hit

    def _match(self, key: str) -> tuple[tuple[str, ...], str]:
        if any(p.name.lower() == key or p.accelerator.lower() == key for p in self._partitions):
            return (key,), "exact"
        if self._speed.knows(key):
            canonical = self._speed.canonical_accelerator(key)
            same = sorted({p.accelerator.lower() for p in self._partitions
                           if self._speed.knows(p.accelerator)
                           and self._speed.canonical_accelerator(p.accelerator) == canonical})
            if same:
                return tuple(same), "alias"
        return (), "none"


def _gavel_step_scale(record: TraceRecord, workload_class: str, speed: SpeedTable) -> float:
    """Table iterations per trace step for a Gavel job type with a batch size, else 1."""
    if record.batch_size is None or not speed.knows(_GAVEL_REFERENCE):
        return 1.0
    step_s = GAVEL_V100_STEP_TIME_S.get(workload_class, {}).get(record.batch_size)
    if step_s is None:
        return 1.0
    return step_s / speed.step_time_s(workload_class, _GAVEL_REFERENCE)


def _largest_node(cluster: ClusterSpec, allowed: tuple[str, ...]) -> int:
    sizes = [cluster.accelerators_per_node(p.name) for p in cluster.partitions
             if not allowed or p.name.lower() in allowed or p.accelerator.lower() in allowed]
    return max(sizes, default=1)


def build_jobs(
    records: Iterable[TraceRecord],
    cluster: ClusterSpec,
    speed: SpeedTable,
    *,
    seed: int,
    options: WorkloadOptions | None = None,
) -> WorkloadBuildResult:
    """Turn trace records into :class:`~asrpt.core.model.Job` s for ``cluster`` (see module docstring).

    Parameters
    ----------
    records
        From :func:`asrpt.sim.traces.read_trace`; order is kept.
    cluster
        The simulated cluster; decides allowed types, alpha_min and what is too large.
    speed
        The speed table the simulation will use, i.e. ``cluster.speed_table(base)``: it must
        know every partition's accelerator, or iterations would not match the replay.
    seed
        Seeds the class, layout and time-limit draws.

    Returns
    -------
    WorkloadBuildResult
        Jobs with ``true_iterations`` set and ``predicted_iterations`` None, ids = trace ids.
    """
    opts = options or WorkloadOptions()
    unknown = [p.accelerator for p in cluster.partitions if not speed.knows(p.accelerator)]
    if unknown:
        raise ConfigError(
            f"the speed table does not know accelerator(s) {', '.join(sorted(set(unknown)))} of cluster "
            f"{cluster.name!r}; pass cluster.speed_table(base) to build_jobs and to the simulator"
        )
    if opts.classes is None:
        classes = list(speed.workload_classes)
    else:
        bad = [c for c in opts.classes if not speed.knows_class(c)]
        if bad:
            raise ConfigError(f"unknown workload class(es) {bad}; valid: {', '.join(speed.workload_classes)}")
        classes = sorted({speed.canonical_class(c) for c in opts.classes})

    match_type = _TypeMatcher(cluster.partitions, speed)
    partitions, nodes = cluster.partitions, cluster.nodes
    alpha_cache: dict[tuple[str, ParallelConfig, tuple[str, ...]], float] = {}
    class_cache: dict[str, str] = {}
    node_size_cache: dict[tuple[str, ...], int] = {}
    jobs: list[Job] = []
    seen: set[str] = set()
    skipped: dict[str, int] = {}
    unrestricted: dict[str, int] = {}
    adjusted: dict[str, int] = {}

    def count(table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    for record in records:
        if record.job_id in seen:
            count(skipped, "duplicate job id")
            continue
        group = record.group or f"job:{record.job_id}"

        allowed: tuple[str, ...] = ()
        if record.accelerator_type:
            allowed, how = match_type(record.accelerator_type)
            if how == "none":
                count(unrestricted, record.accelerator_type)
            elif how == "alias":
                count(adjusted, "type matched via speed-table alias")

        if record.workload_class is not None:
            if not speed.knows_class(record.workload_class):
                count(skipped, "workload class not in speed table")
                continue
            workload_class = speed.canonical_class(record.workload_class)
            parallel = ParallelConfig.data_parallel(record.accelerators)
        else:
            workload_class = class_cache.get(group) or draw_workload_class(group, classes, seed=seed)
            class_cache[group] = workload_class
            node_size = node_size_cache.get(allowed)
            if node_size is None:
                node_size = node_size_cache[allowed] = _largest_node(cluster, allowed)
            parallel = draw_parallel_config(group, record.accelerators, seed=seed, node_size=node_size, options=opts)

        key = (workload_class, parallel, allowed)
        alpha = alpha_cache.get(key)
        if alpha is None:
            probe = Job(job_id=record.job_id, submit_time_s=record.submit_time_s, parallel=parallel,
                        workload_class=workload_class, allowed_accelerators=allowed, request_shape=DERIVED)
            alpha = alpha_cache[key] = alpha_min_s(probe, partitions, nodes, speed)
        if not math.isfinite(alpha):
            count(skipped, "too large for cluster")
            continue

        if record.iterations is not None:
            iterations = float(record.iterations)
            if opts.rescale_gavel_steps:
                factor = _gavel_step_scale(record, workload_class, speed)
                if abs(factor - 1.0) > 1e-3:
                    iterations *= factor
                    count(adjusted, "steps rescaled to the speed table's batch size")
            duration = iterations * alpha
        else:
            assert record.duration_s is not None  # TraceRecord guarantees one of the two
            duration = record.duration_s
            if duration <= 0:
                count(skipped, "zero duration")
                continue
            iterations = duration / alpha

        if record.time_limit_s is not None:
            limit = record.time_limit_s
            if limit < duration:
                limit = duration
                count(adjusted, "time limit raised to duration")
        else:
            limit = synthesise_time_limit_s(duration, record.job_id, seed=seed, options=opts)

        jobs.append(Job(
            job_id=record.job_id,
            submit_time_s=record.submit_time_s,
            parallel=parallel,
            workload_class=workload_class,
            user=record.user,
            group=record.group,
            allowed_accelerators=allowed,
            true_iterations=iterations,
            time_limit_s=limit,
            request_shape=DERIVED,
        ))
        seen.add(record.job_id)

    if unrestricted:
        _LOG.warning(
            "cluster %s has no partition for accelerator type(s) %s; those jobs may run anywhere",
            cluster.name, ", ".join(f"{t} ({n} jobs)" for t, n in sorted(unrestricted.items())),
        )
    if skipped:
        _LOG.info("left out %s", ", ".join(f"{n} record(s): {r}" for r, n in sorted(skipped.items())))
    return WorkloadBuildResult(jobs=jobs, skipped=skipped, unrestricted=unrestricted, adjusted=adjusted)
