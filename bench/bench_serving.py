"""Router comparison on A100 + H100 instances: throughput, TTFT and TPOT per request rate.

    python bench/bench_serving.py [--traces ../shared/traces] [--out DIR] [--requests 1000]
                                  [--multi-requests 3000] [--seeds 0,1,2]

Fits the splitwise-sim profile (Llama-2-70B, A100-80GB and H100-80GB), then serves Azure
conversation-trace requests (Poisson arrivals, rates from a quarter of the estimated
capacity to 1.5x and all-at-once) in two settings:

* two instances: one A100 TP2 and one H100 TP2 (the seed's "two-instance" case);
* multi-instance: one 8xA100 and one 8xH100 machine deployed as ``serving plan`` picks.

Prints a markdown table per setting with each policy's gain over round robin, the largest
gain a perfect router could get over round robin with these instance speeds, and how this
compares with the seed's +122.5 % / +33.6 %. Writes JSON, tables and plots to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from asrpt.serving.cluster import build_instances, parse_cluster
from asrpt.serving.deployment import estimate_sample_size, plan_deployment
from asrpt.serving.estimate import continuous_batching
from asrpt.serving.experiment import RouteExperiment, default_rates, gain_over, run_route_experiment
from asrpt.serving.fitting import fit_profiles
from asrpt.serving.fitset import FitSet
from asrpt.serving.models import get_model
from asrpt.serving.profiles import read_profile
from asrpt.serving.report import plot_route_report, route_table
from asrpt.serving.workload import read_azure_trace, sample_lengths, usable_lengths

PAPER = {"two-instance": 1.225, "multi-instance": 0.336}


def perfect_router_gain(instances, lengths, engine) -> float:
    """Gain over round robin of a router that keeps every instance busy: round robin gives
    each of n instances 1/n of the requests, so when saturated the slowest one sets the
    pace (n x slowest rate) while a perfect split reaches the sum of the rates."""
    rates = [continuous_batching(i.latency, i.kv_capacity_tokens, lengths, engine).tokens_per_s for i in instances]
    return sum(rates) / (len(rates) * min(rates)) - 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    parser.add_argument("--out", type=Path, help="directory for JSON, tables and plots (default: a new temp dir)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per seed, two-instance setting")
    parser.add_argument("--multi-requests", type=int, default=3000,
                        help="requests per seed, multi-instance setting (its instances hold ~1000 requests at once)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trace", default="conv", choices=("conv", "code"))
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="asrpt-bench-serving-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds = tuple(int(s) for s in args.seeds.split(","))

    fits = FitSet.from_document(fit_profiles([read_profile(args.traces / "splitwise-sim-perf-model/perf_model.csv", "splitwise")]))
    rows = read_azure_trace(args.traces / f"azure-llm-inference-2023/AzureLLMInferenceTrace_{args.trace}.csv")
    model = get_model("llama2-70b")
    cluster = parse_cluster("a100x8+h100x8")
    engine = cluster.engine
    population = usable_lengths(rows, model.max_model_len)
    plan = plan_deployment(model, cluster, fits, sample_lengths(population, estimate_sample_size(model, cluster, population), 0))
    planned = [(p.machine.accelerator, p.best.tp, p.best.instances_per_machine) for p in plan.machines if p.best]
    settings = {
        "two-instance": [("a100-80gb", 2, 1), ("h100-80gb", 2, 1)],
        "multi-instance": planned,
    }
    requests = {"two-instance": args.requests, "multi-instance": args.multi_requests}
    results = {}
    for name, entries in settings.items():
        instances = tuple(build_instances(model, entries, fits, engine))
        experiment = RouteExperiment(model=model, instances=instances, requests=requests[name], seeds=seeds, engine=engine)
        rates = default_rates(experiment, rows)
        started = time.perf_counter()
        report = run_route_experiment(experiment, rows, rates)
        report["elapsed_s"] = time.perf_counter() - started
        report["perfect_router_gain_over_round_robin"] = perfect_router_gain(instances, sample_lengths(population, 2000, 0), engine)
        report["gain_over_round_robin"] = {p: gain_over(report, p) for p in report["policies"]}
        results[name] = report
        table = route_table(report)
        (out / f"{name}.md").write_text(table + "\n", encoding="utf-8")
        plot_route_report(report, out / f"{name}.png", title=f"{name}: {model.name} on " + ", ".join(f"{a}:tp{t}x{n}" for a, t, n in entries))
        kv = report["gain_over_round_robin"]["kv-aware"]
        best_rate = max(kv, key=kv.get)
        print(f"## {name}: {model.name} on {', '.join(f'{a}:tp{t}x{n}' for a, t, n in entries)} "
              f"({requests[name]} requests x seeds {list(seeds)}, {report['elapsed_s']:.0f} s)\n")
        print(table)
        print(f"\nkv-aware vs round robin: best {kv[best_rate] * 100:+.1f} % at {best_rate} req/s; "
              f"{', '.join(f'{r}: {g * 100:+.1f} %' for r, g in kv.items())}")
        print(f"perfect router vs round robin with these instance speeds: {report['perfect_router_gain_over_round_robin'] * 100:+.1f} %; "
              f"seed's claim for the {name} setting: {PAPER[name] * 100:+.1f} %\n")
    (out / "bench_serving.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
