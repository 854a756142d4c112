"""Routing policies: the KV-aware min-max rule and the baselines."""

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.serving.cost import RequestCostModel
from asrpt.serving.errors import ConfigError
from asrpt.serving.router import (
    POLICY_NAMES,
    InstanceView,
    KvAwareRouter,
    LeastOutstandingRouter,
    RoundRobinRouter,
    RoutedRequest,
    make_router,
)

from tests.serving.helpers import latency


def cost(scale: float = 1.0, capacity: int = 40_000) -> RequestCostModel:
    return RequestCostModel(latency=latency(scale), kv_capacity_tokens=capacity, max_num_seqs=256)


def view(index: int, *, drain_s: float = 0.0, used: int = 0, capacity: int = 40_000, outstanding: int = 0,
         scale: float = 1.0) -> InstanceView:
    return InstanceView(index=index, cost=cost(scale, capacity), kv_capacity_tokens=capacity, kv_used_tokens=used,
                        outstanding=outstanding, drain=lambda: drain_s)


REQUEST = RoutedRequest(prompt_tokens=1000, predicted_output_tokens=200)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 500), st.integers(0, 40_000), st.sampled_from([0.5, 1.0, 2.0])),
                min_size=2, max_size=6),
       st.integers(1, 4000), st.integers(1, 800), st.floats(0, 5))
def test_kv_aware_never_picks_a_full_instance_when_another_has_room(states, prompt, output, theta):
    instances = [view(i, drain_s=d, used=u, scale=s) for i, (d, u, s) in enumerate(states)]
    request = RoutedRequest(prompt, output)
    choice = KvAwareRouter(theta).choose(request, instances)
    if any(v.has_room(request) for v in instances):
        assert instances[choice].has_room(request)


def test_kv_aware_minimises_the_largest_workload():
    # Instance 1 is twice as fast; both idle: the request goes to the fast one.
    instances = [view(0, scale=1.0), view(1, scale=0.5)]
    assert KvAwareRouter().choose(REQUEST, instances) == 1
    # With a long queue on the fast one, the slow one keeps the maximum lower.
    instances = [view(0, scale=1.0), view(1, scale=0.5, drain_s=30.0)]
    assert KvAwareRouter().choose(REQUEST, instances) == 0


def test_kv_pressure_moves_requests_off_a_filling_cache():
    # Equal queues; instance 0 is faster but its cache is 80 % full.
    instances = [view(0, scale=0.8, drain_s=10.0, used=32_000), view(1, scale=1.0, drain_s=10.0, used=4_000)]
    assert KvAwareRouter(theta=0.0).choose(REQUEST, instances) == 0
    assert KvAwareRouter(theta=2.0).choose(REQUEST, instances) == 1


def test_round_robin_cycles():
    router = RoundRobinRouter()
    instances = [view(i) for i in range(3)]
    assert [router.choose(REQUEST, instances) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_weighted_round_robin_follows_instance_speed():
    costs = [cost(1.0), cost(0.5)]
    router = make_router("weighted-round-robin", costs, typical_prompt_tokens=1000, typical_output_tokens=200)
    instances = [view(0), view(1)]
    picks = [router.choose(REQUEST, instances) for _ in range(300)]
    ratio = costs[0].request_time_s(1000, 200) / costs[1].request_time_s(1000, 200)
    assert Counter(picks)[1] / Counter(picks)[0] == pytest.approx(ratio, rel=0.05)
    assert max(len(run) for run in "".join(map(str, picks)).split("0")) <= math.ceil(ratio)  # interleaved


def test_least_outstanding_and_least_latency():
    instances = [view(0, outstanding=5, drain_s=1.0), view(1, outstanding=2, drain_s=9.0)]
    assert LeastOutstandingRouter().choose(REQUEST, instances) == 1
    latency_router = make_router("least-latency", [], typical_prompt_tokens=1, typical_output_tokens=1)
    assert latency_router.choose(REQUEST, instances) == 0


def test_every_policy_is_constructible_and_unknown_names_are_refused():
    for name in POLICY_NAMES:
        assert make_router(name, [cost()], typical_prompt_tokens=1000, typical_output_tokens=200).name == name
    with pytest.raises(ConfigError, match="known: kv-aware, round-robin"):
        make_router("random", [cost()], typical_prompt_tokens=1, typical_output_tokens=1)


def test_ideal_batch_amortises_decode():
    model = cost(1.0, capacity=12_000)
    assert model.ideal_batch(1000, 200) == 10
    assert model.decode_token_s(1000, 200) < latency(1.0).decode.time_ms(1, 1100) / 1000
