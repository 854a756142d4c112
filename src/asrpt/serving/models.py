"""Shapes of the LLMs the serving tools know, for memory sizing and name matching.

The deployment optimiser needs a model's weight bytes and KV-cache bytes per token, and
tensor parallelism needs the head counts; profile files spell the same model in different
ways (``llama2-70b``, ``Llama-2-70b-hf``, ``facebook/opt-13b``). One table answers both, so
an unknown name fails here with the list of known ones instead of deep inside a search.
Figures are from each model's published configuration (``config.json``).
"""

from __future__ import annotations

from dataclasses import dataclass

from asrpt.serving.errors import UnknownModel


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One decoder-only transformer as vLLM would load it (fp16/bf16 weights)."""

    name: str
    #: Total parameters (embeddings included).
    params: float
    layers: int
    #: Query (attention) heads; tensor parallelism must divide this.
    heads: int
    #: Key/value heads (fewer than ``heads`` under grouped-query attention).
    kv_heads: int
    head_dim: int
    #: Longest sequence (prompt + output) the engine is configured for, in tokens.
    max_model_len: int
    #: Other spellings found in profile files and on the hub.
    aliases: tuple[str, ...] = ()

    @property
    def hidden_size(self) -> int:
        return self.heads * self.head_dim


KNOWN_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(name="llama2-7b", params=6.74e9, layers=32, heads=32, kv_heads=32, head_dim=128,
              max_model_len=4096, aliases=("llama-2-7b", "llama-2-7b-hf", "meta-llama/llama-2-7b-hf")),
    ModelSpec(name="llama2-13b", params=13.0e9, layers=40, heads=40, kv_heads=40, head_dim=128,
              max_model_len=4096, aliases=("llama-2-13b", "llama-2-13b-hf", "meta-llama/llama-2-13b-hf")),
    ModelSpec(name="llama2-70b", params=68.98e9, layers=80, heads=64, kv_heads=8, head_dim=128,
              max_model_len=4096, aliases=("llama-2-70b", "llama-2-70b-hf", "meta-llama/llama-2-70b-hf")),
    ModelSpec(name="llama3-8b", params=8.03e9, layers=32, heads=32, kv_heads=8, head_dim=128,
              max_model_len=8192, aliases=("meta-llama-3-8b", "meta-llama/meta-llama-3-8b", "llama-3-8b")),
    ModelSpec(name="llama3-70b", params=70.55e9, layers=80, heads=64, kv_heads=8, head_dim=128,
              max_model_len=8192, aliases=("meta-llama-3-70b", "meta-llama/meta-llama-3-70b", "llama-3-70b")),
    ModelSpec(name="mistral-7b", params=7.24e9, layers=32, heads=32, kv_heads=8, head_dim=128,
              max_model_len=8192, aliases=("mistral-7b-v0.1", "mistralai/mistral-7b-v0.1")),
    ModelSpec(name="qwen2.5-14b", params=14.77e9, layers=48, heads=40, kv_heads=8, head_dim=128,
              max_model_len=8192,
              aliases=("qwen/qwen2.5-14b", "deepseek-r1-distill-qwen-14b",
                       "deepseek-ai/deepseek-r1-distill-qwen-14b")),
    ModelSpec(name="opt-13b", params=12.85e9, layers=40, heads=40, kv_heads=40, head_dim=128,
              max_model_len=2048, aliases=("facebook/opt-13b",)),
    ModelSpec(name="opt-66b", params=65.7e9, layers=64, heads=72, kv_heads=72, head_dim=128,
              max_model_len=2048, aliases=("facebook/opt-66b",)),
    ModelSpec(name="opt-175b", params=175.0e9, layers=96, heads=96, kv_heads=96, head_dim=128,
              max_model_len=2048, aliases=("facebook/opt-175b",)),
    ModelSpec(name="bloom-176b", params=176.25e9, layers=70, heads=112, kv_heads=112, head_dim=128,
              max_model_len=2048, aliases=("bigscience/bloom", "bloom")),
)

_BY_NAME: dict[str, ModelSpec] = {}
for _spec in KNOWN_MODELS:
    for _key in (_spec.name, *_spec.aliases):
        _BY_NAME[_key.lower()] = _spec


def known_model_names() -> list[str]:
    return [spec.name for spec in KNOWN_MODELS]


def find_model(name: str) -> ModelSpec | None:
    """The spec for ``name`` (any known spelling, case-insensitive), or None."""
    return _BY_NAME.get(name.strip().lower())


def get_model(name: str) -> ModelSpec:
    """The spec for ``name``; raises :class:`UnknownModel` listing the known names."""
    spec = find_model(name)
    if spec is None:
        raise UnknownModel(f"unknown model {name!r}; known models: {', '.join(known_model_names())}")
    return spec


def canonical_model_name(name: str) -> str:
    """The table's name for ``name`` when known, else ``name`` lower-cased (fits of
    models outside the table still work; only memory sizing needs the table)."""
    spec = find_model(name)
    return spec.name if spec is not None else name.strip().lower()
