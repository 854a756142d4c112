"""Tables and plots of serving results, for the CLI and the benchmark."""

from __future__ import annotations

from pathlib import Path

from asrpt.serving.experiment import gain_over


def route_table(report: dict, baseline: str = "round-robin") -> str:
    """Markdown table: one row per (rate, policy), means over seeds, gain over baseline."""
    has_baseline = baseline in report["policies"]
    header = ["rate (req/s)", "policy", "throughput (tok/s)", "TTFT p50 (s)", "TTFT p99 (s)", "TPOT p50 (ms)",
              "TPOT p99 (ms)"] + ([f"vs {baseline}"] if has_baseline else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    gains = {name: gain_over(report, name, baseline) for name in report["policies"]} if has_baseline else {}
    for rate in report["rates"]:
        for name, per_rate in report["policies"].items():
            entry = per_rate[rate]
            cells = [rate, name, f"{entry['throughput_tok_s']:.0f} ± {entry['throughput_tok_s_std']:.0f}",
                     f"{entry['ttft_p50_s']:.2f}", f"{entry['ttft_p99_s']:.2f}",
                     f"{entry['tpot_p50_s'] * 1000:.0f}", f"{entry['tpot_p99_s'] * 1000:.0f}"]
            if has_baseline:
                cells.append(f"{gains[name][rate] * 100:+.1f} %")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_route_report(report: dict, path: str | Path, title: str | None = None) -> None:
    """Throughput and TTFT p99 against request rate, one line per policy (``inf`` is
    drawn one step right of the largest finite rate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = report["rates"]
    finite = [float(r) for r in labels if r != "inf"]
    step = (finite[-1] - finite[-2]) if len(finite) > 1 else (finite[-1] if finite else 1.0)
    xs = [float(r) if r != "inf" else (finite[-1] + step if finite else 1.0) for r in labels]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, per_rate in report["policies"].items():
        left.plot(xs, [per_rate[r]["throughput_tok_s"] for r in labels], marker="o", label=name)
        right.plot(xs, [per_rate[r]["ttft_p99_s"] for r in labels], marker="o", label=name)
    for axis, ylabel in ((left, "output tokens / s"), (right, "TTFT p99 (s)")):
        axis.set_xticks(xs, labels)
        axis.set_xlabel("request rate (req/s)")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    right.set_yscale("log")
    left.legend(fontsize="small")
    figure.suptitle(title or f"{report['model']} on " + ", ".join(i["name"] for i in report["instances"]))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plan_table(plan: dict) -> str:
    lines = ["| machine | t | instances | feasible | est. machine tok/s | static est. tok/s | KV tokens/instance | note |",
             "|---|---|---|---|---|---|---|---|"]
    for machine in plan["machines"]:
        for c in machine["candidates"]:
            best = " (best)" if c["tp"] == machine["best_tp"] else ""
            lines.append(
                f"| {machine['machine']} | {c['tp']}{best} | {c['instances_per_machine']} | {'yes' if c['feasible'] else 'no'} | "
                f"{c['machine_tok_s']:.0f} | {c['static_machine_tok_s']:.0f} | {c['kv_capacity_tokens']} | {c['latency_source'] or ''} |"
                if c["feasible"] else
                f"| {machine['machine']} | {c['tp']} | {c['instances_per_machine']} | no | | | | {c['reason']} |")
    return "\n".join(lines)


def ranking_lines(checks: list[dict]) -> str:
    lines = []
    for check in checks:
        lines.append(
            f"{check['machine']}: estimated order {check['estimated_order']}, simulated {check['simulated_order']} "
            f"(tau {check['estimate_kendall_tau_mean']:+.2f}, top agrees {check['estimate_top_agrees_fraction']:.0%}); "
            f"static estimate {check['static_estimate_order']} (tau {check['static_estimate_kendall_tau_mean']:+.2f})")
    return "\n".join(lines)
