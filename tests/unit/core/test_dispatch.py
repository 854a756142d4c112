"""Dispatcher rules, table-driven: strict / backfill / greedy, comm-heavy holds, partitions."""

import pytest

from asrpt.core.dispatch import DispatchOptions, dispatch
from asrpt.core.model import DERIVED, SPREAD, ClusterSnapshot, Job, Node, ParallelConfig, Partition, Placement, RunningJob
from asrpt.core.placement import alpha_min_s
from asrpt.core.speed import default_speed_table
from tests.helpers import flat_job, flat_speed_table

SPEED = default_speed_table()
A100 = Partition(name="a100", accelerator="a100", intra_node_gbps=300.0, inter_node_gbps=12.5)
V100 = Partition(name="v100", accelerator="v100", intra_node_gbps=150.0, inter_node_gbps=12.5)


def node(name, partition, free, total=8):
    return Node(name=name, partition=partition.name, accelerator=partition.accelerator, accelerators_total=total, accelerators_free=free)


def run(queue, snapshot, speed=SPEED, now_s=0.0, first_blocked=None, **options):
    alpha = {j.job_id: alpha_min_s(j, snapshot.partitions, snapshot.nodes, speed) for j in queue}
    return dispatch(
        queue,
        snapshot,
        now_s,
        speed=speed,
        options=DispatchOptions(**options),
        runtime_s=lambda job, a: (job.predicted_iterations or 0.0) * a,
        alpha_min_s=lambda job: alpha[job.job_id],
        first_blocked_s={} if first_blocked is None else first_blocked,
    )


def tp8_job(job_id="big", iterations=1000.0, request_shape=SPREAD):
    """Spread (``--gpus=8``) by default: only such a job may start split, so only it is ever held."""
    return Job(job_id=job_id, submit_time_s=0.0, parallel=ParallelConfig(tensor=8), workload_class="resnet50",
               predicted_iterations=iterations, request_shape=request_shape)


def test_a_shaped_job_is_never_split_so_never_held():
    """The same 8-wide job as users submit it (one node of 8): with 4 + 4 free it cannot start
    at all (Slurm would not split it), so there is nothing to hold either."""
    snapshot = ClusterSnapshot(partitions=(A100,), nodes=(node("n0", A100, 4), node("n1", A100, 4)), pending=())
    result = run([tp8_job(request_shape=DERIVED)], snapshot, comm_heavy_tau=0.5)
    assert result.starts == [] and result.holds == []
    assert "waiting for 8 accelerators" in result.reasons["big"]


def test_comm_heavy_job_is_held_then_started_when_the_budget_runs_out():
    snapshot = ClusterSnapshot(partitions=(A100,), nodes=(node("n0", A100, 4), node("n1", A100, 4)), pending=())
    job = tp8_job()
    first_blocked = {}
    held = run([job], snapshot, first_blocked=first_blocked, comm_heavy_tau=0.5)
    assert held.holds == ["big"] and not held.starts
    assert "communication-heavy" in held.reasons["big"]
    ideal_runtime_s = 1000.0 * alpha_min_s(job, snapshot.partitions, snapshot.nodes, SPEED)
    assert held.wake_at_s == pytest.approx(0.5 * ideal_runtime_s)
    # still inside the budget: still held; past it: starts on the best available split
    assert run([job], snapshot, now_s=held.wake_at_s * 0.9, first_blocked=first_blocked, comm_heavy_tau=0.5).holds == ["big"]
    late = run([job], snapshot, now_s=held.wake_at_s, first_blocked=first_blocked, comm_heavy_tau=0.5)
    assert [p.job_id for p in late.starts] == ["big"] and late.holds == []
    assert first_blocked == {}


@pytest.mark.parametrize("tau, ratio, held", [(0.0, 1.5, False), (0.5, 1e9, False), (0.5, 1.0, True)])
def test_comm_heavy_thresholds(tau, ratio, held):
    snapshot = ClusterSnapshot(partitions=(A100,), nodes=(node("n0", A100, 4), node("n1", A100, 4)), pending=())
    result = run([tp8_job()], snapshot, comm_heavy_tau=tau, comm_heavy_ratio=ratio)
    assert (result.holds == ["big"]) is held


def test_consolidated_placement_is_not_held():
    snapshot = ClusterSnapshot(partitions=(A100,), nodes=(node("n0", A100, 8), node("n1", A100, 4)), pending=())
    result = run([tp8_job()], snapshot, comm_heavy_tau=0.5)
    assert result.holds == [] and result.starts[0].node_counts == {"n0": 8}


