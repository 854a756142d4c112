"""Accelerator types the serving tools know: names and device memory.

Profile files and cluster descriptions name accelerators loosely (``a100``, ``A100-80GB``);
latency fits are keyed by the canonical name here, so both sides must agree on it.
Memory is what the device reports (an "80 GB" A100 has 80 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from asrpt.serving.errors import UnknownAccelerator


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceleratorSpec:
    name: str
    memory_gib: float
    aliases: tuple[str, ...] = ()


KNOWN_ACCELERATORS: tuple[AcceleratorSpec, ...] = (
    AcceleratorSpec(name="a100-80gb", memory_gib=80.0, aliases=("a100", "a100-80g", "a100_80gb", "a100_dgx")),
    AcceleratorSpec(name="a100-40gb", memory_gib=40.0, aliases=("a100-40g",)),
    AcceleratorSpec(name="h100-80gb", memory_gib=80.0, aliases=("h100", "h100-80g", "h100_dgx")),
    #: The splitwise profile's power-capped H100 (same memory, slower prefill).
    AcceleratorSpec(name="h100-80gb-pcap", memory_gib=80.0, aliases=("h100-pcap",)),
    AcceleratorSpec(name="a40-48gb", memory_gib=48.0, aliases=("a40",)),
    AcceleratorSpec(name="v100-32gb", memory_gib=32.0, aliases=("v100",)),
    AcceleratorSpec(name="a800-80gb", memory_gib=80.0, aliases=("a800",)),
    AcceleratorSpec(name="ascend-910b", memory_gib=64.0, aliases=("910b",)),
)

_BY_NAME: dict[str, AcceleratorSpec] = {}
for _spec in KNOWN_ACCELERATORS:
    for _key in (_spec.name, *_spec.aliases):
        _BY_NAME[_key.lower()] = _spec


def known_accelerator_names() -> list[str]:
    return [spec.name for spec in KNOWN_ACCELERATORS]


def find_accelerator(name: str) -> AcceleratorSpec | None:
    return _BY_NAME.get(name.strip().lower())


def get_accelerator(name: str) -> AcceleratorSpec:
    """The spec for ``name``; raises :class:`UnknownAccelerator` listing the known ones."""
    spec = find_accelerator(name)
    if spec is None:
        raise UnknownAccelerator(
            f"unknown accelerator {name!r}; known accelerators: {', '.join(known_accelerator_names())}"
        )
    return spec


def canonical_accelerator_name(name: str) -> str:
    spec = find_accelerator(name)
    return spec.name if spec is not None else name.strip().lower()
