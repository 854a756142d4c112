"""Serving jobs (``#ASRPT serve-model=NAME tp=auto|N``): the plan's partition and TP degree.

The choice is a pure function of the plan, the partitions and the job; the planner adds the
files (re-read when they change) and the warnings; the last test runs a daemon cycle on a
fake Slurm and a real SQLite history.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from asrpt.core.model import ClusterSnapshot, Job, ParallelConfig
from asrpt.daemon.serving import (
    NoServingChoice,
    PartitionOption,
    ServingPlanError,
    ServingPlanner,
    ServingRequest,
    choose_serving,
    load_plan,
    parse_plan,
    partition_options,
    serving_job,
)
from tests.helpers import partition_nodes


def candidate(tp: int, gpus: int, machine_tok_s: float | None) -> dict:
    feasible = machine_tok_s is not None
    return {
        "tp": tp, "instances_per_machine": gpus // tp, "feasible": feasible,
        "reason": None if feasible else "weights do not fit", "kv_capacity_tokens": 10_000 if feasible else 0,
        "latency_source": "fitted" if feasible else None,
        "instance_tok_s": None if not feasible else machine_tok_s / (gpus // tp),
        "machine_tok_s": machine_tok_s, "static_machine_tok_s": None if not feasible else machine_tok_s / 2,
    }  # fmt: skip


def machine(accelerator: str, gpus: int, ranked: list[tuple[int, float]], infeasible: tuple[int, ...] = ()) -> dict:
    """One machine type as ``asrpt serving plan`` writes it: feasible degrees best first."""
    return {
        "machine": f"{accelerator}x{gpus}", "accelerator": accelerator, "gpus": gpus, "count": 2,
        "best_tp": ranked[0][0] if ranked else None,
        "instances_per_machine": gpus // ranked[0][0] if ranked else 0,
        "candidates": [candidate(t, gpus, tok) for t, tok in ranked] + [candidate(t, gpus, None) for t in infeasible],
    }  # fmt: skip


def plan_document(model: str = "llama2-7b", machines: list[dict] | None = None) -> dict:
    if machines is None:
        machines = [
            # per accelerator at the best degree: a100 1000, h100 1500, v100 300 tok/s
            machine("a100-80gb", 8, [(2, 8000.0), (1, 7200.0), (4, 6000.0), (8, 3000.0)]),
            machine("h100-80gb", 8, [(1, 12000.0), (2, 10000.0), (4, 8000.0), (8, 4000.0)]),
            machine("v100-32gb", 4, [(2, 1200.0), (4, 900.0)], infeasible=(1,)),
        ]
    return {"model": model, "cluster": "+".join(m["machine"] for m in machines), "machines": machines,
            "estimated_cluster_tok_s": 1.0, "sample_requests": 100}  # fmt: skip


PLAN = parse_plan(plan_document(), "plan.json")
PARTITIONS = [
    PartitionOption(name="a100", accelerator="a100", serving_accelerator="a100-80gb", gpus_per_node=8, total_accelerators=16),
    PartitionOption(name="h100", accelerator="h100", serving_accelerator="h100-80gb", gpus_per_node=8, total_accelerators=16),
    PartitionOption(name="v100", accelerator="v100", serving_accelerator="v100-32gb", gpus_per_node=4, total_accelerators=8),
    PartitionOption(name="npu", accelerator="npu", serving_accelerator="npu", gpus_per_node=8, total_accelerators=8),
]


def request(accelerators: int, *partitions: str, tensor: int | None = None, model: str = "llama-2-7b") -> ServingRequest:
    return ServingRequest(job_id="42", model=model, accelerators=accelerators, allowed_partitions=partitions, tensor=tensor)


# ---- the plan file -----------------------------------------------------------------------------------


def test_a_plan_reads_the_model_and_each_machine_types_ranking():
    assert PLAN.model == "llama2-7b" and PLAN.source == "plan.json"
    a100, h100, v100 = PLAN.machines
    assert (a100.accelerator, a100.gpus, a100.best_tp) == ("a100-80gb", 8, 2)
    assert [c.tp for c in a100.ranked] == [2, 1, 4, 8]
    assert [c.tp for c in v100.ranked] == [2, 4]  # infeasible TP 1 is not offered
    assert h100.best_tp == 1


def test_the_optimisers_own_output_is_a_valid_plan():
    """Contract with ``asrpt serving plan``: DeploymentPlan.as_dict() (through JSON) parses."""
    from asrpt.serving.cluster import Cluster, MachineType
    from asrpt.serving.deployment import plan_deployment
    from asrpt.serving.engine_config import EngineConfig
    from asrpt.serving.fitset import FitSet
    from asrpt.serving.models import get_model
    from asrpt.serving.profiles import ProfileKey
    from asrpt.serving.workload import LengthSample
    from tests.serving.helpers import latency

    fits = FitSet({ProfileKey("llama2-7b", "a100-80gb", t): latency(1.0 / s) for t, s in ((1, 1.0), (2, 2.5), (4, 3.0))})
    cluster = Cluster(machines=(MachineType(accelerator="a100-80gb", gpus=4, count=2),), engine=EngineConfig(max_num_seqs=16))
    sample = LengthSample(tuple([400, 900, 200, 1500] * 30), tuple([120, 40, 300, 60] * 30), 0, 0)
    deployment = plan_deployment(get_model("llama2-7b"), cluster, fits, sample)
    plan = parse_plan(json.loads(json.dumps(deployment.as_dict())), "written.json")
    [only] = plan.machines
    assert plan.model == "llama2-7b" and only.gpus == 4
    assert only.best_tp == deployment.machines[0].best.tp
    assert [c.tp for c in only.ranked] == [c.tp for c in deployment.machines[0].ranked()]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"machines": []}', "model must be str"),
        (b'{"model": "llama2-7b"}', "machines must be list"),
        (b'{"model": "llama2-7b", "machines": [{"accelerator": "a100", "gpus": "8", "candidates": []}]}', r"machines\[0\]: gpus must be int"),
        (json.dumps(plan_document(machines=[{**machine("a100", 8, [(2, 1.0)]), "best_tp": 4}])).encode(), "best_tp 4 is not among"),
        (json.dumps(plan_document(machines=[machine("a100", 8, [(2, -1.0)])])).encode(), "machine_tok_s must be a finite number"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_malformed_plan_is_a_clear_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "llama.json"
    path.write_bytes(content)
    with pytest.raises(ServingPlanError, match=message) as caught:
        load_plan(path)
    assert str(caught.value).startswith(f"serving plan {path}")


def test_a_missing_plan_file_names_it(tmp_path):
    with pytest.raises(ServingPlanError, match=f"serving plan {tmp_path}/absent.json: cannot read"):
        load_plan(tmp_path / "absent.json")


# ---- the choice (pure) --------------------------------------------------------------------------------


def test_tp_auto_picks_the_best_partition_per_accelerator_and_its_best_tp():
    choice = choose_serving(PLAN, PARTITIONS, request(4, "a100", "v100"))
    assert (choice.partitions, choice.accelerators) == (("a100",), ("a100",))
    assert (choice.tensor, choice.data) == (2, 2)
    assert choice.parallel == ParallelConfig(data=2, tensor=2)
    assert choice.tok_s_per_accelerator == pytest.approx(1000.0)
    assert "the plan's best" in choice.note and "a100-80gbx8" in choice.note


def test_a_job_that_may_run_anywhere_goes_to_the_best_machine_type():
    choice = choose_serving(PLAN, PARTITIONS, request(8))
    assert choice.partitions == ("h100",) and (choice.tensor, choice.data) == (1, 8)


def test_partitions_of_one_machine_type_are_all_kept():
    twin = PartitionOption(name="a100-b", accelerator="a100", serving_accelerator="a100-80gb", gpus_per_node=8, total_accelerators=8)
    choice = choose_serving(PLAN, [*PARTITIONS, twin], request(4, "a100", "a100-b", "v100"))
    assert choice.partitions == ("a100", "a100-b") and choice.accelerators == ("a100",)


def test_an_explicit_tp_is_kept_and_ranks_the_partitions_by_its_own_throughput():
    choice = choose_serving(PLAN, PARTITIONS, request(8, "a100", "v100", tensor=4))
    assert choice.partitions == ("a100",) and (choice.tensor, choice.data) == (4, 2)
    assert "as asked" in choice.note
    # TP 8 exists only on the 8-accelerator a100 machines, not on 4-accelerator v100 ones
    assert choose_serving(PLAN, PARTITIONS, request(8, "v100", "a100", tensor=8)).partitions == ("a100",)


def test_an_explicit_tp_the_plan_has_nowhere_is_still_kept():
    choice = choose_serving(PLAN, PARTITIONS, request(4, "v100", tensor=1))  # TP 1 does not fit a v100
    assert choice.partitions == ("v100",) and (choice.tensor, choice.data) == (1, 4)
    assert "tp=1 kept as asked" in choice.note


def test_an_explicit_tp_that_does_not_divide_the_gang_falls_back_to_the_plan():
    choice = choose_serving(PLAN, PARTITIONS, request(6, "a100", tensor=4))
    assert (choice.tensor, choice.data) == (2, 3)
    assert "tp=4 does not divide the job's 6 accelerators" in choice.note


def test_tp_auto_falls_back_to_the_best_ranked_degree_that_divides_the_gang():
    choice = choose_serving(PLAN, PARTITIONS, request(3, "a100"))
    assert (choice.tensor, choice.data) == (1, 3)  # best TP 2 does not divide 3; TP 1 is next
    assert "best TP 2 does not divide the job's 3 accelerators; TP 1 is the best-ranked that does" in choice.note
    big = parse_plan(plan_document("llama2-70b", [machine("a100-80gb", 8, [(4, 4000.0), (8, 3000.0), (2, 2000.0)], infeasible=(1,))]))
    assert choose_serving(big, PARTITIONS, request(6, "a100")).tensor == 2


def test_the_fallback_may_move_the_job_to_another_machine_type():
    plan = parse_plan(plan_document(machines=[
        machine("a100-80gb", 8, [(8, 16000.0)], infeasible=(1, 2, 4)),  # 2000 per accelerator, TP 8 only
        machine("v100-32gb", 4, [(2, 1200.0), (4, 900.0)]),
    ]))  # fmt: skip
    assert choose_serving(plan, PARTITIONS, request(8, "a100", "v100")).partitions == ("a100",)
    choice = choose_serving(plan, PARTITIONS, request(6, "a100", "v100"))  # 8 does not divide 6
    assert choice.partitions == ("v100",) and choice.tensor == 2


def test_no_degree_dividing_the_gang_means_no_choice():
    big = parse_plan(plan_document("llama2-70b", [machine("a100-80gb", 8, [(4, 4000.0), (8, 3000.0)], infeasible=(1, 2))]))
    with pytest.raises(NoServingChoice, match=r"no feasible TP on a100-80gbx8 \(4, 8\) divides the job's 6 accelerators"):
        choose_serving(big, PARTITIONS, request(6, "a100"))


def test_partitions_outside_the_plan_or_too_small_are_not_chosen():
    with pytest.raises(NoServingChoice, match=r"npu \(npu\) is not a machine type of the plan"):
        choose_serving(PLAN, PARTITIONS, request(4, "npu"))
    with pytest.raises(NoServingChoice, match="v100 has only 8 accelerators"):
        choose_serving(PLAN, PARTITIONS, request(12, "v100"))
    with pytest.raises(NoServingChoice, match="is in the daemon's layout"):
        choose_serving(PLAN, PARTITIONS, request(4, "elsewhere"))


def test_the_machine_type_with_the_partitions_node_size_is_preferred():
    plan = parse_plan(plan_document(machines=[
        machine("a100-80gb", 8, [(1, 8000.0)]),
        machine("a100-80gb", 4, [(2, 3000.0), (1, 2000.0)]),
    ]))  # fmt: skip
    four = PartitionOption(name="a100", accelerator="a100", serving_accelerator="a100-80gb", gpus_per_node=4)
    choice = choose_serving(plan, [four], request(4))
    assert (choice.machine, choice.tensor) == ("a100-80gbx4", 2)
    unknown_size = PartitionOption(name="a100", accelerator="a100", serving_accelerator="a100-80gb")
    assert choose_serving(plan, [unknown_size], request(4)).machine == "a100-80gbx8"  # best per accelerator


def test_partition_options_come_from_the_snapshot_and_the_overrides():
    a100, a100_nodes = partition_nodes("a100", "a100", count=2, per_node=8)
    gpu, gpu_nodes = partition_nodes("gpu", "gpu", count=1, per_node=4)
    snapshot = ClusterSnapshot(partitions=(a100, gpu), nodes=(*a100_nodes, *gpu_nodes), pending=())
    options = partition_options(snapshot, {"gpu": "A100-40GB"})
    assert options == [
        PartitionOption(name="a100", accelerator="a100", serving_accelerator="a100-80gb", gpus_per_node=8, total_accelerators=16),
        PartitionOption(name="gpu", accelerator="gpu", serving_accelerator="a100-40gb", gpus_per_node=4, total_accelerators=4),
    ]


def test_serving_job_restricts_the_core_job_and_keeps_its_gang():
    job = Job(job_id="42", submit_time_s=0.0, parallel=ParallelConfig.data_parallel(4), workload_class="llm",
              allowed_partitions=("a100", "v100"), allowed_accelerators=("a100", "v100"))  # fmt: skip
    placed = serving_job(job, choose_serving(PLAN, PARTITIONS, request(4, "a100", "v100")))
    assert placed.accelerators == 4
    assert (placed.allowed_partitions, placed.allowed_accelerators) == (("a100",), ("a100",))
    assert (placed.parallel.data, placed.parallel.pipeline, placed.parallel.tensor) == (2, 1, 2)


# ---- the planner: files, warnings ---------------------------------------------------------------------


def _snapshot() -> ClusterSnapshot:
    a100, a100_nodes = partition_nodes("a100", "a100", count=2, per_node=8)
    v100, v100_nodes = partition_nodes("v100", "v100", count=2, per_node=4)
    return ClusterSnapshot(partitions=(a100, v100), nodes=(*a100_nodes, *v100_nodes), pending=())


def _job(job_id: str = "42", accelerators: int = 4) -> Job:
    return Job(job_id=job_id, submit_time_s=0.0, parallel=ParallelConfig.data_parallel(accelerators), workload_class="llm",
               allowed_partitions=("a100", "v100"), allowed_accelerators=("a100", "v100"))  # fmt: skip


def _serving_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asrpt.daemon.serving" and r.levelno == logging.WARNING]


def test_the_planner_applies_its_plan_and_notes_the_choice(tmp_path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(plan_document()))
    planner = ServingPlanner([str(path)])
    planner.begin_cycle(_snapshot(), ["42"])
    placed = planner.apply(_job(), "Llama-2-7b-HF", None)  # any spelling of the model table
    assert placed.allowed_partitions == ("a100",) and placed.parallel.tensor == 2
    assert planner.choices["42"].tensor == 2 and planner.notes["42"].startswith("serving llama2-7b: partition a100")
    planner.begin_cycle(_snapshot(), [])
    assert planner.notes == {} and planner.choices == {}


def test_a_model_without_a_plan_is_an_ordinary_job_with_one_warning(tmp_path, caplog):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(plan_document()))
    planner = ServingPlanner([str(path)])
    job = _job()
    with caplog.at_level(logging.WARNING, logger="asrpt.daemon.serving"):
        for _ in range(3):  # three cycles, one warning
            planner.begin_cycle(_snapshot(), ["42"])
            assert planner.apply(job, "mistral-7b", None) is job
    [warning] = _serving_warnings(caplog)
    assert warning.startswith("job 42 (serve-model=mistral-7b): no serving plan covers it (plans for: llama2-7b)")
    assert warning.endswith("scheduling it as an ordinary job")
    assert "42" not in planner.choices and "ordinary job" in planner.notes["42"]


def test_a_model_the_serving_tools_do_not_know_is_reported_by_the_daemon(tmp_path, caplog):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(plan_document()))
    planner = ServingPlanner([str(path)])
    planner.begin_cycle(_snapshot(), ["42"])
    with caplog.at_level(logging.WARNING, logger="asrpt.daemon.serving"):
        assert planner.apply(_job(), "gpt-17", None).allowed_partitions == ("a100", "v100")
    [warning] = _serving_warnings(caplog)
    assert "job 42 (serve-model=gpt-17): 'gpt-17' is not a model the serving tools know (known: llama2-7b," in warning


def test_a_broken_or_missing_plan_never_breaks_the_cycle(tmp_path, caplog):
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": "llama2-7b", "machines": 7}')
    with caplog.at_level(logging.WARNING, logger="asrpt.daemon.serving"):
        planner = ServingPlanner([str(broken), str(tmp_path / "absent.json")])
        planner.begin_cycle(_snapshot(), ["42"])
        job = _job()
        assert planner.apply(job, "llama-2-7b", None) is job
        planner.begin_cycle(_snapshot(), ["42"])  # unchanged files: not logged again
    messages = _serving_warnings(caplog)
    assert sum(f"serving plan {broken}: machines must be list" in m for m in messages) == 2  # file once, job once
    assert sum(f"serving plan {tmp_path}/absent.json: cannot read" in m for m in messages) == 2
    [job_warning] = [m for m in messages if m.startswith("job 42")]
    assert "serve-model=llama-2-7b" in job_warning and "no usable serving plan covers it" in job_warning
    assert str(broken) in job_warning


def test_a_plan_is_reread_when_its_file_changes(tmp_path):
    directory = tmp_path / "plans"
    directory.mkdir()
    path = directory / "llama.json"
    path.write_text(json.dumps(plan_document(machines=[machine("v100-32gb", 4, [(4, 4000.0)])])))
    planner = ServingPlanner([str(directory)])  # a directory: every *.json in it
    planner.begin_cycle(_snapshot(), ["42"])
    assert planner.apply(_job(), "llama2-7b", None).allowed_partitions == ("v100",)
    path.write_text(json.dumps(plan_document()))
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    planner.begin_cycle(_snapshot(), ["42"])
    assert planner.apply(_job(), "llama2-7b", None).allowed_partitions == ("a100",)
    (directory / "mistral.json").write_text(json.dumps(plan_document("mistral-7b")))
    planner.begin_cycle(_snapshot(), ["42"])
    assert sorted(planner.plans) == ["llama2-7b", "mistral-7b"]


def test_without_plans_configured_serving_jobs_are_ordinary(caplog):
    planner = ServingPlanner([])
    planner.begin_cycle(_snapshot(), ["42"])
    job = _job()
    with caplog.at_level(logging.WARNING, logger="asrpt.daemon.serving"):
        assert planner.apply(job, "llama-2-7b", None) is job
    [warning] = _serving_warnings(caplog)
    assert "no serving plans are configured ([serving] plan)" in warning


def test_a_confined_serving_job_is_held_unless_the_decision_starts_it(tmp_path):
    """Slurm knows nothing of the plan: a serving job that named a partition the plan left out
    (and that could hold it) is held by asrpt while it waits, released by the start."""
    from asrpt.core.model import Decision, Placement

    path = tmp_path / "llama.json"
    path.write_text(json.dumps(plan_document()))
    planner = ServingPlanner([str(path)])
    planner.begin_cycle(_snapshot(), ["42", "7"])
    planner.apply(_job("42"), "llama-2-7b", None)  # a100 chosen; v100 (8 in all) could take 4
    assert planner.confined == {"42": ("v100",)}
    waiting = planner.hold_confined(Decision(order=("7", "42"), reasons={"42": "waiting for 4 accelerators"}))
    assert waiting.holds == ("42",)
    assert waiting.reasons["42"].startswith("waiting for 4 accelerators; held by asrpt until it can start in partition a100")
    start = Placement(job_id="42", partition="a100", worker_nodes=("a100-0",) * 4, iteration_time_s=1.0)
    starting = Decision(order=("42",), starts=(start,))
    assert planner.hold_confined(starting) is starting  # nothing to add: the start pins it
    planner.begin_cycle(_snapshot(), ["42"])
    planner.apply(_job("42", accelerators=12), "llama-2-7b", None)  # 12 > v100's 8: nothing to fear
    assert planner.confined == {}
