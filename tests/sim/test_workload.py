"""Records to jobs: seeded per-group mapping, layouts, type restrictions, iterations, limits."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.placement import alpha_min_s
from asrpt.core.speed import default_speed_table
from asrpt.exceptions import ConfigError
from asrpt.sim.clusters import load_cluster
from asrpt.sim.traces import GAVEL_V100_STEP_TIME_S, TraceRecord, read_trace
from asrpt.sim.workload import (
    WorkloadOptions,
    build_jobs,
    draw_parallel_config,
    draw_workload_class,
    synthesise_time_limit_s,
)

DATA = Path(__file__).parent / "data"
PAI_SLICE = Path(str(resources.files("asrpt").joinpath("data/traces/pai_slice.csv")))


@pytest.fixture(scope="module")
def pai_records():
    return read_trace(PAI_SLICE, "pai").records


@pytest.fixture(scope="module")
def pai_cluster():
    return load_cluster("pai")


@pytest.fixture(scope="module")
def pai_speed(pai_cluster):
    return pai_cluster.speed_table(default_speed_table())


@pytest.fixture(scope="module")
def pai_jobs(pai_records, pai_cluster, pai_speed):
    return build_jobs(pai_records, pai_cluster, pai_speed, seed=7)


def _record(job_id: str, accelerators: int = 1, *, group: str = "", duration: float = 600.0, **extra) -> TraceRecord:
    return TraceRecord(job_id=job_id, submit_time_s=0.0, duration_s=duration, accelerators=accelerators,
                       group=group, **extra)


def test_pai_slice_builds_every_job(pai_jobs, pai_records):
    assert len(pai_jobs.jobs) == len(pai_records) == 2000
    assert pai_jobs.skipped == {} and pai_jobs.unrestricted == {}
    assert [j.job_id for j in pai_jobs.jobs] == [r.job_id for r in pai_records]
    for job, record in zip(pai_jobs.jobs, pai_records):
        assert job.predicted_iterations is None and job.true_iterations > 0
        assert job.accelerators == record.accelerators and job.submit_time_s == record.submit_time_s
        assert job.user == record.user and job.group == record.group


def test_iterations_reproduce_the_trace_duration(pai_jobs, pai_records, pai_cluster, pai_speed):
    by_id = {r.job_id: r for r in pai_records}
    for job in pai_jobs.jobs[:300]:
        alpha = alpha_min_s(job, pai_cluster.partitions, pai_cluster.nodes, pai_speed)
        assert job.true_iterations * alpha == pytest.approx(by_id[job.job_id].duration_s)
        assert job.accelerators == by_id[job.job_id].accelerators


def test_mapping_is_deterministic_per_seed(pai_records, pai_cluster, pai_speed, pai_jobs):
    again = build_jobs(pai_records, pai_cluster, pai_speed, seed=7)
    assert again.jobs == pai_jobs.jobs
    other = build_jobs(pai_records, pai_cluster, pai_speed, seed=8)
    assert [j.workload_class for j in other.jobs] != [j.workload_class for j in pai_jobs.jobs]
    # A record's mapping does not depend on the other records or their order.
    subset = build_jobs(list(reversed(pai_records[:50])), pai_cluster, pai_speed, seed=7)
    assert {j.job_id: j for j in subset.jobs} == {j.job_id: j for j in pai_jobs.jobs[:50]}


def test_mapping_is_constant_within_a_group(pai_jobs, pai_records):
    group_of = {r.job_id: r.group for r in pai_records}
    classes: dict[str, set[str]] = {}
    layouts: dict[tuple[str, int], set[object]] = {}
    for job in pai_jobs.jobs:
        classes.setdefault(group_of[job.job_id], set()).add(job.workload_class)
        layouts.setdefault((group_of[job.job_id], job.allowed_accelerators, job.accelerators), set()).add(job.parallel)
    assert sum(1 for g in classes if sum(1 for r in pai_records if r.group == g) > 1) > 20  # groups recur
    assert all(len(c) == 1 for c in classes.values())
    assert all(len(p) == 1 for p in layouts.values())
    assert len({c for s in classes.values() for c in s}) > 5  # and the draw does spread


def test_jobs_with_a_type_get_only_matching_partitions(pai_jobs, pai_records, pai_cluster):
    type_of = {r.job_id: r.accelerator_type for r in pai_records}
    for job in pai_jobs.jobs:
        assert job.allowed_accelerators == (type_of[job.job_id].lower(),)
        allowed = [p.name for p in pai_cluster.partitions if job.allows(p)]
        assert allowed == [type_of[job.job_id].lower()]


def test_type_missing_from_cluster_is_dropped_and_counted_alias_matches():
    cluster = load_cluster("gavel")
    speed = cluster.speed_table(default_speed_table())
    records = [_record("a", accelerator_type="T4"), _record("b", accelerator_type="V100M32"),
               _record("c", accelerator_type="P100"), _record("d", accelerator_type="misc"), _record("e")]
    result = build_jobs(records, cluster, speed, seed=0)
    jobs = {j.job_id: j for j in result.jobs}
    assert len(jobs) == 5
    assert jobs["a"].allowed_accelerators == () and result.unrestricted == {"T4": 1}
    assert jobs["b"].allowed_accelerators == ("v100",)  # the speed table reads V100M32 as a v100
    assert jobs["c"].allowed_accelerators == ("p100",)
    assert jobs["d"].allowed_accelerators == ("k80",)   # MISC is K40m/K80/M60
    assert jobs["e"].allowed_accelerators == ()
    assert result.adjusted == {"type matched via speed-table alias": 2}


def test_too_large_for_cluster_is_skipped():
    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    records = [_record("big", 64), _record("fits", 16), _record("v100only", 8, accelerator_type="v100")]
    result = build_jobs(records, cluster, speed, seed=0)
    assert [j.job_id for j in result.jobs] == ["fits"]
    assert result.skipped == {"too large for cluster": 2}


def test_jobs_get_the_derived_shape_and_its_alpha():
    """Test-bed: two 8-GPU A100 nodes. 12 GPUs is 2 x 6 there (its iterations are the trace
    duration at the 2 x 6 alpha); 9 GPUs would be 3 x 3, and there are only two nodes: skipped,
    though 8 + 1 would once have "fit"."""
    from asrpt.core.model import DERIVED
    from asrpt.core.placement import best_placement

    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    records = [_record("twelve", 12, accelerator_type="a100"), _record("nine", 9, accelerator_type="a100")]
    result = build_jobs(records, cluster, speed, seed=0)
    assert [j.job_id for j in result.jobs] == ["twelve"]
    assert result.skipped == {"too large for cluster": 1}
    (twelve,) = result.jobs
    assert twelve.request_shape == DERIVED
    placement = best_placement(twelve, cluster.nodes, cluster.partitions, speed)
    assert placement is not None and sorted(placement.node_counts.values()) == [6, 6]
    assert twelve.true_iterations * placement.iteration_time_s == pytest.approx(600.0)


def test_speed_table_must_know_the_cluster():
    cluster = load_cluster("testbed")
    with pytest.raises(ConfigError, match="npu-910b.*cluster.speed_table"):
        build_jobs([_record("a")], cluster, default_speed_table(), seed=0)


def test_gavel_records_keep_model_and_steps_and_run_data_parallel():
    records = read_trace(DATA / "b436b2.trace", "gavel").records
    cluster = load_cluster("gavel")
    speed = cluster.speed_table(default_speed_table())
    raw = build_jobs(records, cluster, speed, seed=3, options=WorkloadOptions(rescale_gavel_steps=False))
    result = build_jobs(records, cluster, speed, seed=3)
    assert len(result.jobs) == len(raw.jobs) == 40
    for record, job, unscaled in zip(records, result.jobs, raw.jobs):
        assert job.workload_class == record.workload_class
        assert unscaled.true_iterations == record.iterations
        # Steps at the job type's batch size, converted to the speed table's batch size.
        scale = GAVEL_V100_STEP_TIME_S[record.workload_class][record.batch_size] / speed.step_time_s(
            record.workload_class, "v100") if record.batch_size else 1.0
        assert job.true_iterations == pytest.approx(record.iterations * scale, rel=1e-3)
        assert (job.parallel.data, job.parallel.pipeline, job.parallel.tensor) == (record.accelerators, 1, 1)
        ideal_s = job.true_iterations * alpha_min_s(job, cluster.partitions, cluster.nodes, speed)
        assert job.time_limit_s >= ideal_s


def test_gavel_rescale_by_hand():
    cluster = load_cluster("gavel")
    speed = cluster.speed_table(default_speed_table())
    steps = dict(duration=None, iterations=1000.0, workload_class="lm")
    small, table = build_jobs([_record("s", batch_size=5, **steps), _record("t", batch_size=80, **steps)],
                              cluster, speed, seed=0).jobs
    # An LM step at batch 5 takes 9.16 ms on a V100, at the table's batch 80 35.4 ms.
    assert small.true_iterations == pytest.approx(1000 * 0.00916 / speed.step_time_s("lm", "v100"))
    assert table.true_iterations == pytest.approx(1000.0, rel=1e-3)


def test_sia_records_build():
    records = read_trace(DATA / "sia_philly_workload-1_slice.csv", "sia").records
    cluster = load_cluster("testbed")
    result = build_jobs(records, cluster, cluster.speed_table(default_speed_table()), seed=0)
    assert len(result.jobs) == 40 and result.jobs[0].job_id == "cifar10-0"
    assert result.jobs[0].true_iterations == 3178.0


def test_philly_slice_builds_with_per_job_groups():
    records = read_trace(DATA / "philly_slice.csv", "philly").records
    cluster = load_cluster("philly")
    result = build_jobs(records, cluster, cluster.speed_table(default_speed_table()), seed=0)
    assert len(result.jobs) == 50
    # No recurrence tag: each job is its own group, so the classes vary.
    assert len({j.workload_class for j in result.jobs}) > 3


def test_duplicate_ids_are_skipped():
    cluster = load_cluster("testbed")
    result = build_jobs([_record("a"), _record("a")], cluster, cluster.speed_table(default_speed_table()), seed=0)
    assert len(result.jobs) == 1 and result.skipped == {"duplicate job id": 1}


def test_time_limits(pai_jobs, pai_records):
    durations = {r.job_id: r.duration_s for r in pai_records}
    factors = []
    for job in pai_jobs.jobs:
        duration = durations[job.job_id]
        assert job.time_limit_s >= duration * 1.05 - 1e-9
        assert job.time_limit_s % 300 == 0
        factors.append(job.time_limit_s / duration)
    factors.sort()
    assert 4.5 < factors[len(factors) // 2] < 8.5  # median over-request about 6x


def test_trace_time_limit_kept_or_raised_to_duration():
    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    result = build_jobs([_record("a", duration=600.0, time_limit_s=3600.0),
                         _record("b", duration=600.0, time_limit_s=500.0)], cluster, speed, seed=0)
    assert [j.time_limit_s for j in result.jobs] == [3600.0, 600.0]
    assert result.adjusted == {"time limit raised to duration": 1}


def test_restricted_classes_option():
    cluster = load_cluster("testbed")
    speed = cluster.speed_table(default_speed_table())
    opts = WorkloadOptions(classes=("bert", "ResNet-50"))
    result = build_jobs([_record(str(i), group=f"g{i}") for i in range(30)], cluster, speed, seed=1, options=opts)
    assert {j.workload_class for j in result.jobs} == {"bert", "resnet50"}
    with pytest.raises(ConfigError, match="unknown workload class"):
        build_jobs([_record("x")], cluster, speed, seed=1, options=WorkloadOptions(classes=("gpt9",)))


def test_small_layouts_by_hand():
    assert draw_parallel_config("g", 1, seed=0) == draw_parallel_config("h", 1, seed=5)
    one = draw_parallel_config("g", 1, seed=0)
    assert (one.data, one.pipeline, one.tensor, one.micro_batches) == (1, 1, 1, 1)
    prime = draw_parallel_config("g", 13, seed=0)
    assert (prime.data, prime.pipeline, prime.tensor) == (13, 1, 1)  # no divisor to pipeline by
    on_two = {draw_parallel_config(f"g{i}", 8, seed=0, node_size=2).tensor for i in range(50)}
    assert on_two == {1, 2}  # tensor parallelism stays within a 2-GPU node


@settings(max_examples=300, deadline=None)
@given(
    accelerators=st.integers(min_value=1, max_value=512),
    group=st.text(max_size=12),
    seed=st.integers(min_value=0, max_value=2**32),
    node_size=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_layout_always_multiplies_to_the_accelerators(accelerators, group, seed, node_size):
    config = draw_parallel_config(group, accelerators, seed=seed, node_size=node_size)
    assert config.data * config.pipeline * config.tensor == accelerators
    assert config.tensor in (1, 2, 4, 8) and config.tensor <= max(1, min(8, node_size))
    assert 1 <= config.pipeline <= 8
    if accelerators <= 8:
        assert config.pipeline == 1
    assert config.micro_batches == (4 if config.pipeline > 1 else 1)
    assert draw_parallel_config(group, accelerators, seed=seed, node_size=node_size) == config


@settings(max_examples=300, deadline=None)
@given(
    duration=st.floats(min_value=0.0, max_value=1e8, allow_nan=False),
    job_id=st.text(max_size=10),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_synthesised_limit_is_at_least_the_duration(duration, job_id, seed):
    limit = synthesise_time_limit_s(duration, job_id, seed=seed)
    assert limit >= duration * 1.05 - 1e-6 * max(1.0, duration)
    assert limit % 300 == 0 and limit >= 300
    assert math.isfinite(limit)


def test_class_draw_is_per_group():
    classes = default_speed_table().workload_classes
    assert draw_workload_class("g", classes, seed=1) == draw_workload_class("g", list(reversed(classes)), seed=1)
    assert len({draw_workload_class(f"g{i}", classes, seed=1) for i in range(200)}) == len(classes)
