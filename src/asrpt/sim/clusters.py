"""Cluster descriptions for the simulator: TOML files, validated once, turned into core objects.

A cluster file is a list of partitions, each a number of identical nodes::

    name = "testbed"                     # optional; defaults to the file name
    description = "what and why"         # optional

    [[partitions]]
    name = "a100"                        # unique; nodes are named a100-001, a100-002, ...
    accelerator = "a100"                 # speed-table type (or alias: "V100M32", "MISC", ...)
    nodes = 2
    accelerators_per_node = 8
    intra_node_gbps = 300.0              # optional, GB/s between accelerators of a node
    inter_node_gbps = 25.0               # optional, GB/s per node NIC
    # relative_speed = 0.8               # only for a type the speed table does not know:
    # relative_to = "a100"               #   0.8 x as fast as a100 (relative_to defaults to v100)

Built-in clusters ship as TOML files in ``asrpt/data/clusters/`` (:func:`builtin_clusters`);
each documents its sizes, bandwidths and why. Validation errors are :class:`ConfigError` s
that name the file, the partition and the key, and list the valid keys.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from asrpt.core.model import Node, Partition
from asrpt.core.speed import SpeedTable, default_speed_table
from asrpt.exceptions import ConfigError

__all__ = ["RelativeSpeed", "ClusterSpec", "load_cluster", "parse_cluster", "builtin_clusters"]

_TOP_KEYS = ("name", "description", "partitions")
_PARTITION_KEYS = (
    "name", "accelerator", "nodes", "accelerators_per_node",
    "intra_node_gbps", "inter_node_gbps", "relative_speed", "relative_to",
)
_REQUIRED_PARTITION_KEYS = ("name", "accelerator", "nodes", "accelerators_per_node")
_DEFAULT_RELATIVE_TO = "v100"
# Slurm partition names: keep to characters that survive node lists and shell quoting.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_BUILTIN_DIR = "data/clusters"


@dataclass(frozen=True, slots=True, kw_only=True)
class RelativeSpeed:
    """An accelerator type the speed table lacks, defined as a multiple of a known one."""

    accelerator: str
    #: How many times as fast as ``reference`` (0.8 = 20 % slower per micro-batch).
    factor: float
    reference: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """A validated cluster: partitions and their (all free) nodes, ready for the simulator."""

    name: str
    description: str
    partitions: tuple[Partition, ...]
    #: Every node, all accelerators free, named ``<partition>-001`` onwards.
    nodes: tuple[Node, ...]
    #: Types added to the speed table by :meth:`speed_table`, in file order.
    relative_speeds: tuple[RelativeSpeed, ...] = ()
    #: Where it came from ("builtin:pai" or a file path), for reports.
    source: str = ""

    @property
    def accelerators_total(self) -> int:
        return sum(n.accelerators_total for n in self.nodes)

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)

    def accelerators_per_node(self, partition: str) -> int:
        """Accelerators of one node of ``partition`` (all nodes of a partition are alike)."""
        for node in self.nodes:
            if node.partition == partition:
                return node.accelerators_total
        raise KeyError(partition)

    def speed_table(self, base: SpeedTable) -> SpeedTable:
        """``base`` plus a column for each :attr:`relative_speeds` type it does not know yet.

        Types ``base`` already knows keep ``base``'s numbers, so applying this twice is harmless.
        """
        table = base
        for rel in self.relative_speeds:
            if not table.knows(rel.accelerator):
                table = table.with_relative_speed(rel.accelerator, rel.factor, rel.reference)
        return table

    def summary(self) -> str:
        """One line per partition, for reports and ``--help`` texts."""
        lines = [f"cluster {self.name}: {self.accelerators_total} accelerators on {len(self.nodes)} nodes"]
        for p in self.partitions:
            count = sum(1 for n in self.nodes if n.partition == p.name)
            lines.append(
                f"  {p.name}: {count} x {self.accelerators_per_node(p.name)} {p.accelerator}, "
                f"intra {p.intra_node_gbps:g} GB/s, inter {p.inter_node_gbps:g} GB/s"
            )
        return "\n".join(lines)


def builtin_clusters() -> tuple[str, ...]:
    """Names of the clusters shipped with asrpt (usable wherever a cluster file is)."""
    folder = resources.files("asrpt").joinpath(_BUILTIN_DIR)
    return tuple(sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml")))


def load_cluster(name_or_path: str | os.PathLike[str], *, speed: SpeedTable | None = None) -> ClusterSpec:
    """A built-in cluster by name (:func:`builtin_clusters`) or a cluster TOML file by path.

    ``speed`` (default: the packaged table) decides which accelerator types are known, and so
    which partitions must give ``relative_speed``.
    """
    path = Path(name_or_path)
    text_name = str(name_or_path)
    looks_like_path = isinstance(name_or_path, os.PathLike) or text_name.endswith(".toml") or os.sep in text_name
    if path.is_file() or looks_like_path:
        if not path.is_file():
            raise ConfigError(f"cluster file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read cluster file {path}: {exc}") from exc
        return parse_cluster(text, source=str(path), default_name=_stem(path.name), speed=speed)
    names = builtin_clusters()
    if text_name not in names:
        close = difflib.get_close_matches(text_name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"unknown cluster {text_name!r}{hint}; built-in clusters: {', '.join(names)}; "
            "or give the path to a cluster .toml file"
        )
    text = resources.files("asrpt").joinpath(f"{_BUILTIN_DIR}/{text_name}.toml").read_text(encoding="utf-8")
    return parse_cluster(text, source=f"builtin:{text_name}", default_name=text_name, speed=speed)


def parse_cluster(
    text: str, *, source: str = "<string>", default_name: str = "cluster", speed: SpeedTable | None = None
) -> ClusterSpec:
    """Validate cluster TOML ``text`` (see the module docstring for the keys)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    table = speed if speed is not None else default_speed_table()
    _reject_unknown(doc, _TOP_KEYS, f"{source}: top level")
    name = _string(doc, "name", f"{source}: top level", default=default_name)
    description = _string(doc, "description", f"{source}: top level", default="")
    raw_partitions = doc.get("partitions")
    if raw_partitions is None:
        raise ConfigError(f"{source}: no [[partitions]]; a cluster needs at least one")
    if not isinstance(raw_partitions, list) or not raw_partitions or not all(isinstance(p, dict) for p in raw_partitions):
        raise ConfigError(f"{source}: 'partitions' must be a non-empty list of tables ([[partitions]])")

    partitions: list[Partition] = []
    nodes: list[Node] = []
    relative: dict[str, RelativeSpeed] = {}
    known_extra: set[str] = set()  # lower-case types defined by relative_speed so far
    seen_names: dict[str, int] = {}
    for index, raw in enumerate(raw_partitions):
        where = f"{source}: partitions[{index}]"
        if isinstance(raw.get("name"), str):
            where += f" ({raw['name']!r})"
        _reject_unknown(raw, _PARTITION_KEYS, where)
        for key in _REQUIRED_PARTITION_KEYS:
            if key not in raw:
                raise ConfigError(f"{where}: missing required key {key!r}; required: {', '.join(_REQUIRED_PARTITION_KEYS)}")
        pname = _string(raw, "name", where)
        if not _NAME_RE.match(pname):
            raise ConfigError(f"{where}: name {pname!r} must start with a letter or digit and use only letters, digits, '_', '.', '-'")
        if pname.lower() in seen_names:
            raise ConfigError(f"{where}: duplicate partition name {pname!r} (also partitions[{seen_names[pname.lower()]}])")
        seen_names[pname.lower()] = index
        accelerator = _string(raw, "accelerator", where)
        count = _positive_int(raw, "nodes", where)
        per_node = _positive_int(raw, "accelerators_per_node", where)
        intra = _positive_float(raw, "intra_node_gbps", where, default=Partition.__dataclass_fields__["intra_node_gbps"].default)
        inter = _positive_float(raw, "inter_node_gbps", where, default=Partition.__dataclass_fields__["inter_node_gbps"].default)

        known = table.knows(accelerator) or accelerator.lower() in known_extra
        if "relative_speed" in raw:
            factor = _positive_float(raw, "relative_speed", where)
            reference = _string(raw, "relative_to", where, default=_DEFAULT_RELATIVE_TO)
            if table.knows(accelerator):
                raise ConfigError(
                    f"{where}: accelerator {accelerator!r} is in the speed table already; relative_speed "
                    "is only for types it does not know (remove relative_speed, or use a new type name)"
                )
            if not (table.knows(reference) or reference.lower() in known_extra):
                raise ConfigError(
                    f"{where}: relative_to {reference!r} is not a known accelerator; "
                    f"known: {', '.join(table.accelerators)}"
                )
            rel = RelativeSpeed(accelerator=accelerator, factor=factor, reference=reference)
            previous = relative.get(accelerator.lower())
            if previous is None:
                relative[accelerator.lower()] = rel
                known_extra.add(accelerator.lower())
            elif (previous.factor, previous.reference.lower()) != (factor, reference.lower()):
                raise ConfigError(
                    f"{where}: accelerator {accelerator!r} was given relative_speed {previous.factor:g} of "
                    f"{previous.reference!r} by an earlier partition; one type has one speed"
                )
        elif "relative_to" in raw:
            raise ConfigError(f"{where}: relative_to needs relative_speed")
        elif not known:
            raise ConfigError(
                f"{where}: accelerator {accelerator!r} is not in the speed table; add relative_speed = <factor> "
                f"(and relative_to = <known type>, default {_DEFAULT_RELATIVE_TO!r}). "
                f"Known types: {', '.join(table.accelerators)}"
            )

        partitions.append(Partition(name=pname, accelerator=accelerator, intra_node_gbps=intra, inter_node_gbps=inter))
        width = max(3, len(str(count)))
        nodes.extend(
            Node(name=f"{pname}-{i:0{width}d}", partition=pname, accelerator=accelerator,
                 accelerators_total=per_node, accelerators_free=per_node)
            for i in range(1, count + 1)
        )

    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:3]
        raise ConfigError(f"{source}: partition names produce clashing node names {dup}; rename a partition")
    return ClusterSpec(
        name=name,
        description=description,
        partitions=tuple(partitions),
        nodes=tuple(nodes),
        relative_speeds=tuple(relative.values()),
        source=source,
    )


# -- validation helpers --------------------------------------------------------------------------


def _stem(filename: str) -> str:
    return filename[: -len(".toml")] if filename.endswith(".toml") else filename


def _reject_unknown(table: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(valid)}")


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(value), type(value).__name__
    )


def _string(table: Mapping[str, Any], key: str, where: str, *, default: str | None = None) -> str:
    if key not in table:
        if default is None:
            raise ConfigError(f"{where}: missing required key {key!r}")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, got {_type_name(value)} {value!r}")
    if key != "description" and not value.strip():
        raise ConfigError(f"{where}: {key} must not be empty")
    return value.strip() if key != "description" else value


def _positive_int(table: Mapping[str, Any], key: str, where: str) -> int:
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key} must be an integer, got {_type_name(value)} {value!r}")
    if value < 1:
        raise ConfigError(f"{where}: {key} must be positive, got {value}")
    return value


def _positive_float(table: Mapping[str, Any], key: str, where: str, *, default: float | None = None) -> float:
    if key not in table:
        if default is None:
            raise ConfigError(f"{where}: missing required key {key!r}")
        return float(default)
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key} must be a number, got {_type_name(value)} {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {key} must be positive and finite, got {value!r}")
    return float(value)
