"""The deployment optimiser ranks by (u/t) x tokens/time and prefers what the numbers say."""

import pytest

from asrpt.serving.cluster import Cluster, MachineType
from asrpt.serving.deployment import adjacent_inversions, check_ranking, kendall_tau, plan_deployment
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.estimate import continuous_batching, static_batching
from asrpt.serving.fitset import FitSet
from asrpt.serving.models import ModelSpec, get_model
from asrpt.serving.profiles import ProfileKey
from asrpt.serving.workload import LengthSample

from tests.serving.helpers import latency

TINY = ModelSpec(name="tiny-1b", params=1e9, layers=16, heads=16, kv_heads=16, head_dim=64, max_model_len=2048)
ENGINE = EngineConfig(max_num_seqs=16)
SAMPLE = LengthSample(tuple([400, 900, 200, 1500] * 60), tuple([120, 40, 300, 60] * 60), 0, 0)


def fits_with_speedup(tp2_speedup: float) -> FitSet:
    return FitSet({
        ProfileKey("tiny-1b", "a100-80gb", 1): latency(1.0),
        ProfileKey("tiny-1b", "a100-80gb", 2): latency(1.0 / tp2_speedup),
        ProfileKey("tiny-1b", "a100-80gb", 4): latency(1.0 / (1.6 * tp2_speedup)),
    })


def plan_for(tp2_speedup: float):
    cluster = Cluster(machines=(MachineType(accelerator="a100-80gb", gpus=4),), engine=ENGINE)
    return plan_deployment(TINY, cluster, fits_with_speedup(tp2_speedup), SAMPLE)


def test_tp2_wins_when_it_is_more_than_twice_as_fast():
    plan = plan_for(3.0)
    assert plan.machines[0].best.tp == 2
    assert [c.tp for c in plan.machines[0].ranked()] == [2, 4, 1]


def test_more_instances_win_when_tp_scales_poorly():
    plan = plan_for(1.25)
    machine = plan.machines[0]
    assert machine.best.tp == 1
    by_tp = {c.tp: c for c in machine.candidates}
    # The corrected formula: u/t instances times one instance's rate...
    assert by_tp[2].machine_tok_s == pytest.approx(2 * by_tp[2].instance_tok_s)
    assert by_tp[1].machine_tok_s == pytest.approx(4 * by_tp[1].instance_tok_s)
    # ...whereas Algorithm 1's printed t * tokens/time would have picked t = 2.
    assert 2 * by_tp[2].instance_tok_s > 1 * by_tp[1].instance_tok_s


def test_infeasible_and_unfitted_degrees_are_listed_with_reasons():
    cluster = Cluster(machines=(MachineType(accelerator="a100-80gb", gpus=8),), engine=ENGINE)
    fits = FitSet({ProfileKey("llama2-70b", "a100-80gb", 2): latency(1.0)})
    plan = plan_deployment(get_model("llama2-70b"), cluster, fits, SAMPLE)
    reasons = {c.tp: c.reason for c in plan.machines[0].candidates}
    assert plan.machines[0].best.tp == 2
    assert "weights" in reasons[1]
    assert "no latency fit for llama2-70b/a100-80gb/tp4" in reasons[4]


def test_ranking_check_agrees_on_a_constructed_case():
    plan = plan_for(3.0)
    (report,) = check_ranking(plan, fits_with_speedup(3.0), SAMPLE, seeds=(1,), min_requests=240)
    assert report["estimated_order"] == [2, 4, 1]
    assert report["simulated_order"] == [2, 4, 1]
    assert report["estimate_kendall_tau_mean"] == 1.0
    assert report["estimate_order_agrees"] is True


def test_estimates_of_a_single_request_are_exact():
    model = latency(1.0)
    one = LengthSample((1000,), (11,), 0, 0)
    expected_ms = model.prefill.time_ms(1, 1000, 1000**2) + model.decode.steps_time_ms(1, 1001, 10)
    for estimator in (continuous_batching, static_batching):
        result = estimator(model, 100_000, one, ENGINE)
        assert result.time_s == pytest.approx(expected_ms / 1000)
        assert result.tokens == 11


def test_continuous_batching_beats_static_when_outputs_differ():
    # Static batches wait for their longest request; continuous batching refills the slot.
    lengths = LengthSample(tuple([500] * 64), tuple([10, 400] * 32), 0, 0)
    model = latency(1.0)
    assert continuous_batching(model, 10_000, lengths, ENGINE).tokens_per_s > \
        static_batching(model, 10_000, lengths, ENGINE).tokens_per_s


def test_order_agreement_measures():
    assert kendall_tau([2, 4, 8], [2, 4, 8]) == 1.0
    assert kendall_tau([2, 4, 8], [8, 4, 2]) == -1.0
    assert adjacent_inversions([2, 4, 8], [4, 2, 8]) == [[2, 4]]
