#!/usr/bin/env python3
"""Derive ``src/asrpt/data/speed_table.json`` from the public Gavel and Sia throughput profiles.

Run from the repository root (the default paths point at the shared trace copies)::

    python scripts/build_speed_table.py \
        --gavel /work/shared/traces/gavel/simulation_throughputs.json \
        --sia-seed /work/shared/traces/sia-throughput-profiles/seed-1gpu \
        --out src/asrpt/data/speed_table.json

What it does, in order (``src/asrpt/data/README.md`` explains the choices):

1. Gavel: for each of the 7 models take the isolated ("null") throughput at scale factor 1 for
   one representative batch size (``GAVEL_JOBS``) on k80/p100/v100. Step time = 1/throughput.
2. Sia: for each of the 6 apps take the one-GPU ``step_time`` at the largest local batch size
   that all five GPU types measured (t4/rtx/v100/quad/dgx), i.e. the throughput-bound regime.
3. Fill every (class, accelerator) cell that neither source measured by scaling the class's
   V100 step time (V100 is measured in both sources) with the median, over the classes where
   both are measured, of step_time[accelerator] / step_time[v100]. Cells are labelled
   ``measured:gavel``, ``measured:sia`` or ``filled:median-ratio-to-v100``.
4. Attach a communication profile per class (``PROFILES``): our reconstruction from public
   architecture facts, not a measurement.

Only the standard library is used so the script runs anywhere.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

#: Accelerator names of the table, in column order, and where each one's numbers come from.
ACCELERATORS = ("k80", "p100", "v100", "t4", "rtx2080ti", "rtx6000", "a100")
#: Reference accelerator for filling: the only type both sources measured.
PIVOT = "v100"

#: Gavel job type (as keyed in simulation_throughputs.json) chosen per workload class.
#: Batch sizes follow the examples quoted in the Gavel README copy (ResNet-50/Transformer 64,
#: LM 80); ResNet-18 128 is the usual CIFAR-10 batch; Recommendation takes the middle size.
GAVEL_JOBS = {
    "a3c": "A3C",
    "cyclegan": "CycleGAN",
    "lm": "LM (batch size 80)",
    "recommendation": "Recommendation (batch size 2048)",
    "resnet18": "ResNet-18 (batch size 128)",
    "resnet50": "ResNet-50 (batch size 64)",
    "transformer": "Transformer (batch size 64)",
}
GAVEL_TYPES = {"k80": "k80", "p100": "p100", "v100": "v100"}

SIA_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
#: Sia gpu_type -> our accelerator name (hardware per the Sia paper, see the trace README).
SIA_TYPES = {"t4": "t4", "rtx": "rtx2080ti", "v100": "v100", "quad": "rtx6000", "dgx": "a100"}

#: Names people and traces use for the same hardware (lookups are case-insensitive and ignore
#: '-', '_' and spaces). MISC is Alibaba PAI's K40m/K80/M60 pool, mapped to its most common and
#: slowest-profiled member; V100M16/V100M32 are PAI's 16/32 GB V100s.
ALIASES = {
    "v100m16": "v100",
    "v100m32": "v100",
    "v10016gb": "v100",
    "v10032gb": "v100",
    "misc": "k80",
    "dgx": "a100",
    "dgxext": "a100",
    "a10040gb": "a100",
    "rtx": "rtx2080ti",
    "2080ti": "rtx2080ti",
    "geforcertx2080ti": "rtx2080ti",
    "quad": "rtx6000",
    "quadrortx6000": "rtx6000",
    "teslat4": "t4",
    "teslav100": "v100",
    "teslap100": "p100",
    "teslak80": "k80",
}

#: Class-name aliases: the Gavel spellings and Sia's task descriptions.
CLASS_ALIASES = {
    "resnet-18": "resnet18",
    "resnet-50": "resnet50",
    "imagenet-resnet50": "imagenet",
    "cifar10-resnet18": "cifar10",
    "bert-base": "bert",
    "neumf": "ncf",
}

BYTES_PER_VALUE = 4  # fp32: all profiled runs are fp32 (Gavel, Pollux/Sia seeds).

#: Communication profile per class: our reconstruction, not measured. Fields:
#: params_m: trainable parameters, millions (gradient bytes all-reduced per iteration);
#: micro_batch: samples per micro-batch = the batch size whose step time the table uses;
#: act_mb_per_sample: activation size at a typical layer boundary, MB per sample (fp32),
#:   what a pipeline stage boundary sends forward (and its gradient backward);
#: tp_points: boundary-sized all-reduces per micro-batch under tensor parallelism, forward plus
#:   backward (Megatron transformer/LSTM layer: 4 per layer; channel-split conv layer: 2 per layer).
PROFILES = {
    # A3C (Atari): conv stack + 256-unit LSTM, ~1M params; 20-step rollout per update.
    "a3c": dict(params_m=1.0, micro_batch=20, act_mb_per_sample=0.001, tp_points=4 * 2),
    # CycleGAN: two ResNet generators (11.4M each) + two PatchGAN discriminators (2.8M each);
    # batch 1 at 256x256, 256 channels x 64x64 mid-generator.
    "cyclegan": dict(params_m=28.3, micro_batch=1, act_mb_per_sample=4.2, tp_points=2 * 24),
    # Word LM: 2-layer LSTM, 1500 hidden, 33k vocabulary (tied-off embeddings), bptt 35.
    "lm": dict(params_m=66.0, micro_batch=80, act_mb_per_sample=35 * 1500 * 4 / 1e6, tp_points=4 * 2),
    # Recommendation: autoencoder over ML-20M items, 512-wide hidden layers.
    "recommendation": dict(params_m=30.0, micro_batch=2048, act_mb_per_sample=512 * 4 / 1e6, tp_points=4 * 3),
    # ResNet-18 on CIFAR-10: 11.2M params; 128 channels x 16x16 mid-network.
    "resnet18": dict(params_m=11.2, micro_batch=128, act_mb_per_sample=128 * 16 * 16 * 4 / 1e6, tp_points=2 * 18),
    # ResNet-50 on ImageNet: 25.6M params; ~1 MB per image average layer output.
    "resnet50": dict(params_m=25.6, micro_batch=64, act_mb_per_sample=1.0, tp_points=2 * 50),
    # Transformer (base, Multi30k): ~52M params, d_model 512, ~30 tokens, 12 layers.
    "transformer": dict(params_m=52.0, micro_batch=64, act_mb_per_sample=30 * 512 * 4 / 1e6, tp_points=4 * 12),
    # BERT-base fine-tuning on SQuAD: 110M params, seq 384, hidden 768, 12 layers.
    "bert": dict(params_m=110.0, micro_batch=None, act_mb_per_sample=384 * 768 * 4 / 1e6, tp_points=4 * 12),
    # ResNet-18 on CIFAR-10 (Pollux/Sia "cifar10").
    "cifar10": dict(params_m=11.2, micro_batch=None, act_mb_per_sample=128 * 16 * 16 * 4 / 1e6, tp_points=2 * 18),
    # DeepSpeech2: ~38M params, 5 bidirectional recurrent layers (2 x 1024), ~200 frames.
    "deepspeech2": dict(params_m=38.0, micro_batch=None, act_mb_per_sample=200 * 2048 * 4 / 1e6, tp_points=4 * 5),
    # ResNet-50 on ImageNet (Pollux/Sia "imagenet").
    "imagenet": dict(params_m=25.6, micro_batch=None, act_mb_per_sample=1.0, tp_points=2 * 50),
    # NeuMF on MovieLens: embedding-heavy, ~5M params; 256-wide MLP input.
    "ncf": dict(params_m=5.0, micro_batch=None, act_mb_per_sample=256 * 4 / 1e6, tp_points=4 * 3),
    # YOLOv3 at 416x416: 61.9M params; 256 channels x 52x52 mid-network, ~75 conv layers.
    "yolov3": dict(params_m=61.9, micro_batch=None, act_mb_per_sample=256 * 52 * 52 * 4 / 1e6, tp_points=2 * 75),
}


def gavel_step_times(path: Path) -> tuple[dict[str, dict[str, float]], dict[str, int | None]]:
    """Step time (s) per class and accelerator from Gavel's isolated scale-factor-1 throughputs."""
    data = json.loads(path.read_text())
    out: dict[str, dict[str, float]] = {}
    batch: dict[str, int | None] = {}
    for cls, job in GAVEL_JOBS.items():
        key = str((job, 1))
        out[cls] = {}
        for worker_type, acc in GAVEL_TYPES.items():
            steps_per_s = float(data[worker_type][key]["null"])
            out[cls][acc] = 1.0 / steps_per_s
        batch[cls] = int(job.split("batch size ")[1].rstrip(")")) if "batch size" in job else None
    return out, batch


