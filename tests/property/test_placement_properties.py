"""Properties of Heavy-Edge placement on fragmented random heterogeneous clusters.

The jobs here are spread requests (``--gpus``), the only ones Heavy-Edge's free-form search
serves; shaped requests are in test_shape_properties.py."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.comm import cut_weight_gb, ideal_iteration_time_s, iteration_time_s
from asrpt.core.model import SPREAD, Job, Node, ParallelConfig, Partition
from asrpt.core.placement import PlacementMemo, alpha_min_s, best_placement, heavy_edge_place
from asrpt.core.speed import default_speed_table

SPEED = default_speed_table().with_relative_speed("npu-910b", 1.3, "a100")
ACCELERATORS = ("a100", "v100", "t4", "npu-910b", "unknown-x")  # the last is not in the table
CLASSES = ("bert", "resnet50", "transformer", "lm", "ncf")


@dataclass(frozen=True)
class Cluster:
    partitions: tuple[Partition, ...]
    nodes: tuple[Node, ...]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n_parts = draw(st.integers(1, 3))
    partitions, nodes = [], []
    for i in range(n_parts):
        acc = draw(st.sampled_from(ACCELERATORS))
        intra = draw(st.sampled_from([50.0, 150.0, 300.0]))
        inter = draw(st.sampled_from([3.0, 12.5, 25.0]))
        part = Partition(name=f"p{i}", accelerator=acc, intra_node_gbps=intra, inter_node_gbps=inter)
        partitions.append(part)
        for j in range(draw(st.integers(1, 8))):
            total = draw(st.sampled_from([1, 2, 4, 8]))
            free = draw(st.integers(0, total))
            nodes.append(Node(name=f"p{i}n{j}", partition=part.name, accelerator=acc,
                              accelerators_total=total, accelerators_free=free))
    order = draw(st.permutations(nodes))
    return Cluster(tuple(partitions), tuple(order))


@st.composite
def jobs(draw: st.DrawFn, n_partitions: int = 3) -> Job:
    while True:
        d, p, t = draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4, 8]))
        if d * p * t <= 32:
            break
    allowed = draw(st.one_of(st.just(()), st.lists(st.sampled_from([f"p{i}" for i in range(n_partitions)]),
                                                   min_size=1, max_size=2, unique=True).map(tuple)))
    return Job(job_id="j", submit_time_s=0.0, workload_class=draw(st.sampled_from(CLASSES)),
               parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=draw(st.integers(1, 8))),
               allowed_partitions=allowed, request_shape=SPREAD)


def usable(job: Job, cluster: Cluster) -> list[Partition]:
    return [p for p in cluster.partitions if job.allows(p) and SPEED.knows(p.accelerator)]


def free_total(cluster: Cluster, partition: Partition) -> int:
    return sum(n.accelerators_free for n in cluster.nodes if n.partition == partition.name)


@settings(max_examples=100, deadline=None)
@given(cluster=clusters(), job=jobs())
def test_best_placement_is_valid_gang_and_allowed(cluster: Cluster, job: Job) -> None:
    placement = best_placement(job, cluster.nodes, cluster.partitions, SPEED)
    candidates = usable(job, cluster)
    if placement is None:
        # None only when no usable partition has enough free accelerators (Heavy-Edge always completes otherwise).
        assert all(free_total(cluster, p) < job.accelerators for p in candidates)
        return
    part = next(p for p in cluster.partitions if p.name == placement.partition)
    assert part in candidates
    assert len(placement.worker_nodes) == job.accelerators
    by_name = {n.name: n for n in cluster.nodes}
    for name, count in placement.node_counts.items():
        assert by_name[name].partition == part.name
        assert count <= by_name[name].accelerators_free
    assert placement.iteration_time_s == iteration_time_s(job, placement.worker_nodes, part, SPEED)
    assert abs(placement.cut_gb - cut_weight_gb(job, placement.worker_nodes, SPEED)) <= 1e-9
    assert placement.iteration_time_s >= alpha_min_s(job, cluster.partitions, cluster.nodes, SPEED) * (1 - 1e-12)
    # nothing allowed is faster (ties allowed): best over partitions
    for other in candidates:
        alt = heavy_edge_place(job, cluster.nodes, other, SPEED)
        if alt is not None:
            assert placement.iteration_time_s <= alt.iteration_time_s


@settings(max_examples=100, deadline=None)
@given(cluster=clusters(), job=jobs())
def test_heavy_edge_per_partition(cluster: Cluster, job: Job) -> None:
    for part in cluster.partitions:
        if not SPEED.knows(part.accelerator):
            continue
        placement = heavy_edge_place(job, cluster.nodes, part, SPEED)
        free = [n for n in cluster.nodes if n.partition == part.name]
        if placement is None:
            assert sum(n.accelerators_free for n in free) < job.accelerators
            assert all(n.accelerators_free < job.accelerators for n in free)
            continue
        assert placement.partition == part.name
        free_by_name = {n.name: n.accelerators_free for n in free}
        assert len(placement.worker_nodes) == job.accelerators
        assert all(count <= free_by_name.get(name, 0) for name, count in placement.node_counts.items())
        if any(n.accelerators_free >= job.accelerators for n in free):
            assert len(placement.node_counts) == 1 and placement.cut_gb == 0.0
        largest = max(n.accelerators_total for n in free)
        assert placement.iteration_time_s >= ideal_iteration_time_s(job, part, largest, SPEED) * (1 - 1e-12)
        # the alpha-aware default tries the bytes order first, so it is never slower than it
        bytes_only = heavy_edge_place(job, cluster.nodes, part, SPEED, alpha_aware=False)
        assert bytes_only is not None
        assert placement.iteration_time_s <= bytes_only.iteration_time_s


@settings(max_examples=40, deadline=None)
@given(cluster=clusters(), job=jobs(), factor=st.floats(1.0, 10.0))
def test_faster_accelerator_never_larger_alpha(cluster: Cluster, job: Job, factor: float) -> None:
    part = cluster.partitions[0]
    if not SPEED.knows(part.accelerator):
        return
    placement = heavy_edge_place(job, cluster.nodes, part, SPEED)
    if placement is None:
        return
    faster = SPEED.with_relative_speed("faster-y", factor, part.accelerator)
    quick = Partition(name=part.name, accelerator="faster-y", intra_node_gbps=part.intra_node_gbps,
                      inter_node_gbps=part.inter_node_gbps)
    assert iteration_time_s(job, placement.worker_nodes, quick, faster) <= placement.iteration_time_s


@settings(max_examples=100, deadline=None)
@given(clusters_in_turn=st.lists(clusters(), min_size=1, max_size=5), job=jobs(), data=st.data())
def test_placement_memo_changes_no_answer(clusters_in_turn: list[Cluster], job: Job, data: st.DataObject) -> None:
    """One caller's PlacementMemo, handed node tuples in turn (other clusters, the same nodes
    with other free counts, the very tuple again), gives the answers worked out afresh."""
    memo = PlacementMemo()
    for cluster in clusters_in_turn:
        refreed = tuple(Node(name=n.name, partition=n.partition, accelerator=n.accelerator,
                             accelerators_total=n.accelerators_total,
                             accelerators_free=data.draw(st.integers(0, n.accelerators_total)))
                        for n in cluster.nodes)
        for nodes in (cluster.nodes, refreed, refreed, cluster.nodes):
            assert best_placement(job, nodes, cluster.partitions, SPEED, memo=memo) == \
                best_placement(job, nodes, cluster.partitions, SPEED)
            assert alpha_min_s(job, cluster.partitions, nodes, SPEED, memo) == \
                alpha_min_s(job, cluster.partitions, nodes, SPEED)
