"""Does the KV-aware router beat round robin on a heterogeneous cluster at high load?

Measured (bench/bench_serving.py, Llama-2-70B TP2 on one A100 and one H100, splitwise
fits, Azure conversation trace, 3 seeds x 1000 requests): +7.6 % at 2.7 req/s, +35 % at
4.1 req/s, +34 % at infinite rate, within noise (< 2 %) up to 2 req/s. On 400-request
runs over three seed pairs the gain at 4 req/s and at infinite rate was 25-47 %; the test
asks for 15 %. That the KV-aware rule also beats the other baselines is not claimed:
weighted round robin and least-latency are within a few points of it.
"""

import math

import numpy as np

from asrpt.serving.cluster import build_instances
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.experiment import RouteExperiment, gain_over, run_route_experiment
from asrpt.serving.fitting import fit_profiles
from asrpt.serving.fitset import FitSet
from asrpt.serving.models import get_model
from asrpt.serving.profiles import read_profile
from asrpt.serving.request_sim import simulate
from asrpt.serving.router import make_router
from asrpt.serving.workload import Request, read_azure_trace

from tests.serving.helpers import instance, trace_file


def test_kv_aware_beats_round_robin_on_a100_plus_h100_at_high_load():
    fits = FitSet.from_document(fit_profiles([read_profile(trace_file("splitwise-sim-perf-model/perf_model.csv"), "splitwise")]))
    rows = read_azure_trace(trace_file("azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"))
    model = get_model("llama2-70b")
    engine = EngineConfig()
    instances = tuple(build_instances(model, [("a100-80gb", 2, 1), ("h100-80gb", 2, 1)], fits, engine))
    experiment = RouteExperiment(model=model, instances=instances, policies=("kv-aware", "round-robin"),
                                 requests=400, seeds=(0, 1), engine=engine)
    report = run_route_experiment(experiment, rows, [1.0, 4.0, math.inf])
    gains = gain_over(report, "kv-aware")
    assert gains["4"] > 0.15
    assert gains["inf"] > 0.15
    assert abs(gains["1"]) < 0.05  # under light load routing hardly matters


def test_kv_aware_beats_round_robin_on_synthetic_two_speed_cluster():
    rng = np.random.default_rng(3)
    slow, fast = instance("slow", 1.0, 30_000), instance("fast", 0.4, 30_000)
    requests = [Request(request_id=i, arrival_s=0.0, prompt_tokens=int(p), output_tokens=int(o), predicted_output_tokens=150)
                for i, (p, o) in enumerate(zip(rng.integers(100, 2000, 300), rng.integers(20, 300, 300)))]
    throughput = {}
    for name in ("kv-aware", "round-robin"):
        router = make_router(name, [slow.cost_model(EngineConfig()), fast.cost_model(EngineConfig())],
                             typical_prompt_tokens=1000, typical_output_tokens=150)
        throughput[name] = simulate(requests, [slow, fast], router).summary()["throughput_tok_s"]
    assert throughput["kv-aware"] > 1.3 * throughput["round-robin"]
