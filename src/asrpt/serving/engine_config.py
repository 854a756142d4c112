"""Settings of the serving engine that the memory model and the simulators share.

Defaults follow vLLM's (``gpu_memory_utilization`` 0.9, 256 sequences, 16-token KV
blocks, prefill batches of at most ``max(max_model_len, 2048)`` tokens without chunked
prefill); one object so the optimiser and the simulators cannot disagree about them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    #: Share of each device's memory the engine may use (vLLM ``gpu_memory_utilization``).
    memory_fraction: float = 0.9
    #: Per-device memory kept for activations and workspace (vLLM measures it with a
    #: profiling forward pass; 2 GiB matches DistServe's A100 KV capacities for OPT-13B).
    activation_reserve_gib: float = 2.0
    bytes_per_param: int = 2
    kv_bytes_per_element: int = 2
    max_num_seqs: int = 256
    block_size_tokens: int = 16
    #: Prompt tokens per prefill iteration; None means ``max(max_model_len, 2048)``.
    max_num_batched_tokens: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")
        if self.max_num_seqs < 1 or self.block_size_tokens < 1:
            raise ValueError("max_num_seqs and block_size_tokens must be >= 1")

    def prefill_token_budget(self, max_model_len: int) -> int:
        return self.max_num_batched_tokens or max(max_model_len, 2048)
