"""Builders for the serving tests: synthetic latency models, instances and trace files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from asrpt.serving.latency_model import DecodeModel, InstanceLatency, PrefillModel
from asrpt.serving.request_sim import InstanceSpec

#: The shared measured data (profiles, Azure trace); tests that need it skip without it.
TRACES = Path(os.environ.get("ASRPT_TRACES_DIR", Path(__file__).resolve().parents[3] / "shared" / "traces"))


def trace_file(relative: str) -> Path:
    path = TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace data not found: {path} (set ASRPT_TRACES_DIR)")
    return path


def latency(scale: float = 1.0, *, per_cached_token_ms: float = 1e-4) -> InstanceLatency:
    """A Llama-2-70B-on-A100-like instance; ``scale`` < 1 is a faster accelerator."""
    return InstanceLatency(
        prefill=PrefillModel(intercept_ms=10 * scale, per_request_ms=20 * scale, per_prompt_token_ms=0.2 * scale,
                             per_squared_prompt_token_ms=1e-5 * scale),
        decode=DecodeModel(intercept_ms=40 * scale, per_request_ms=0.2 * scale, per_cached_token_ms=per_cached_token_ms * scale),
    )


def instance(name: str, scale: float = 1.0, kv_capacity_tokens: int = 40_000, tp: int = 2) -> InstanceSpec:
    return InstanceSpec(name=name, hardware=name, tp=tp, latency=latency(scale), kv_capacity_tokens=kv_capacity_tokens)


def write_azure_trace(path: Path, count: int = 400, seed: int = 0) -> Path:
    """A small file in the Azure trace's format with lognormal lengths."""
    rng = np.random.default_rng(seed)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(count):
        prompt = int(np.clip(rng.lognormal(6.5, 0.8), 5, 3900))
        output = int(np.clip(rng.lognormal(4.8, 0.9), 2, 900))
        lines.append(f"2023-11-16 18:{15 + i // 60:02d}:{i % 60:02d}.{i:07d},{prompt},{output}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_splitwise_profile(path: Path, *, hardware: str = "a100-80gb", tp: int = 2, scale: float = 1.0,
                            model: str = "llama2-70b", seed: int = 0, noise: float = 0.01) -> Path:
    """A perf_model.csv-shaped grid generated from :func:`latency` with multiplicative noise."""
    rng = np.random.default_rng(seed)
    truth = latency(scale)
    lines = ["model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,e2e_time,tensor_parallel"]
    points = [(p, 1, 128) for p in (128, 256, 512, 1024, 2048, 4096)] + [(512, b, 128) for b in (2, 4, 8, 16, 32)] \
        + [(512, 1, t) for t in (256, 1024, 4096)]
    for prompt, batch, tokens in points:
        for _ in range(3):
            pre = truth.prefill.time_ms(batch, batch * prompt, batch * prompt**2) * (1 + noise * rng.standard_normal())
            dec = truth.decode.time_ms(batch, batch * (prompt + tokens / 2)) * (1 + noise * rng.standard_normal())
            lines.append(f"{model},{hardware},{prompt},{batch},{tokens},1,0.7,{pre},{dec},{pre + tokens * dec},{tp}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
