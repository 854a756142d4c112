"""Does a model fit on t accelerators, and how many KV-cache tokens are left if it does.

An instance of tensor-parallel degree t holds the weights split t ways and fills what is
left of ``t * memory * fraction`` (minus a per-device activation reserve) with KV blocks.
vLLM refuses to start when that cache cannot hold one ``max_model_len`` sequence, and
requires t to divide the attention heads; KV heads are replicated when t exceeds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.hardware import AcceleratorSpec
from asrpt.serving.models import ModelSpec

GIB = float(1 << 30)


def weight_bytes(model: ModelSpec, engine: EngineConfig) -> float:
    return model.params * engine.bytes_per_param


def kv_bytes_per_token(model: ModelSpec, tp: int, engine: EngineConfig) -> float:
    """KV bytes one token occupies across the whole instance (K and V, every layer).
    With t > kv_heads each device keeps one replicated KV head, so t heads in total."""
    stored_heads = max(model.kv_heads, tp)
    return 2.0 * model.layers * stored_heads * model.head_dim * engine.kv_bytes_per_element


def kv_capacity_tokens(model: ModelSpec, accelerator: AcceleratorSpec, tp: int, engine: EngineConfig) -> int:
    """Tokens the instance's KV cache holds, whole blocks only (<= 0 if the weights do
    not fit)."""
    usable = tp * (accelerator.memory_gib * engine.memory_fraction - engine.activation_reserve_gib) * GIB
    free = usable - weight_bytes(model, engine)
    if free <= 0:
        return int(free // kv_bytes_per_token(model, tp, engine))
    blocks = int(free // (kv_bytes_per_token(model, tp, engine) * engine.block_size_tokens))
    return blocks * engine.block_size_tokens


@dataclass(frozen=True, slots=True)
class Feasibility:
    feasible: bool
    #: Why not, in words an operator can act on; None when feasible.
    reason: str | None
    kv_capacity_tokens: int


def check_feasible(model: ModelSpec, accelerator: AcceleratorSpec, tp: int, engine: EngineConfig,
                   *, gpus_per_machine: int | None = None) -> Feasibility:
    """Whether an instance of ``model`` on ``tp`` accelerators can start."""
    capacity = kv_capacity_tokens(model, accelerator, tp, engine)
    if tp < 1:
        return Feasibility(False, f"tensor-parallel degree must be >= 1, got {tp}", 0)
    if gpus_per_machine is not None and gpus_per_machine % tp:
        return Feasibility(False, f"t={tp} does not divide the machine's {gpus_per_machine} accelerators", capacity)
    if model.heads % tp:
        return Feasibility(False, f"{model.heads} attention heads are not divisible by t={tp}", capacity)
    if model.kv_heads % tp and tp % model.kv_heads:
        return Feasibility(False, f"{model.kv_heads} KV heads neither divisible by nor dividing t={tp}", capacity)
    usable_gib = tp * (accelerator.memory_gib * engine.memory_fraction - engine.activation_reserve_gib)
    weights_gib = weight_bytes(model, engine) / GIB
    if weights_gib >= usable_gib:
        return Feasibility(False, f"weights {weights_gib:.1f} GiB exceed usable {usable_gib:.1f} GiB "
                                  f"on {tp} x {accelerator.name}", capacity)
    if capacity < model.max_model_len:
        return Feasibility(False, f"KV cache holds {capacity} tokens, fewer than max_model_len "
                                  f"{model.max_model_len}", capacity)
    return Feasibility(True, None, capacity)
