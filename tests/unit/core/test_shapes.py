"""Allocation shapes: a job starts only in a shape Slurm would allocate for its request.

Hand-checked cases on four (or so) 8-GPU nodes; the property version is in
tests/property/test_shape_properties.py.
"""

from __future__ import annotations

import math

import pytest

from asrpt.core.comm import ideal_iteration_time_s
from asrpt.core.dispatch import DispatchOptions, FreeCapacity, _reserve, dispatch
from asrpt.core.model import (
    DERIVED,
    SPREAD,
    ClusterSnapshot,
    Job,
    Node,
    ParallelConfig,
    Partition,
    Placement,
    RequestShape,
    RunningJob,
    derived_shape,
)
from asrpt.core.placement import alpha_min_s, best_placement, heavy_edge_place
from asrpt.core.speed import default_speed_table
from tests.helpers import flat_job, flat_speed_table

SPEED = default_speed_table()
A100 = Partition(name="a100", accelerator="a100")
FLAT = Partition(name="gpu", accelerator="gpu")


def nodes_with(frees: list[int], partition: Partition = A100, total: int = 8) -> tuple[Node, ...]:
    return tuple(Node(name=f"n{i}", partition=partition.name, accelerator=partition.accelerator,
                      accelerators_total=total, accelerators_free=f) for i, f in enumerate(frees))