@pytest.mark.parametrize(
    "allowed, expected",
    [((), "a100"), (("v100",), "v100"), (("a100", "v100"), "a100")],
)
def test_partition_choice_prefers_the_faster_allowed_type(allowed, expected):
    snapshot = ClusterSnapshot(partitions=(A100, V100), nodes=(node("a", A100, 8), node("v", V100, 8)), pending=())
    job = Job(job_id="1", submit_time_s=0.0, parallel=ParallelConfig(data=2), workload_class=SPEED.workload_classes[0], allowed_partitions=allowed, predicted_iterations=10.0)
    (placement,) = run([job], snapshot).starts
    assert placement.partition == expected


def _blocked_head_snapshot():
    """One 4-accelerator node, 3 busy until t=100 (by prediction): a 4-wide head must wait."""
    flat = Partition(name="gpu", accelerator="gpu")
    busy = flat_job("busy", 3, 100.0)
    running = RunningJob(
        job=busy,
        placement=Placement(job_id="busy", partition="gpu", worker_nodes=("n0",) * 3, iteration_time_s=1.0),
        start_time_s=0.0,
    )
    nodes = (Node(name="n0", partition="gpu", accelerator="gpu", accelerators_total=4, accelerators_free=1),)
    return ClusterSnapshot(partitions=(flat,), nodes=nodes, pending=(), running=(running,))


@pytest.mark.parametrize(
    "mode, short_starts, long_starts",
    [
        ("strict", False, False),  # the head blocks everything behind it
        ("backfill", True, False),  # the short job ends (t=50) before the head's reserved start (t=100)
        ("greedy", True, False),  # greedy starts the first that fits; then nothing is left for the long one
    ],
)
def test_modes_behind_a_blocked_head(mode, short_starts, long_starts):
    snapshot = _blocked_head_snapshot()
    queue = [flat_job("head", 4, 10.0), flat_job("short", 1, 50.0), flat_job("long", 1, 500.0)]
    result = run(queue, snapshot, speed=flat_speed_table(), mode=mode, comm_heavy_tau=0.0)
    started = {p.job_id for p in result.starts}
    assert ("short" in started) is short_starts
    assert ("long" in started) is long_starts


def test_backfill_refuses_a_job_that_would_delay_the_head():
    snapshot = _blocked_head_snapshot()
    queue = [flat_job("head", 4, 10.0), flat_job("long", 1, 500.0)]
    backfill = run(queue, snapshot, speed=flat_speed_table(), mode="backfill", comm_heavy_tau=0.0)
    greedy = run(queue, snapshot, speed=flat_speed_table(), mode="greedy", comm_heavy_tau=0.0)
    assert backfill.starts == [] and "delay the reserved start of head" in backfill.reasons["long"]
    assert [p.job_id for p in greedy.starts] == ["long"]
    assert "reserved on gpu from t=100s" in backfill.reasons["head"]


def test_unknown_runtime_never_backfills_in_front_of_a_reservation():
    snapshot = _blocked_head_snapshot()
    queue = [flat_job("head", 4, 10.0), flat_job("unknown", 1, 1.0)]
    result = dispatch(
        queue,
        snapshot,
        0.0,
        speed=flat_speed_table(),
        options=DispatchOptions(mode="backfill", comm_heavy_tau=0.0),
        runtime_s=lambda job, a: float("inf") if job.job_id == "unknown" else 100.0,
        alpha_min_s=lambda job: 1.0,
        first_blocked_s={},
    )
    assert result.starts == []


def test_invalid_options_name_the_valid_ones():
    with pytest.raises(ValueError, match="strict, backfill, greedy"):
        DispatchOptions(mode="fast")
    with pytest.raises(ValueError, match="comm_heavy_ratio"):
        DispatchOptions(comm_heavy_ratio=0.5)


def _two_partition_snapshot():
    """Partitions a and b, one 1-accelerator node each; a's is busy, b's is free."""
    a, b = Partition(name="a", accelerator="gpu"), Partition(name="b", accelerator="gpu")
    busy = flat_job("busy", 1, 100.0, allowed_partitions=("a",))
    running = RunningJob(
        job=busy,
        placement=Placement(job_id="busy", partition="a", worker_nodes=("na",), iteration_time_s=1.0),
        start_time_s=0.0,
    )
    nodes = (
        Node(name="na", partition="a", accelerator="gpu", accelerators_total=1, accelerators_free=0),
        Node(name="nb", partition="b", accelerator="gpu", accelerators_total=1, accelerators_free=1),
    )
    return ClusterSnapshot(partitions=(a, b), nodes=nodes, pending=(), running=(running,))


