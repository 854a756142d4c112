"""Job graph and the pipeline model alpha(x) (papers.md A.6/A.7, reconstructed)."""

from __future__ import annotations

import itertools
from math import comb

import networkx as nx
import pytest

from asrpt.core.comm import (
    cut_weight_gb,
    ideal_iteration_time_s,
    iteration_time_s,
    job_graph,
    single_node_iteration_time_s,
)
from asrpt.core.model import Job, ParallelConfig, Partition
from asrpt.core.speed import SpeedTable, default_speed_table

A100 = Partition(name="a100", accelerator="a100", intra_node_gbps=150.0, inter_node_gbps=12.5)
V100 = Partition(name="v100", accelerator="v100", intra_node_gbps=150.0, inter_node_gbps=12.5)


@pytest.fixture(scope="module")
def speed() -> SpeedTable:
    return default_speed_table()


def make_job(d: int = 1, p: int = 1, t: int = 1, m: int = 1, cls: str = "bert") -> Job:
    return Job(job_id=f"j{d}{p}{t}{m}", submit_time_s=0.0, workload_class=cls,
               parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=m))


def wid(r: int, k: int, j: int, p: int, t: int) -> int:
    return (r * p + k) * t + j


@pytest.mark.parametrize(("d", "p", "t"), [(1, 1, 1), (1, 1, 8), (2, 1, 1), (3, 1, 1), (4, 2, 2), (2, 4, 1), (1, 3, 4)])
def test_graph_structure(speed: SpeedTable, d: int, p: int, t: int) -> None:
    graph = job_graph(make_job(d, p, t, m=4), speed)
    kinds = [k for _, _, k in graph.edges(data="kind")]
    dp_edges = 0 if d == 1 else (1 if d == 2 else d) * p * t
    assert graph.number_of_nodes() == d * p * t
    assert kinds.count("tp") == d * p * comb(t, 2)
    assert kinds.count("pp") == d * t * (p - 1)
    assert kinds.count("dp") == dp_edges
    for r, k, j in itertools.product(range(d), range(p - 1), range(t)):
        assert graph.edges[wid(r, k, j, p, t), wid(r, k + 1, j, p, t)]["kind"] == "pp"
    if d * p * t > 1:
        assert nx.is_connected(graph)


def test_edge_weights_follow_the_model(speed: SpeedTable) -> None:
    d, p, t, m = 2, 2, 4, 4
    prof = speed.profile("bert")
    graph = job_graph(make_job(d, p, t, m), speed)
    assert graph.edges[0, 1]["weight_gb"] == pytest.approx(2 * m * (prof.tp_allreduce_gb_per_microbatch / p) / t)
    assert graph.edges[wid(0, 0, 0, p, t), wid(0, 1, 0, p, t)]["weight_gb"] == pytest.approx(
        2 * m * prof.activation_gb_per_microbatch / t)
    assert graph.edges[wid(0, 0, 0, p, t), wid(1, 0, 0, p, t)]["weight_gb"] == pytest.approx(
        2 * (d - 1) / d * (prof.params_gb / p) / t)
    # Typical ordering for a transformer: TP >> PP > DP per edge.
    w = {k: graph.edges[e]["weight_gb"] for e, k in
         [((0, 1), "tp"), ((wid(0, 0, 0, p, t), wid(0, 1, 0, p, t)), "pp"), ((0, wid(1, 0, 0, p, t)), "dp")]}
    assert w["tp"] > w["pp"]


def test_graph_is_cached_and_frozen(speed: SpeedTable) -> None:
    a = job_graph(make_job(2, 1, 4), speed)
    b = job_graph(Job(job_id="other", submit_time_s=5.0, workload_class="BERT",
                      parallel=ParallelConfig(data=2, tensor=4)), speed)
    assert a is b
    with pytest.raises(nx.NetworkXError):
        a.add_edge(0, 99)


@pytest.mark.parametrize("m", [1, 4])
def test_one_worker_is_m_steps(speed: SpeedTable, m: int) -> None:
    job = make_job(m=m, cls="resnet50")
    assert iteration_time_s(job, ["n1"], V100, speed) == pytest.approx(m * speed.step_time_s("resnet50", "v100"))


def test_tp8_on_one_node_is_ideal_and_closed_form(speed: SpeedTable) -> None:
    job = make_job(t=8, m=2)
    prof = speed.profile("bert")
    c = speed.step_time_s("bert", "a100") / 8
    expected = 2 * (c + 2 * 7 / 8 * prof.tp_allreduce_gb_per_microbatch / 150.0)
    alpha = iteration_time_s(job, ["n1"] * 8, A100, speed)
    assert alpha == pytest.approx(expected)
    assert alpha == ideal_iteration_time_s(job, A100, 8, speed)
    assert cut_weight_gb(job, ["n1"] * 8, speed) == 0.0


