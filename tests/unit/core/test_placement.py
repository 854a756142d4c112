"""Heavy-Edge placement, partition choice, alpha_min and the ILP reference."""

from __future__ import annotations

import math
import random

import networkx as nx
import pytest

from asrpt.core import comm
from asrpt.core.comm import cut_weight_gb, ideal_iteration_time_s, iteration_time_s, single_node_iteration_time_s
from asrpt.core.model import SPREAD, Job, Node, ParallelConfig, Partition
from asrpt.core.placement import alpha_min_s, best_placement, heavy_edge_place
from asrpt.core.placement_ilp import ilp_place
from asrpt.core.speed import SpeedTable, default_speed_table

A100 = Partition(name="a100", accelerator="a100")
V100 = Partition(name="v100", accelerator="V100M32")


@pytest.fixture(scope="module")
def speed() -> SpeedTable:
    return default_speed_table()


def make_job(d: int = 1, p: int = 1, t: int = 1, m: int = 4, cls: str = "bert", **kw) -> Job:
    """A spread (``--gpus``) job by default: these tests exercise Heavy-Edge's free-form search,
    which only a spread request gets; shaped requests are in tests/unit/core/test_shapes.py."""
    kw.setdefault("request_shape", SPREAD)
    return Job(job_id="j", submit_time_s=0.0, workload_class=cls,
               parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=m), **kw)


def make_nodes(frees: list[int], partition: Partition = A100, total: int = 8, prefix: str = "") -> list[Node]:
    prefix = prefix or partition.name
    return [Node(name=f"{prefix}-{i:02d}", partition=partition.name, accelerator=partition.accelerator,
                 accelerators_total=max(total, f), accelerators_free=f) for i, f in enumerate(frees)]


def assert_valid(placement, job: Job, nodes: list[Node], speed: SpeedTable, partition: Partition) -> None:
    free = {n.name: n.accelerators_free for n in nodes if n.partition == partition.name}
    assert len(placement.worker_nodes) == job.accelerators
    for name, count in placement.node_counts.items():
        assert count <= free[name]
    assert placement.iteration_time_s == pytest.approx(iteration_time_s(job, placement.worker_nodes, partition, speed))
    assert placement.cut_gb == pytest.approx(cut_weight_gb(job, placement.worker_nodes, speed))


@pytest.mark.parametrize(
    ("frees", "g", "expected"),
    [
        ([8, 4, 6], 4, "a100-01"),  # smallest sufficient free count
        ([8, 6, 6], 5, "a100-01"),  # tie on free count: name
        ([8, 2, 3], 8, "a100-00"),
        ([1, 1, 1, 1], 1, "a100-00"),
    ],
)
def test_single_node_best_fit(speed: SpeedTable, frees: list[int], g: int, expected: str) -> None:
    job = make_job(t=g)
    placement = heavy_edge_place(job, make_nodes(frees), A100, speed)
    assert placement is not None
    assert set(placement.worker_nodes) == {expected}
    assert placement.cut_gb == 0.0
    assert placement.iteration_time_s == single_node_iteration_time_s(job, A100, speed)