def job(g: int, shape: RequestShape = DERIVED, *, t: int = 1, p: int = 1, cls: str = "bert", job_id: str = "j") -> Job:
    parallel = ParallelConfig(data=g // (t * p), pipeline=p, tensor=t, micro_batches=4 if p > 1 else 1)
    return Job(job_id=job_id, submit_time_s=0.0, parallel=parallel, workload_class=cls,
               predicted_iterations=100.0, request_shape=shape)


@pytest.mark.parametrize(("g", "s", "expected"), [
    (1, 8, (1, 1)), (8, 8, (1, 8)), (4, 8, (1, 4)),
    (16, 8, (2, 8)), (12, 8, (2, 6)), (10, 8, (2, 5)), (24, 8, (3, 8)),
    (9, 8, (3, 3)),     # ceil(9/8) = 2 does not divide 9; 3 does
    (17, 8, (17, 1)),   # prime: one per node is the only even split
    (6, 4, (2, 3)),
])
def test_derived_shape_is_the_way_users_submit(g: int, s: int, expected: tuple[int, int]) -> None:
    assert derived_shape(g, s) == expected
    assert DERIVED.on(g, s) == expected
    assert SPREAD.on(g, s) is None
    assert RequestShape(nodes=2, per_node=4).on(8, s) == (2, 4)


def test_request_shape_validation() -> None:
    with pytest.raises(ValueError):
        RequestShape(nodes=2)
    with pytest.raises(ValueError):
        RequestShape(nodes=0, per_node=4)
    with pytest.raises(ValueError):
        RequestShape(nodes=2, per_node=4, spread=True)
    with pytest.raises(ValueError, match="does not make"):
        job(8, RequestShape(nodes=3, per_node=2))


def test_eight_gpu_job_never_starts_on_3_3_1_1() -> None:
    """Four 8-GPU nodes with 3+3+1+1 free: 8 free in total, but no node has 8. Slurm would not
    start ``--gres=gpu:8`` here; today's search would have scattered it over four nodes."""
    nodes = nodes_with([3, 3, 1, 1])
    shaped = job(8, t=4)
    assert heavy_edge_place(shaped, nodes, A100, SPEED) is None
    assert best_placement(shaped, nodes, [A100], SPEED) is None
    assert not FreeCapacity(nodes).fits([A100], shaped)
    snapshot = ClusterSnapshot(partitions=(A100,), nodes=nodes, pending=())
    result = dispatch([shaped], snapshot, 0.0, speed=SPEED, options=DispatchOptions(mode="greedy"),
                      runtime_s=lambda j, a: 100.0 * a, alpha_min_s=lambda j: 1.0, first_blocked_s={})
    assert result.starts == [] and result.holds == []
    # The same job asked as --gpus=8 (spread) may still be scattered, as cons_tres would.
    spread = best_placement(job(8, SPREAD, t=4), nodes, [A100], SPEED)
    assert spread is not None and sorted(spread.node_counts.values()) == [1, 1, 3, 3]


def test_sixteen_on_8_gpu_nodes_is_2x8() -> None:
    nodes = nodes_with([8, 7, 8, 8])
    placement = best_placement(job(16, t=4, p=2), nodes, [A100], SPEED)
    assert placement is not None
    assert placement.node_counts == {"n0": 8, "n2": 8}  # whole nodes, by name among equals
    assert best_placement(job(16, t=4, p=2), nodes_with([8, 7, 7, 7]), [A100], SPEED) is None


def test_twelve_on_8_gpu_nodes_is_2x6_best_fit() -> None:
    """2 x 6: the two nodes with the least free that still hold 6 (6 and 7), not the 8s."""
    nodes = nodes_with([8, 6, 7, 5, 8])
    placement = best_placement(job(12, t=2), nodes, [A100], SPEED)
    assert placement is not None
    assert placement.node_counts == {"n1": 6, "n2": 6}
    # three TP-4 groups cannot all stay whole on 6 + 6: alpha is the shape's, whichever nodes
    tp4 = job(12, t=4, p=3)
    here = best_placement(tp4, nodes, [A100], SPEED)
    empty = best_placement(tp4, nodes_with([8, 8]), [A100], SPEED)
    assert here is not None and empty is not None
    assert sorted(here.node_counts.values()) == [6, 6] and sorted(empty.node_counts.values()) == [6, 6]
    assert here.iteration_time_s == pytest.approx(empty.iteration_time_s)
    assert alpha_min_s(tp4, [A100], nodes, SPEED) == pytest.approx(here.iteration_time_s)
    # the exact ideal for nodes of 6 (groups of at most 6, any number of nodes) keeps every TP
    # group whole, which 6 + 6 cannot: it is a floor, not the shape's alpha
    assert ideal_iteration_time_s(tp4, A100, 6, SPEED) < here.iteration_time_s


def test_fixed_two_nodes_of_four() -> None:
    """``-N 2 --gres=gpu:4``: exactly two nodes with 4 each, even where one node has all 8."""
    fixed = job(8, RequestShape(nodes=2, per_node=4))
    nodes = nodes_with([8, 4, 5, 3])
    placement = best_placement(fixed, nodes, [A100], SPEED)
    assert placement is not None and placement.node_counts == {"n1": 4, "n2": 4}
    assert best_placement(fixed, nodes_with([8, 3, 3]), [A100], SPEED) is None
    assert FreeCapacity(nodes).fits([A100], fixed)
    assert not FreeCapacity(nodes_with([8, 3, 3])).fits([A100], fixed)
    # on one node it would be faster, but the request says two
    assert placement.iteration_time_s >= best_placement(job(8), nodes, [A100], SPEED).iteration_time_s


def test_alpha_min_is_the_shape_alpha_and_inf_when_the_shape_cannot_fit() -> None:
    nodes = nodes_with([8, 8, 8])
    assert math.isinf(alpha_min_s(job(16, RequestShape(nodes=1, per_node=16)), [A100], nodes, SPEED))
    assert math.isinf(alpha_min_s(job(32, t=4), [A100], nodes, SPEED))  # 4 x 8 on three nodes
    fixed = job(8, RequestShape(nodes=2, per_node=4), t=4)
    placement = best_placement(fixed, nodes, [A100], SPEED)
    assert alpha_min_s(fixed, [A100], nodes, SPEED) == pytest.approx(placement.iteration_time_s)
    # the spread job's ideal is the usual one (one node of 8)
    assert alpha_min_s(job(8, SPREAD, t=4), [A100], nodes, SPEED) == pytest.approx(
        best_placement(job(8, t=4), nodes, [A100], SPEED).iteration_time_s)


def test_free_capacity_fits_follows_takes() -> None:
    free = FreeCapacity(nodes_with([8, 8]))
    wide = job(16)
    assert free.fits([A100], wide)
    free.take(Placement(job_id="x", partition="a100", worker_nodes=("n0",), iteration_time_s=1.0))
    assert not free.fits([A100], wide) and free.fits([A100], job(8))
    free.give({"n0": 1})
    assert free.fits([A100], wide)


def test_reservation_waits_for_the_shape_not_just_the_count() -> None:
    """Three 8-GPU nodes; a 2 x 8 head. At t=10, 16 are free (4 + 4 + 8) but only one whole
    node; at t=20 n0 is whole again: the head's reserved start is t=20, not t=10."""
    def running(job_id: str, node: str, count: int, end_s: float) -> RunningJob:
        return RunningJob(job=flat_job(job_id, count, end_s),
                          placement=Placement(job_id=job_id, partition="gpu", worker_nodes=(node,) * count,
                                              iteration_time_s=1.0), start_time_s=0.0)
    nodes = nodes_with([0, 4, 8], FLAT)
    snapshot = ClusterSnapshot(partitions=(FLAT,), nodes=nodes, pending=(), running=(
        running("r1", "n0", 4, 10.0), running("r3", "n0", 4, 20.0), running("r2", "n1", 4, 20.0)))
    head = flat_job("head", 16, 5.0)
    speed = flat_speed_table()
    reservation, _ = _reserve(head, snapshot, FreeCapacity(nodes), [], 0.0, speed,
                              lambda j, a: (j.predicted_iterations or 0.0) * a)
    assert reservation is not None and reservation.start_s == 20.0
    assert reservation.partition == "gpu"
    spread_head = flat_job("head2", 16, 5.0, request_shape=SPREAD)
    reservation, _ = _reserve(spread_head, snapshot, FreeCapacity(nodes), [], 0.0, speed,
                              lambda j, a: (j.predicted_iterations or 0.0) * a)
    assert reservation is not None and reservation.start_s == 10.0


# -- the same placement options for every policy (issue 14 item 5) -----------------------------


@pytest.mark.parametrize("name, mode", [("fifo", "strict"), ("multifactor", "backfill"), ("tiresias", "greedy")])
def test_baselines_may_get_the_comm_heavy_hold(name: str, mode: str) -> None:
    """A spread 8-wide TP job on 4 + 4 free: by default a baseline starts it split (as Slurm
    would); with ``baseline_comm_heavy_hold`` it is held as A-SRPT holds it, in its own mode."""
    from asrpt.core.policies import ASRPTOptions, make_policy

    snapshot = ClusterSnapshot(partitions=(A100,), nodes=nodes_with([4, 4]),
                               pending=(job(8, SPREAD, t=8, cls="resnet50"),))
    plain = make_policy(name, SPEED)
    assert plain.options.comm_heavy_tau == 0.0
    assert [p.job_id for p in plain.decide(snapshot, 0.0, plain.new_state()).starts] == ["j"]
    asrpt_options = ASRPTOptions(dispatch=DispatchOptions(comm_heavy_ratio=1.2, comm_heavy_tau=0.3))
    holding = make_policy(name, SPEED, asrpt_options, baseline_comm_heavy_hold=True)
    assert (holding.options.mode, holding.options.comm_heavy_ratio, holding.options.comm_heavy_tau) == (mode, 1.2, 0.3)
    decision = holding.decide(snapshot, 0.0, holding.new_state())
    assert decision.starts == () and decision.holds == ("j",)