def sia_step_times(seed_dir: Path) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """One-GPU step time (s) per app and accelerator at the largest batch every type measured."""
    out: dict[str, dict[str, float]] = {}
    batch: dict[str, int] = {}
    for app in SIA_APPS:
        rows: dict[str, dict[int, float]] = {}
        with open(seed_dir / f"{app}.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                if row["placement"] != "1":
                    continue
                rows.setdefault(row["gpu_type"], {})[int(row["local_bsz"])] = float(row["step_time"])
        common = set.intersection(*(set(v) for v in rows.values()))
        if not common or set(rows) != set(SIA_TYPES):
            raise SystemExit(f"sia {app}: expected one-GPU rows for {sorted(SIA_TYPES)} with a common batch size")
        bsz = max(common)
        batch[app] = bsz
        out[app] = {SIA_TYPES[t]: rows[t][bsz] for t in SIA_TYPES}
    return out, batch


def fill(measured: dict[str, dict[str, float]]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]], dict[str, float]]:
    """Fill unmeasured cells by the median ratio to the pivot accelerator."""
    ratios: dict[str, float] = {}
    for acc in ACCELERATORS:
        r = [cells[acc] / cells[PIVOT] for cells in measured.values() if acc in cells and PIVOT in cells]
        if not r:
            raise SystemExit(f"no class measures both {acc} and {PIVOT}")
        ratios[acc] = statistics.median(r)
    table: dict[str, dict[str, float]] = {}
    origin: dict[str, dict[str, str]] = {}
    for cls, cells in measured.items():
        table[cls], origin[cls] = {}, {}
        for acc in ACCELERATORS:
            if acc in cells:
                table[cls][acc] = cells[acc]
                origin[cls][acc] = "measured:gavel" if cls in GAVEL_JOBS else "measured:sia"
            else:
                table[cls][acc] = cells[PIVOT] * ratios[acc]
                origin[cls][acc] = "filled:median-ratio-to-v100"
    return table, origin, ratios