@pytest.mark.parametrize(
    ("d", "p", "t", "split"),
    [
        (1, 1, 8, ["a"] * 4 + ["b"] * 4),  # TP group split
        (2, 1, 4, ["a"] * 4 + ["b"] * 4),  # one replica per node: DP ring spans
        (1, 2, 4, ["a"] * 4 + ["b"] * 4),  # one stage per node: PP spans
    ],
)
def test_split_across_two_nodes_is_slower(speed: SpeedTable, d: int, p: int, t: int, split: list[str]) -> None:
    job = make_job(d, p, t, m=4)
    one = iteration_time_s(job, ["a"] * 8, A100, speed)
    two = iteration_time_s(job, split, A100, speed)
    assert two > one
    assert cut_weight_gb(job, split, speed) > 0


def test_pp_cut_is_cheaper_than_tp_cut(speed: SpeedTable) -> None:
    job = make_job(p=2, t=4, m=4)
    pp_cut = ["a"] * 4 + ["b"] * 4  # stage 0 on a, stage 1 on b
    tp_cut = ["a", "a", "b", "b"] * 2  # every TP group straddles a and b
    assert iteration_time_s(job, pp_cut, A100, speed) < iteration_time_s(job, tp_cut, A100, speed)
    assert cut_weight_gb(job, pp_cut, speed) < cut_weight_gb(job, tp_cut, speed)


@pytest.mark.parametrize("workers", [["a"] * 8, ["a"] * 4 + ["b"] * 4, ["a", "b"] * 4])
def test_faster_accelerator_gives_smaller_alpha(speed: SpeedTable, workers: list[str]) -> None:
    job = make_job(2, 2, 2, m=4, cls="transformer")
    assert iteration_time_s(job, workers, A100, speed) < iteration_time_s(job, workers, V100, speed)
    npu = speed.with_relative_speed("npu-910b", 1.5, "a100")
    npu_part = Partition(name="npu", accelerator="NPU-910B", intra_node_gbps=150.0,
                         inter_node_gbps=12.5)
    assert iteration_time_s(job, workers, npu_part, npu) < iteration_time_s(job, workers, A100, npu)


def test_spread_placement_equals_one_node_when_links_are_equal(speed: SpeedTable) -> None:
    flat = Partition(name="flat", accelerator="a100", intra_node_gbps=50.0, inter_node_gbps=50.0)
    job = make_job(2, 2, 2, m=3)
    assert iteration_time_s(job, ["a", "b", "c", "d", "a", "b", "c", "d"], flat, speed) == pytest.approx(
        single_node_iteration_time_s(job, flat, speed))


def test_wrong_worker_count_is_an_error(speed: SpeedTable) -> None:
    with pytest.raises(ValueError, match="worker nodes"):
        iteration_time_s(make_job(t=4), ["a"] * 3, A100, speed)
    with pytest.raises(ValueError):
        ideal_iteration_time_s(make_job(t=4), A100, 0, speed)


def test_ideal_for_two_replicas_of_eight_is_one_replica_per_node(speed: SpeedTable) -> None:
    job = make_job(d=2, t=8, m=2)
    by_replica = ["a"] * 8 + ["b"] * 8
    assert ideal_iteration_time_s(job, A100, 8, speed) == pytest.approx(iteration_time_s(job, by_replica, A100, speed))
    assert ideal_iteration_time_s(job, A100, 16, speed) == single_node_iteration_time_s(job, A100, speed)


def _set_partitions(n: int, cap: int):
    """Every placement of n workers on interchangeable nodes of size cap, as node labels."""
    def rec(i: int, labels: list[int], sizes: list[int]):
        if i == n:
            yield list(labels)
            return
        for s in range(len(sizes) + 1):
            if s == len(sizes):
                sizes.append(0)
            if sizes[s] < cap:
                sizes[s] += 1
                labels.append(s)
                yield from rec(i + 1, labels, sizes)
                labels.pop()
                sizes[s] -= 1
            if sizes[-1] == 0:
                sizes.pop()
    yield from rec(0, [], [])


@pytest.mark.parametrize(
    ("d", "p", "t", "cls"),
    [(2, 1, 3, "bert"), (1, 2, 3, "resnet50"), (3, 2, 1, "bert"), (2, 3, 1, "resnet50"), (1, 3, 2, "bert"),
     (1, 3, 2, "resnet50"), (2, 2, 2, "bert"), (1, 1, 6, "lm"), (6, 1, 1, "lm"), (1, 2, 4, "transformer"),
     (3, 1, 2, "transformer")],
)
@pytest.mark.parametrize("cap", [2, 3, 4])
def test_ideal_is_the_exact_minimum(speed: SpeedTable, d: int, p: int, t: int, cap: int, cls: str) -> None:
    """Brute force over every placement on interchangeable nodes of size ``cap``."""
    job = make_job(d, p, t, m=3, cls=cls)
    g = d * p * t
    brute = min(iteration_time_s(job, [f"n{s}" for s in labels], A100, speed) for labels in _set_partitions(g, cap))
    assert ideal_iteration_time_s(job, A100, cap, speed) == pytest.approx(brute, rel=1e-12)
