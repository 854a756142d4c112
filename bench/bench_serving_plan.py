"""Held-out error of the latency fits per file, the ranking check of the deployment
optimiser, and the request simulation against real vLLM runs.

    python bench/bench_serving_plan.py [--traces ../shared/traces] [--out DIR] [--skip-validation]

1. Fit every profile file of the three formats; print the held-out median APE per file
   (4-fold grouped cross-validation, seed 0).
2. ``serving plan`` with the ranking check on: Llama-2-70B on 8xA100 + 8xH100 from the
   splitwise fits, with the estimate's sample sized automatically and with the 200
   requests of a "few sampled requests" estimate; Llama-2-70B and Llama-2-7B on
   8xA100 + 8xH100 + 8xA40 (three accelerator types, the seed's falsifier) from the
   Vidur fits.
3. Replay each DistServe vLLM run (OPT-13B, A100, 100-400 requests at 1-4 req/s) in the
   request simulation with a fit of the other seven files, and compare TTFT and TPOT.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from asrpt.serving.cluster import parse_cluster
from asrpt.serving.deployment import check_ranking, estimate_sample_size, plan_deployment
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.fitting import fit_profiles
from asrpt.serving.fitset import FitSet
from asrpt.serving.hardware import get_accelerator
from asrpt.serving.memory import kv_capacity_tokens
from asrpt.serving.models import get_model
from asrpt.serving.profiles import read_profile
from asrpt.serving.report import plan_table
from asrpt.serving.request_sim import InstanceSpec, simulate
from asrpt.serving.router import RoundRobinRouter
from asrpt.serving.workload import Request, read_azure_trace, sample_lengths, usable_lengths


def fit_errors(traces: Path) -> tuple[dict, dict[str, FitSet]]:
    sources = {
        "splitwise": [traces / "splitwise-sim-perf-model/perf_model.csv"],
        "vidur": sorted((traces / "vidur-profiling/compute").glob("*/*/mlp.csv")),
        "distserve": sorted((traces / "distserve-a100/ground-truth-opt13b-sharegpt-vllm").glob("vllm-*.exp")),
    }
    errors, fitsets = {}, {}
    print("| format | file | prefill held-out MdAPE | decode held-out MdAPE |\n|---|---|---|---|")
    for fmt, paths in sources.items():
        document = fit_profiles([read_profile(p, fmt) for p in paths])
        fitsets[fmt] = FitSet.from_document(document)
        for path, entry in document["files"].items():
            name = str(Path(path).relative_to(traces))
            errors[name] = {"prefill": entry["prefill_heldout_median_ape"], "decode": entry["decode_heldout_median_ape"]}
            print(f"| {fmt} | {name} | {entry['prefill_heldout_median_ape'] * 100:.1f} % | "
                  f"{entry['decode_heldout_median_ape'] * 100:.1f} % |")
    return errors, fitsets


def ranking(traces: Path, fitsets: dict[str, FitSet]) -> list[dict]:
    rows = read_azure_trace(traces / "azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv")
    cases = [("splitwise", "llama2-70b", "a100x8+h100x8", None), ("splitwise", "llama2-70b", "a100x8+h100x8", 200),
             ("vidur", "llama2-70b", "a100x8+h100x8+a40x8", None), ("vidur", "llama2-7b", "a100x8+h100x8+a40x8", None)]
    results, tables = [], []
    print("\n| fits | model | machine | sample | estimated order | static-estimate order | simulated order | tau | top agrees |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for source, model_name, cluster_text, sample_size in cases:
        model, cluster = get_model(model_name), parse_cluster(cluster_text)
        population = usable_lengths(rows, model.max_model_len)
        size = sample_size or estimate_sample_size(model, cluster, population)
        plan = plan_deployment(model, cluster, fitsets[source], sample_lengths(population, size, 0))
        checks = check_ranking(plan, fitsets[source], population)
        for check in checks:
            print(f"| {source} | {model_name} | {check['machine']} | {size} | {check['estimated_order']} | "
                  f"{check['static_estimate_order']} | {check['simulated_order']} | "
                  f"{check['estimate_kendall_tau_mean']:+.2f} | {check['estimate_top_agrees_fraction']:.0%} |")
        results.append({"fits": source, "model": model_name, "cluster": cluster_text, "sample_requests": size,
                        "plan": plan.as_dict(), "ranking_check": checks})
        if sample_size is None:
            tables.append(f"\n{model_name} on {cluster_text} ({source} fits):\n\n" + plan_table(plan.as_dict()))
    print("\n".join(tables))
    return results


def validation(traces: Path) -> list[dict]:
    paths = sorted((traces / "distserve-a100/ground-truth-opt13b-sharegpt-vllm").glob("vllm-*.exp"))
    model, engine = get_model("opt-13b"), EngineConfig()
    capacity = kv_capacity_tokens(model, get_accelerator("a100"), 1, engine)
    print("\n| run | TTFT mean measured / simulated (ms) | TTFT p90 | TPOT mean | TPOT p90 |\n|---|---|---|---|---|")
    results = []
    for path in paths:
        fits = FitSet.from_document(fit_profiles([read_profile(p, "distserve") for p in paths if p != path]))
        spec = InstanceSpec(name="a100:tp1", hardware="a100-80gb", tp=1, latency=fits.latency("opt-13b", "a100-80gb", 1),
                            kv_capacity_tokens=capacity)
        measured = ast.literal_eval(path.read_text(encoding="utf-8").splitlines()[0])
        start = min(r["issue_time"] for r in measured)
        requests = [Request(request_id=i, arrival_s=r["issue_time"] - start, prompt_tokens=r["prompt_len"],
                            output_tokens=r["output_len"], predicted_output_tokens=r["output_len"])
                    for i, r in enumerate(measured)]
        outcomes = simulate(requests, [spec], RoundRobinRouter(), engine=engine, max_model_len=model.max_model_len).outcomes
        pairs = {
            "ttft_ms": ([r["ttft_ms"] for r in measured], [o.ttft_s * 1000 for o in outcomes]),
            "tpot_ms": ([r["tpot_ms"] for r in measured if r["output_len"] > 1],
                        [o.tpot_s * 1000 for o in outcomes if o.tpot_s is not None]),
        }
        row = {"run": path.name}
        for key, (real, simulated) in pairs.items():
            row[key] = {"measured_mean": float(np.mean(real)), "simulated_mean": float(np.mean(simulated)),
                        "measured_p90": float(np.percentile(real, 90)), "simulated_p90": float(np.percentile(simulated, 90))}
        results.append(row)
        t, p = row["ttft_ms"], row["tpot_ms"]
        print(f"| {path.name} | {t['measured_mean']:.0f} / {t['simulated_mean']:.0f} | {t['measured_p90']:.0f} / "
              f"{t['simulated_p90']:.0f} | {p['measured_mean']:.1f} / {p['simulated_mean']:.1f} | "
              f"{p['measured_p90']:.1f} / {p['simulated_p90']:.1f} |")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    parser.add_argument("--out", type=Path, help="directory for the JSON (default: a new temp dir)")
    parser.add_argument("--skip-validation", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="asrpt-bench-serving-plan-"))
    out.mkdir(parents=True, exist_ok=True)
    errors, fitsets = fit_errors(args.traces)
    results = {"heldout_errors": errors, "ranking": ranking(args.traces, fitsets)}
    if not args.skip_validation:
        results["validation"] = validation(args.traces)
    (out / "bench_serving_plan.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