def profiles(batch: dict[str, int | None]) -> dict[str, dict[str, float]]:
    out = {}
    for cls, spec in PROFILES.items():
        mb = spec["micro_batch"] or batch[cls] or 1
        act_gb = spec["act_mb_per_sample"] * mb / 1e3
        out[cls] = {
            "params_gb": round(spec["params_m"] * 1e6 * BYTES_PER_VALUE / 1e9, 6),
            "activation_gb_per_microbatch": round(act_gb, 6),
            "tp_allreduce_gb_per_microbatch": round(act_gb * spec["tp_points"], 6),
            "micro_batch_samples": mb,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gavel", type=Path, default=Path("/work/shared/traces/gavel/simulation_throughputs.json"))
    ap.add_argument("--sia-seed", type=Path, default=Path("/work/shared/traces/sia-throughput-profiles/seed-1gpu"))
    ap.add_argument("--out", type=Path, default=Path("src/asrpt/data/speed_table.json"))
    args = ap.parse_args()

    gavel, gavel_batch = gavel_step_times(args.gavel)
    sia, sia_batch = sia_step_times(args.sia_seed)
    measured = {**gavel, **sia}
    table, origin, ratios = fill(measured)
    batch: dict[str, int | None] = {**gavel_batch, **sia_batch}
    classes = list(GAVEL_JOBS) + list(SIA_APPS)
    doc = {
        "format": "asrpt-speed-table/1",
        "unit": "seconds per micro-batch, forward+backward, whole model, one accelerator",
        "generated_by": "scripts/build_speed_table.py",
        "sources": {
            "gavel": f"{args.gavel.name}: isolated throughput, scale factor 1 (stanford-futuredata/gavel, MIT)",
            "sia": f"seed-1gpu/*.csv step_time, placement 1 (siasosp23/artifacts; Pollux Apache-2.0)",
        },
        "fill_rule": f"step_time[c, a] = step_time[c, {PIVOT}] * median over measured classes of "
        f"step_time[., a] / step_time[., {PIVOT}]",
        "fill_ratios_to_v100": {a: round(r, 6) for a, r in ratios.items()},
        "accelerators": list(ACCELERATORS),
        "accelerator_aliases": ALIASES,
        "workload_classes": classes,
        "workload_class_aliases": CLASS_ALIASES,
        "batch_size": {c: batch[c] for c in classes},
        "step_time_s": {c: {a: round(table[c][a], 9) for a in ACCELERATORS} for c in classes},
        "origin": {c: origin[c] for c in classes},
        "profiles": profiles(batch),
        "profiles_note": "reconstructed from public architecture sizes (fp32), not measured; "
        "see PROFILES in scripts/build_speed_table.py",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(classes)} classes x {len(ACCELERATORS)} accelerators")
    for c in classes:
        cells = "  ".join(
            f"{a}={table[c][a]:.4f}{'' if origin[c][a].startswith('measured') else '*'}" for a in ACCELERATORS
        )
        print(f"  {c:15s} bs={batch[c]!s:5s} {cells}")
    print("  (* = filled)  ratios to v100:", {a: round(r, 3) for a, r in ratios.items()})


if __name__ == "__main__":
    main()
