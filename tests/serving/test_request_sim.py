"""The request-level simulation: exact on a trivial case, and no request lost or duplicated."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.request_sim import simulate
from asrpt.serving.router import POLICY_NAMES, make_router
from asrpt.serving.workload import Request

from tests.serving.helpers import instance

ENGINE = EngineConfig(max_num_seqs=8)


def router_for(name, instances):
    return make_router(name, [i.cost_model(ENGINE) for i in instances], typical_prompt_tokens=500, typical_output_tokens=100)


def test_single_request_timing_is_prefill_then_decode_steps():
    spec = instance("a", kv_capacity_tokens=10_000)
    request = Request(request_id=0, arrival_s=2.0, prompt_tokens=1000, output_tokens=5, predicted_output_tokens=5)
    (outcome,) = simulate([request], [spec], router_for("round-robin", [spec]), engine=ENGINE).outcomes
    prefill_s = spec.latency.prefill.time_ms(1, 1000, 1000**2) / 1000
    decode_s = spec.latency.decode.steps_time_ms(1, 1001, 4) / 1000
    assert outcome.ttft_s == pytest.approx(prefill_s)
    assert outcome.finish_s == pytest.approx(2.0 + prefill_s + decode_s)
    assert outcome.tpot_s == pytest.approx(decode_s / 4)


def test_tight_kv_cache_preempts_and_still_finishes_everything():
    spec = instance("a", kv_capacity_tokens=2_048)
    requests = [Request(request_id=i, arrival_s=0.0, prompt_tokens=300, output_tokens=400, predicted_output_tokens=100)
                for i in range(6)]
    result = simulate(requests, [spec], router_for("round-robin", [spec]), engine=ENGINE)
    assert [o.request_id for o in result.outcomes] == list(range(6))
    assert sum(o.preemptions for o in result.outcomes) > 0


def test_request_larger_than_every_cache_is_rejected_not_lost():
    spec = instance("a", kv_capacity_tokens=1_024)
    requests = [Request(request_id=0, arrival_s=0.0, prompt_tokens=900, output_tokens=300, predicted_output_tokens=10),
                Request(request_id=1, arrival_s=0.0, prompt_tokens=100, output_tokens=10, predicted_output_tokens=10)]
    result = simulate(requests, [spec], router_for("kv-aware", [spec]), engine=ENGINE)
    assert result.rejected == (0,)
    assert [o.request_id for o in result.outcomes] == [1]


requests_strategy = st.lists(
    st.tuples(st.floats(0, 20), st.integers(1, 1500), st.integers(1, 300), st.integers(1, 400)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests_strategy,
       st.lists(st.tuples(st.sampled_from([0.3, 1.0, 2.5]), st.integers(1_800, 20_000)), min_size=1, max_size=4),
       st.sampled_from(POLICY_NAMES))
def test_every_request_completes_exactly_once(raw, raw_instances, policy):
    instances = [instance(f"i{k}", scale, capacity) for k, (scale, capacity) in enumerate(raw_instances)]
    requests = [Request(request_id=i, arrival_s=t, prompt_tokens=p, output_tokens=o, predicted_output_tokens=g)
                for i, (t, p, o, g) in enumerate(raw)]
    result = simulate(requests, instances, router_for(policy, instances), engine=ENGINE, max_model_len=2048)
    finished = [o.request_id for o in result.outcomes]
    assert len(finished) == len(set(finished))
    assert set(finished) | set(result.rejected) == {r.request_id for r in requests}
    assert not set(finished) & set(result.rejected)
    largest_blocks = max(spec.kv_capacity_tokens // ENGINE.block_size_tokens for spec in instances)
    for outcome in result.outcomes:
        request = requests[outcome.request_id]
        assert outcome.output_tokens == request.output_tokens
        assert request.arrival_s <= outcome.first_token_s <= outcome.finish_s
    for request_id in result.rejected:
        request = requests[request_id]
        assert -(-(request.prompt_tokens + request.output_tokens) // ENGINE.block_size_tokens) > largest_blocks


def test_summary_reports_the_promised_metrics():
    spec = instance("a")
    requests = [Request(request_id=i, arrival_s=0.1 * i, prompt_tokens=200, output_tokens=20, predicted_output_tokens=20)
                for i in range(30)]
    summary = simulate(requests, [spec], router_for("round-robin", [spec]), engine=ENGINE).summary()
    for key in ("throughput_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "window_throughput_tok_s"):
        assert summary[key] > 0
    assert summary["completed"] == 30 and summary["rejected"] == 0