def test_fast_paths_build_no_graph(speed: SpeedTable, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("networkx used on a fast path")

    monkeypatch.setattr(nx, "Graph", boom)
    monkeypatch.setattr(comm.nx, "Graph", boom)
    nodes = make_nodes([8, 8, 3]) + make_nodes([4], V100)
    for job in (make_job(), make_job(t=8), make_job(2, 2, 2)):
        assert heavy_edge_place(job, nodes, A100, speed) is not None
        assert best_placement(job, nodes, [A100, V100], speed) is not None
        assert alpha_min_s(job, [A100, V100], nodes, speed) < math.inf
    # multi-node Heavy-Edge works on the cached edge list, not on networkx either
    assert heavy_edge_place(make_job(4, 1, 4), make_nodes([8, 8, 3]), A100, speed) is not None


def test_tp8_on_free_8gpu_node_has_no_cut_and_is_ideal(speed: SpeedTable) -> None:
    job = make_job(t=8)
    placement = heavy_edge_place(job, make_nodes([3, 8, 5]), A100, speed)
    assert placement is not None and placement.cut_gb == 0.0
    assert placement.iteration_time_s == ideal_iteration_time_s(job, A100, 8, speed)


@pytest.mark.parametrize(
    ("d", "p", "t", "frees", "uncut_kind"),
    [
        (2, 1, 4, [4, 4], "tp"),  # replicas stay whole, DP ring crosses
        (1, 2, 4, [4, 4], "tp"),  # stages stay whole, PP crosses
        (2, 2, 4, [8, 8], "tp"),
        (4, 1, 2, [2, 2, 2, 2], "tp"),
    ],
)
def test_multi_node_keeps_heavy_groups_whole(speed: SpeedTable, d: int, p: int, t: int, frees: list[int],
                                             uncut_kind: str) -> None:
    job = make_job(d, p, t)
    nodes = make_nodes(frees)
    placement = heavy_edge_place(job, nodes, A100, speed)
    assert placement is not None
    assert_valid(placement, job, nodes, speed, A100)
    graph = comm.job_graph(job, speed)
    where = placement.worker_nodes
    assert all(where[u] == where[v] for u, v, k in graph.edges(data="kind") if k == uncut_kind)
    assert placement.iteration_time_s == pytest.approx(ideal_iteration_time_s(job, A100, max(frees), speed))


def test_alpha_aware_keeps_tp_whole_when_the_dp_ring_must_span_anyway(speed: SpeedTable) -> None:
    # lm with one micro-batch: a DP edge carries more bytes than a TP edge, so the bytes order
    # glues DP rings first; a ring of 8 cannot fit in 7 free GPUs, so it spans anyway, and the
    # TP pairs it tore apart make alpha pay for TP across nodes as well.
    job = make_job(d=8, t=2, m=1, cls="lm")
    nodes = make_nodes([7, 5, 3, 7, 7])
    aware = heavy_edge_place(job, nodes, A100, speed)
    bytes_only = heavy_edge_place(job, nodes, A100, speed, alpha_aware=False)
    assert aware is not None and bytes_only is not None
    where = aware.worker_nodes
    assert all(where[2 * r] == where[2 * r + 1] for r in range(8))  # every TP pair whole
    assert aware.iteration_time_s < bytes_only.iteration_time_s
    assert aware.iteration_time_s == pytest.approx(ilp_place(job, nodes, A100, speed, objective="alpha").iteration_time_s)


def test_split_is_slower_than_one_node(speed: SpeedTable) -> None:
    job = make_job(t=8)
    split = heavy_edge_place(job, make_nodes([4, 4]), A100, speed)
    whole = heavy_edge_place(job, make_nodes([8]), A100, speed)
    assert split is not None and whole is not None
    assert split.iteration_time_s > whole.iteration_time_s and split.cut_gb > 0


@pytest.mark.parametrize(
    ("frees", "g"),
    [([3, 3], 7), ([0, 0, 8], 9), ([], 1)],
)
def test_gang_none_when_too_few_free(speed: SpeedTable, frees: list[int], g: int) -> None:
    assert heavy_edge_place(make_job(d=g), make_nodes(frees), A100, speed) is None


def test_other_partitions_and_full_nodes_are_ignored(speed: SpeedTable) -> None:
    nodes = make_nodes([0, 2], A100) + make_nodes([8], V100)
    assert heavy_edge_place(make_job(d=4), nodes, A100, speed) is None
    placement = heavy_edge_place(make_job(d=2), nodes, A100, speed)
    assert placement is not None and placement.worker_nodes == ("a100-01", "a100-01")


def test_never_oversubscribes_awkward_capacities(speed: SpeedTable) -> None:
    job = make_job(3, 2, 2)
    nodes = make_nodes([5, 4, 3, 2, 1, 3])
    placement = heavy_edge_place(job, nodes, A100, speed)
    assert placement is not None
    assert_valid(placement, job, nodes, speed, A100)


def test_best_placement_prefers_the_faster_accelerator(speed: SpeedTable) -> None:
    nodes = make_nodes([8], V100) + make_nodes([8], A100)
    placement = best_placement(make_job(t=4), nodes, [V100, A100], speed)
    assert placement is not None and placement.partition == "a100"


def test_best_placement_prefers_one_fast_node_over_a_spread(speed: SpeedTable) -> None:
    nodes = make_nodes([4, 4], A100) + make_nodes([8], V100)
    placement = best_placement(make_job(t=8), nodes, [A100, V100], speed)
    assert placement is not None and placement.partition == "v100"


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"allowed_partitions": ("v100",)}, "v100"),
        ({"allowed_accelerators": ("V100M32",)}, "v100"),
        ({"allowed_accelerators": ("a100",)}, "a100"),
        ({"allowed_partitions": ("nope",)}, None),
    ],
)
def test_best_placement_respects_allowed(speed: SpeedTable, kw: dict, expected: str | None) -> None:
    nodes = make_nodes([8], V100) + make_nodes([8], A100)
    placement = best_placement(make_job(t=2, **kw), nodes, [V100, A100], speed)
    assert (placement.partition if placement else None) == expected


def test_best_placement_skips_unknown_accelerators(speed: SpeedTable) -> None:
    npu = Partition(name="npu", accelerator="npu-910b")
    nodes = make_nodes([8], npu) + make_nodes([2], V100)
    assert best_placement(make_job(t=4), nodes, [npu, V100], speed) is None
    fast = speed.with_relative_speed("npu-910b", 3.0, "v100")
    placement = best_placement(make_job(t=4), nodes, [npu, V100], fast)
    assert placement is not None and placement.partition == "npu"


def test_best_placement_tie_goes_to_partition_name(speed: SpeedTable) -> None:
    b = Partition(name="b", accelerator="a100")
    a = Partition(name="a", accelerator="a100")
    nodes = make_nodes([8], b) + make_nodes([8], a)
    placement = best_placement(make_job(t=4), nodes, [b, a], speed)
    assert placement is not None and placement.partition == "a"