@pytest.mark.parametrize(
    "behind, starts",
    [
        (("b",), True),  # b is not blocked by a's head: it starts
        (("a",), False),  # it could use only a, which the head blocks
        (("a", "b"), True),  # tried where nothing ahead waits (b), as Slurm tries each partition
        ((), True),  # no restriction: the same, b
    ],
)
def test_strict_head_blocks_only_the_partitions_it_could_use(behind, starts):
    queue = [flat_job("head", 1, 10.0, allowed_partitions=("a",)), flat_job("other", 1, 10.0, allowed_partitions=behind)]
    result = run(queue, _two_partition_snapshot(), speed=flat_speed_table(), mode="strict", comm_heavy_tau=0.0)
    assert [p.job_id for p in result.starts] == (["other"] if starts else [])
    if starts:
        assert result.starts[0].partition == "b"


def test_strict_walk_stops_once_every_partition_is_blocked():
    """After a job that could use b blocks it too (a is already blocked), nothing further
    back is pulled from the queue: a long queue costs nothing once every partition waits."""
    queue = [
        flat_job("head", 1, 10.0, allowed_partitions=("a",)),
        flat_job("wide", 2, 10.0, allowed_partitions=("b",)),  # b has one accelerator: blocks b
        flat_job("b-job", 1, 10.0, allowed_partitions=("b",)),
    ]
    pulled = []

    def watched():
        for job in queue:
            pulled.append(job.job_id)
            yield job

    result = dispatch(
        watched(), _two_partition_snapshot(), 0.0, speed=flat_speed_table(),
        options=DispatchOptions(mode="strict", comm_heavy_tau=0.0),
        runtime_s=lambda job, a: 10.0, alpha_min_s=lambda job: 1.0, first_blocked_s={},
    )
    assert result.starts == []
    assert pulled == ["head", "wide"]


def test_strict_walk_behind_a_blocked_head_is_bounded_by_the_depth():
    """Like Slurm's queue depth: only ``backfill_depth`` jobs behind the first blocked one are
    looked at, so a b-job further back waits for a later cycle."""
    queue = [flat_job("head", 1, 10.0, allowed_partitions=("a",))]
    queue += [flat_job(f"a{i}", 1, 10.0, allowed_partitions=("a",)) for i in range(3)]
    queue.append(flat_job("b-job", 1, 10.0, allowed_partitions=("b",)))
    shallow = run(queue, _two_partition_snapshot(), speed=flat_speed_table(), mode="strict", comm_heavy_tau=0.0, backfill_depth=3)
    deep = run(queue, _two_partition_snapshot(), speed=flat_speed_table(), mode="strict", comm_heavy_tau=0.0, backfill_depth=4)
    assert shallow.starts == [] and [p.job_id for p in deep.starts] == ["b-job"]


def test_backfill_refuses_a_job_whose_actual_placement_runs_past_the_reservation():
    """A job that would end before the head's reserved start at its ideal per-iteration time,
    but whose only placement now is slower and so still runs at the shadow time on the
    accelerator the head needs, must not start (EASY backfill's promise to the head)."""
    snapshot = _blocked_head_snapshot()  # head reserved on n0 from t=100; placements run 1 s/iteration
    ideal_s = {"head": 1.0, "slow": 0.1}

    def starts(slow_iterations):
        result = dispatch(
            [flat_job("head", 4, 10.0), flat_job("slow", 1, slow_iterations)], snapshot, 0.0,
            speed=flat_speed_table(), options=DispatchOptions(mode="backfill", comm_heavy_tau=0.0),
            runtime_s=lambda job, a: (job.predicted_iterations or 0.0) * a,
            alpha_min_s=lambda job: ideal_s[job.job_id], first_blocked_s={},
        )
        return [p.job_id for p in result.starts], result.reasons

    started, reasons = starts(500.0)  # ideally ends at t=50, really at t=500
    assert started == [] and "would delay the reserved start of head" in reasons["slow"]
    assert starts(90.0)[0] == ["slow"]  # really ends at t=90, before the head's start
