"""The router comparison behind ``serving route-sim`` and ``bench/bench_serving.py``.

For each request rate and policy, serve the same request samples (one per seed) on the
same instances and average the summaries over seeds. The trace is split in time: the
output-length predictor and the weighted round robin's typical request come from the first
part, the simulated requests from the rest, so the router never sees the future.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.errors import ConfigError
from asrpt.serving.estimate import continuous_batching
from asrpt.serving.models import ModelSpec
from asrpt.serving.output_predictor import BucketMeanPredictor
from asrpt.serving.request_sim import InstanceSpec, simulate
from asrpt.serving.router import POLICY_NAMES, make_router
from asrpt.serving.workload import (
    TraceRow,
    build_requests,
    poisson_arrivals_s,
    sample_lengths,
    split_by_time,
    usable_lengths,
)

#: Per-rate figures averaged over seeds (the keys ``route-sim`` promises).
METRICS: tuple[str, ...] = ("throughput_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
#: How the router guesses output lengths: bucket means by prompt length, the global mean,
#: or the true length (an upper bound no engine has).
OUTPUT_PREDICTORS: tuple[str, ...] = ("bucket", "mean", "oracle")
#: Default rates as fractions of the estimated capacity of the instances, plus everything at once.
DEFAULT_LOAD_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5, math.inf)


def rate_label(rate_per_s: float) -> str:
    return "inf" if math.isinf(rate_per_s) else f"{rate_per_s:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteExperiment:
    model: ModelSpec
    instances: tuple[InstanceSpec, ...]
    policies: tuple[str, ...] = POLICY_NAMES
    requests: int = 1000
    seeds: tuple[int, ...] = (0, 1, 2)
    theta: float = 2.0
    history_fraction: float = 0.5
    output_predictor: str = "bucket"
    engine: EngineConfig = EngineConfig()


def estimated_capacity_req_s(experiment: RouteExperiment, rows: Sequence[TraceRow], sample_size: int = 300) -> float:
    """Requests/s the instances sustain by the continuous-batching estimate (the scale of
    the default rates)."""
    lengths = sample_lengths(usable_lengths(rows, experiment.model.max_model_len), sample_size, 0)
    tok_s = sum(continuous_batching(i.latency, i.kv_capacity_tokens, lengths, experiment.engine).tokens_per_s
                for i in experiment.instances)
    return tok_s / float(np.mean(lengths.output_tokens))


def default_rates(experiment: RouteExperiment, rows: Sequence[TraceRow]) -> list[float]:
    capacity = estimated_capacity_req_s(experiment, rows)
    return [f if math.isinf(f) else float(f"{f * capacity:.2g}") for f in DEFAULT_LOAD_FRACTIONS]


def run_route_experiment(experiment: RouteExperiment, rows: Sequence[TraceRow], rates: Sequence[float],
                         progress: Callable[[int, int], None] | None = None) -> dict:
    """``{"rates": [...], "policies": {name: {rate: {metric: mean, metric_std: ...}}}, ...}``.

    ``progress(done, total)`` is called after each simulated (policy, rate, seed) run.
    """
    runs_total = len(experiment.policies) * len(rates) * len(experiment.seeds)
    runs_done = 0
    if experiment.output_predictor not in OUTPUT_PREDICTORS:
        raise ConfigError(f"unknown output predictor {experiment.output_predictor!r}; known: {', '.join(OUTPUT_PREDICTORS)}")
    history, future = split_by_time(rows, experiment.history_fraction)
    past = usable_lengths(history, experiment.model.max_model_len)
    population = usable_lengths(future, experiment.model.max_model_len)
    predictor = BucketMeanPredictor.fit(past.prompt_tokens, past.output_tokens,
                                        buckets=1 if experiment.output_predictor == "mean" else 8)
    typical_prompt = int(round(float(np.mean(past.prompt_tokens))))
    typical_output = int(round(float(np.mean(past.output_tokens))))
    costs = [i.cost_model(experiment.engine) for i in experiment.instances]
    samples = {seed: sample_lengths(population, experiment.requests, seed) for seed in experiment.seeds}
    policies: dict[str, dict[str, dict]] = {}
    for name in experiment.policies:
        per_rate: dict[str, dict] = {}
        for rate in rates:
            summaries = []
            for seed in experiment.seeds:
                lengths = samples[seed]
                requests = build_requests(lengths, poisson_arrivals_s(len(lengths), rate, seed), predictor.predict)
                if experiment.output_predictor == "oracle":
                    requests = [dataclasses.replace(r, predicted_output_tokens=r.output_tokens) for r in requests]
                router = make_router(name, costs, typical_prompt_tokens=typical_prompt,
                                     typical_output_tokens=typical_output, theta=experiment.theta)
                result = simulate(requests, experiment.instances, router, engine=experiment.engine,
                                  max_model_len=experiment.model.max_model_len)
                summaries.append(result.summary())
                runs_done += 1
                if progress is not None:
                    progress(runs_done, runs_total)
            entry = {metric: float(np.mean([s[metric] for s in summaries])) for metric in METRICS}
            entry.update({f"{metric}_std": float(np.std([s[metric] for s in summaries])) for metric in METRICS})
            entry["completed"] = int(sum(s["completed"] for s in summaries))
            entry["rejected"] = int(sum(s["rejected"] for s in summaries))
            entry["preemptions"] = int(sum(s["preemptions"] for s in summaries))
            per_rate[rate_label(rate)] = entry
        policies[name] = per_rate
    return {
        "rates": [rate_label(r) for r in rates],
        "policies": policies,
        "model": experiment.model.name,
        "instances": [{"name": i.name, "hardware": i.hardware, "tp": i.tp, "kv_capacity_tokens": i.kv_capacity_tokens}
                      for i in experiment.instances],
        "requests_per_seed": experiment.requests,
        "seeds": list(experiment.seeds),
        "theta": experiment.theta,
        "output_predictor": {"kind": experiment.output_predictor, "prompt_edges": list(predictor.edges),
                             "mean_output_tokens": list(predictor.means)},
        "trace_rows": {"history": len(history), "evaluation": len(future),
                       "dropped_long_prompts": population.dropped_long_prompts,
                       "clipped_outputs": population.clipped_outputs},
    }


def gain_over(report: dict, policy: str, baseline: str = "round-robin") -> dict[str, float]:
    """Relative throughput gain of ``policy`` over ``baseline`` at every rate."""
    return {
        rate: report["policies"][policy][rate]["throughput_tok_s"] / report["policies"][baseline][rate]["throughput_tok_s"] - 1.0
        for rate in report["rates"]
    }
