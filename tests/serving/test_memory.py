"""Memory feasibility: weights + KV cache at the engine's memory fraction, head divisibility."""

import pytest

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.errors import UnknownAccelerator, UnknownModel
from asrpt.serving.hardware import get_accelerator
from asrpt.serving.memory import check_feasible, kv_bytes_per_token, kv_capacity_tokens
from asrpt.serving.models import canonical_model_name, get_model

A100 = get_accelerator("a100")
ENGINE = EngineConfig()


def test_70b_does_not_fit_one_80gb_gpu_but_fits_two():
    model = get_model("llama2-70b")
    single = check_feasible(model, A100, 1, ENGINE)
    assert not single.feasible and "weights 128.5 GiB exceed usable 70.0 GiB" in single.reason
    assert check_feasible(model, A100, 2, ENGINE).feasible


def test_heads_must_divide_by_tp():
    three = check_feasible(get_model("llama2-70b"), A100, 3, ENGINE)  # 64 heads
    assert not three.feasible and "64 attention heads are not divisible by t=3" in three.reason
    assert check_feasible(get_model("opt-66b"), A100, 3, ENGINE).feasible  # 72 heads


def test_tp_must_divide_the_machine():
    result = check_feasible(get_model("llama2-7b"), A100, 4, ENGINE, gpus_per_machine=6)
    assert not result.feasible and "does not divide" in result.reason


def test_kv_cache_must_hold_one_full_sequence():
    # Llama-2-70B on two A100s at memory fraction 0.83: the 128.5 GiB of weights fit in
    # 128.8 GiB, leaving room for about a thousand tokens, not one 4096-token sequence.
    result = check_feasible(get_model("llama2-70b"), A100, 2, EngineConfig(memory_fraction=0.83))
    assert not result.feasible
    assert "fewer than max_model_len 4096" in result.reason
    assert 0 < result.kv_capacity_tokens < 4096


@pytest.mark.parametrize("model, tp, distserve_tokens", [
    ("opt-13b", 1, 66144), ("opt-13b", 2, 163008), ("opt-13b", 4, 356736), ("opt-13b", 8, 744208),
    ("opt-66b", 2, 11600), ("opt-66b", 4, 78496), ("opt-66b", 8, 212304),
])
def test_kv_capacity_matches_distserve_on_a100(model, tp, distserve_tokens):
    # DistServe's max_num_tokens.csv (A100-80GB, pp=1), which ran at memory fraction 0.95.
    tokens = kv_capacity_tokens(get_model(model), A100, tp, EngineConfig(memory_fraction=0.95))
    assert tokens == pytest.approx(distserve_tokens, rel=0.01)


def test_kv_heads_are_replicated_beyond_their_count():
    model = get_model("llama2-70b")  # 8 KV heads
    assert kv_bytes_per_token(model, 16, ENGINE) == 2 * kv_bytes_per_token(model, 8, ENGINE)
    assert kv_bytes_per_token(model, 4, ENGINE) == kv_bytes_per_token(model, 8, ENGINE)


def test_unknown_model_lists_known_ones():
    with pytest.raises(UnknownModel, match="unknown model 'gpt-5'; known models: llama2-7b, .*bloom-176b"):
        get_model("gpt-5")


def test_model_spellings_from_the_profiles_resolve():
    assert canonical_model_name("Llama-2-70b-hf") == "llama2-70b"
    assert canonical_model_name("facebook/opt-13b") == "opt-13b"
    assert canonical_model_name("my-own-model") == "my-own-model"


def test_unknown_accelerator_lists_known_ones():
    with pytest.raises(UnknownAccelerator, match="known accelerators: a100-80gb"):
        get_accelerator("tpu-v9")