def test_alpha_min(speed: SpeedTable) -> None:
    nodes = make_nodes([0, 0], A100, total=8) + make_nodes([4], V100, total=4)
    job = make_job(t=8)
    assert alpha_min_s(job, [A100, V100], nodes, speed) == ideal_iteration_time_s(job, A100, 8, speed)
    only_v100 = make_job(t=8, allowed_partitions=("v100",))
    assert alpha_min_s(only_v100, [A100, V100], nodes, speed) == math.inf  # 4 V100s can never hold it
    assert alpha_min_s(make_job(t=32), [A100, V100], nodes, speed) == math.inf
    assert alpha_min_s(make_job(t=16), [A100, V100], nodes, speed) == ideal_iteration_time_s(
        make_job(t=16), A100, 8, speed)


# -- ILP reference ---------------------------------------------------------------------------

EASY = [
    (1, 1, 8, [8, 8]),
    (1, 1, 8, [4, 4]),
    (2, 1, 4, [4, 4, 2]),
    (1, 2, 4, [4, 4]),
    (2, 2, 2, [4, 4]),
    (4, 1, 2, [2, 2, 2, 2]),
    (1, 1, 4, [3, 1, 2]),
]


@pytest.mark.parametrize(("d", "p", "t", "frees"), EASY)
def test_ilp_and_heavy_edge_agree_on_easy_cases(speed: SpeedTable, d: int, p: int, t: int, frees: list[int]) -> None:
    job = make_job(d, p, t)
    nodes = make_nodes(frees)
    he = heavy_edge_place(job, nodes, A100, speed)
    ilp = ilp_place(job, nodes, A100, speed)
    assert he is not None and ilp is not None
    assert_valid(ilp, job, nodes, speed, A100)
    assert he.cut_gb == pytest.approx(ilp.cut_gb, rel=1e-6, abs=1e-9)
    assert he.iteration_time_s == pytest.approx(ilp.iteration_time_s, rel=1e-9)


def _random_cases(n: int, seed: int) -> list[tuple[int, int, int, list[int]]]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        d, p, t = rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 2, 4])
        g = d * p * t
        if not 2 <= g <= 8:
            continue
        frees = [rng.randint(1, 4) for _ in range(rng.randint(2, 4))]
        if sum(frees) >= g and max(frees) < g:
            cases.append((d, p, t, frees))
    return cases


@pytest.mark.parametrize(("d", "p", "t", "frees"), _random_cases(10, seed=7))
def test_heavy_edge_never_beats_the_ilp(speed: SpeedTable, d: int, p: int, t: int, frees: list[int]) -> None:
    job = make_job(d, p, t, cls="transformer")
    nodes = make_nodes(frees, total=4)
    he = heavy_edge_place(job, nodes, A100, speed)
    by_cut = ilp_place(job, nodes, A100, speed, objective="cut")
    by_alpha = ilp_place(job, nodes, A100, speed, objective="alpha")
    assert he is not None and by_cut is not None and by_alpha is not None
    for placement in (by_cut, by_alpha):
        assert_valid(placement, job, nodes, speed, A100)
    assert he.cut_gb >= by_cut.cut_gb - 1e-9
    assert he.iteration_time_s >= by_alpha.iteration_time_s * (1 - 1e-9)


def test_ilp_edge_cases(speed: SpeedTable) -> None:
    assert ilp_place(make_job(d=4), make_nodes([1, 2]), A100, speed) is None
    single = ilp_place(make_job(t=4), make_nodes([8, 4]), A100, speed)
    assert single is not None and set(single.worker_nodes) == {"a100-01"}
    with pytest.raises(ValueError, match="objective"):
        ilp_place(make_job(t=2), make_nodes([1, 1]), A100, speed, objective="jct")


@pytest.mark.parametrize(
    ("d", "p", "t", "cls", "m"),
    [(2, 1, 8, "transformer", 1), (4, 2, 2, "transformer", 4), (2, 2, 4, "bert", 4), (1, 4, 4, "bert", 1),
     (8, 1, 2, "lm", 1), (3, 2, 2, "lm", 4), (1, 3, 4, "resnet50", 2), (2, 4, 1, "lm", 4), (3, 1, 8, "bert", 1)],
)
@pytest.mark.parametrize("size", [2, 4, 8])
def test_heavy_edge_on_empty_nodes_versus_the_ideal(speed: SpeedTable, d: int, p: int, t: int, cls: str, m: int,
                                                    size: int) -> None:
    """With plenty of empty nodes Heavy-Edge reaches the exact ideal; with just one spare node it
    may not (the ideal may need more nodes), but it never goes below it."""
    job = make_job(d, p, t, m=m, cls=cls)
    g = d * p * t
    ideal = ideal_iteration_time_s(job, A100, size, speed)
    plenty = heavy_edge_place(job, make_nodes([size] * g, total=size), A100, speed)
    assert plenty is not None and plenty.iteration_time_s == pytest.approx(ideal)
    tight = heavy_edge_place(job, make_nodes([size] * (-(-g // size) + 1), total=size), A100, speed)
    assert tight is not None and tight.iteration_time_s >= ideal * (1 - 1e-12)
