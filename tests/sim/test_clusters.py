"""Cluster TOML: built-ins load, validation errors name the problem, relative speeds apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrpt.core.speed import default_speed_table
from asrpt.exceptions import ConfigError
from asrpt.sim.clusters import ClusterSpec, RelativeSpeed, builtin_clusters, load_cluster, parse_cluster

GOOD = """
name = "small"
[[partitions]]
name = "a100"
accelerator = "a100"
nodes = 2
accelerators_per_node = 8
intra_node_gbps = 300.0
inter_node_gbps = 25
"""


def _partition(**fields: object) -> str:
    base: dict[str, object] = {"name": "p", "accelerator": "v100", "nodes": 1, "accelerators_per_node": 4}
    base.update(fields)
    lines = ["[[partitions]]"]
    for key, value in base.items():
        if value is None:
            continue
        lines.append(f"{key} = {value!r}".replace("'", '"') if not isinstance(value, bool) else f"{key} = {str(value).lower()}")
    return "\n".join(lines) + "\n"


EXPECTED_SIZES = {
    "pai-full": {"misc": (280, 8), "p100": (798, 2), "t4": (497, 2), "v100": (104, 8), "v100m32": (135, 8)},
    "pai": {"misc": (35, 8), "p100": (100, 2), "t4": (62, 2), "v100": (13, 8), "v100m32": (17, 8)},
    "philly": {"v100": (80, 8)},
    "gavel": {"v100": (32, 4), "p100": (32, 4), "k80": (32, 4)},
    "testbed": {"a100": (2, 8), "v100": (1, 4), "npu": (1, 8)},
}


def test_builtin_clusters_all_load_with_documented_sizes():
    assert set(builtin_clusters()) == set(EXPECTED_SIZES)
    for name, partitions in EXPECTED_SIZES.items():
        cluster = load_cluster(name)
        assert cluster.name == name and cluster.source == f"builtin:{name}"
        assert cluster.description
        sizes = {p.name: (sum(1 for n in cluster.nodes if n.partition == p.name), cluster.accelerators_per_node(p.name))
                 for p in cluster.partitions}
        assert sizes == partitions
        assert all(n.accelerators_free == n.accelerators_total for n in cluster.nodes)
    assert load_cluster("pai-full").accelerators_total == 6742


def test_builtin_files_are_documented():
    folder = Path(__file__).resolve().parents[2] / "src" / "asrpt" / "data" / "clusters"
    for name in EXPECTED_SIZES:
        text = (folder / f"{name}.toml").read_text()
        assert sum(1 for line in text.splitlines() if line.startswith("#")) >= 5, name


def test_testbed_npu_relative_speed():
    cluster = load_cluster("testbed")
    assert cluster.relative_speeds == (RelativeSpeed(accelerator="npu-910b", factor=0.8, reference="a100"),)
    assert [n.name for n in cluster.nodes] == ["a100-001", "a100-002", "v100-001", "npu-001"]
    base = default_speed_table()
    assert not base.knows("npu-910b")
    table = cluster.speed_table(base)
    assert table.knows("npu-910b")
    for workload_class in table.workload_classes:
        assert table.step_time_s(workload_class, "npu-910b") == pytest.approx(
            table.step_time_s(workload_class, "a100") / 0.8)
    assert cluster.speed_table(table) is table  # applying twice is harmless


def test_parse_good_file_and_load_by_path(tmp_path):
    cluster = parse_cluster(GOOD)
    assert isinstance(cluster, ClusterSpec)
    (part,) = cluster.partitions
    assert (part.name, part.accelerator, part.intra_node_gbps, part.inter_node_gbps) == ("a100", "a100", 300.0, 25.0)
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace('name = "small"\n', ""))
    loaded = load_cluster(path)
    assert loaded.name == "mine" and loaded.source == str(path) and loaded.accelerators_total == 16
    assert load_cluster(str(path)).partitions == loaded.partitions


def test_defaults_for_bandwidths():
    cluster = parse_cluster(_partition())
    assert cluster.partitions[0].intra_node_gbps == 150.0 and cluster.partitions[0].inter_node_gbps == 12.5


def test_typo_names_the_key_and_lists_valid_keys():
    with pytest.raises(ConfigError) as info:
        parse_cluster(_partition(acelerators_per_node=4, accelerators_per_node=None), source="c.toml")
    message = str(info.value)
    assert "'acelerators_per_node'" in message and "did you mean 'accelerators_per_node'" in message
    assert "valid keys: name, accelerator, nodes, accelerators_per_node" in message
    assert "c.toml" in message and "partitions[0]" in message


def test_top_level_typo():
    with pytest.raises(ConfigError, match=r"unknown key 'partition'.*did you mean 'partitions'.*valid keys"):
        parse_cluster('[[partition]]\nname = "x"\n')


@pytest.mark.parametrize("fields, pattern", [
    ({"nodes": "2"}, r"nodes must be an integer, got string '2'"),
    ({"nodes": 2.0}, r"nodes must be an integer, got float"),
    ({"nodes": True}, r"nodes must be an integer, got boolean"),
    ({"nodes": 0}, r"nodes must be positive"),
    ({"accelerators_per_node": -8}, r"accelerators_per_node must be positive"),
    ({"intra_node_gbps": 0}, r"intra_node_gbps must be positive"),
    ({"inter_node_gbps": "fast"}, r"inter_node_gbps must be a number"),
    ({"accelerator": None}, r"missing required key 'accelerator'"),
    ({"name": ""}, r"name must not be empty"),
    ({"name": "a b"}, r"name 'a b' must start with"),
    ({"relative_to": "a100"}, r"relative_to needs relative_speed"),
])
def test_bad_values(fields, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_cluster(_partition(**fields))


def test_duplicate_partition_names():
    with pytest.raises(ConfigError, match=r"duplicate partition name 'p'"):
        parse_cluster(_partition() + _partition(accelerator="a100"))


def test_no_partitions_and_bad_toml():
    with pytest.raises(ConfigError, match="no \\[\\[partitions\\]\\]"):
        parse_cluster('name = "x"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_cluster("[[partitions]\n")


def test_relative_speed_required_for_unknown_accelerator():
    with pytest.raises(ConfigError) as info:
        parse_cluster(_partition(accelerator="mi300x"))
    message = str(info.value)
    assert "'mi300x' is not in the speed table" in message and "relative_speed" in message and "a100" in message
    cluster = parse_cluster(_partition(accelerator="mi300x", relative_speed=2.5))
    assert cluster.relative_speeds == (RelativeSpeed(accelerator="mi300x", factor=2.5, reference="v100"),)
    table = cluster.speed_table(default_speed_table())
    assert table.step_time_s("bert", "mi300x") == pytest.approx(table.step_time_s("bert", "v100") / 2.5)


def test_relative_speed_rules():
    with pytest.raises(ConfigError, match="in the speed table already"):
        parse_cluster(_partition(accelerator="a100", relative_speed=1.1))
    with pytest.raises(ConfigError, match="relative_to 'tpu' is not a known accelerator"):
        parse_cluster(_partition(accelerator="npu", relative_speed=0.5, relative_to="tpu"))
    with pytest.raises(ConfigError, match="one type has one speed"):
        parse_cluster(_partition(name="n1", accelerator="npu", relative_speed=0.5)
                      + _partition(name="n2", accelerator="npu", relative_speed=0.7))
    # A second partition of an already defined type needs no repetition.
    two = parse_cluster(_partition(name="n1", accelerator="npu", relative_speed=0.5)
                        + _partition(name="n2", accelerator="npu"))
    assert len(two.relative_speeds) == 1


def test_unknown_builtin_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown cluster 'phily' \(did you mean 'philly'\?\).*built-in clusters: gavel"):
        load_cluster("phily")
    with pytest.raises(ConfigError, match="cluster file not found"):
        load_cluster(tmp_path / "none.toml")
