"""Held-out error of the fits on the real profile files (skipped without the shared data).

Thresholds are the measured per-file held-out median APE (4-fold grouped cross-validation,
seed 0) plus a margin, rounded up:

=================  ===========================  ==========================  ==========
source             measured prefill             measured decode             threshold
=================  ===========================  ==========================  ==========
splitwise          8.3 % (keys 3.6-18.5 %)      1.6 % (keys 0.9-5.4 %)      12 % / 4 %
vidur (6 files)    2.4-4.1 %                    4.1-8.2 %                   6 % / 12 %
distserve (8)      5.4-10.5 %                   0.8-11.4 %                  15 % / 15 %
=================  ===========================  ==========================  ==========

The margins cover a different fold seed (the splitwise keys have only 13 distinct prefill
points each, so one point moves a key's median by several percent). For scale, Vidur
reports under 9 % error for its (non-linear, per-operator) predictors.
"""

import pytest

from asrpt.serving.fitting import fit_profiles
from asrpt.serving.profiles import read_profile

from tests.serving.helpers import trace_file


def _file_errors(document, path):
    entry = document["files"][str(path)]
    return entry["prefill_heldout_median_ape"], entry["decode_heldout_median_ape"]


def test_splitwise_heldout_error():
    path = trace_file("splitwise-sim-perf-model/perf_model.csv")
    document = fit_profiles([read_profile(path, "splitwise")])
    prefill, decode = _file_errors(document, path)
    assert prefill < 0.12
    assert decode < 0.04
    assert len(document["fits"]) == 12  # llama2-70b x 3 hardware x 3 TP, bloom-176b x 3 hardware
    # The failed batch-64 TP2 runs (a tenth of the batch-32 time) are dropped, not fitted.
    assert len(document["fits"]["llama2-70b/a100-80gb/tp2"]["prefill"]["trimmed"]) == 5


@pytest.mark.parametrize("relative", ["compute/a100/Llama-2-7b-hf/mlp.csv", "compute/h100/Llama-2-70b-hf/mlp.csv",
                                      "compute/a40/Llama-2-70b-hf/mlp.csv"])
def test_vidur_heldout_error(relative):
    path = trace_file(f"vidur-profiling/{relative}")
    document = fit_profiles([read_profile(path, "vidur")])
    prefill, decode = _file_errors(document, path)
    assert prefill < 0.06
    assert decode < 0.12
    some_fit = next(iter(document["fits"].values()))
    # No attention in Vidur's mlp.csv: the terms it drives are reported, not invented.
    assert "per_squared_prompt_token_ms" in some_fit["prefill"]["unidentified"]
    assert "per_cached_token_ms" in some_fit["decode"]["unidentified"]


def test_distserve_heldout_error_and_agreement_with_distserve_profiler():
    folder = trace_file("distserve-a100/ground-truth-opt13b-sharegpt-vllm")
    paths = sorted(folder.glob("vllm-*.exp"))
    document = fit_profiles([read_profile(p, "distserve") for p in paths])
    for path in paths:
        prefill, decode = _file_errors(document, path)
        assert prefill < 0.15, path.name
        assert decode < 0.15, path.name
    fit = document["fits"]["opt-13b/a100-80gb/tp1"]["decode"]["coefficients"]
    # Reconstructed from client timestamps only, yet close to DistServe's own profiler fit
    # for vLLM OPT-13B TP1 (profiler-a100-80g.vllm.json): 0.000593 ms per cached token in
    # decode, 0.1405 ms per prompt token in prefill (seen here as the decode stall).
    assert fit["per_cached_token_ms"] == pytest.approx(0.000593, rel=0.25)
    assert fit["per_interleaved_prefill_token_ms"] == pytest.approx(0.1405, rel=0.25)
