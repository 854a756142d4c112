"""SpeedTable: the packaged Gavel/Sia-derived table, lookups, aliases and relative (NPU) types."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from asrpt.core.speed import SpeedTable, WorkloadProfile, default_speed_table

REPO = Path(__file__).resolve().parents[3]
GAVEL = Path("/work/shared/traces/gavel/simulation_throughputs.json")
SIA = Path("/work/shared/traces/sia-throughput-profiles/seed-1gpu")


@pytest.fixture(scope="module")
def table() -> SpeedTable:
    return default_speed_table()


def test_default_table_shape(table: SpeedTable) -> None:
    assert set(table.accelerators) == {"k80", "p100", "v100", "t4", "rtx2080ti", "rtx6000", "a100"}
    assert len(table.workload_classes) == 13
    assert {"resnet50", "transformer", "lm", "bert", "imagenet", "ncf"} <= set(table.workload_classes)
    assert default_speed_table() is table  # cached


@pytest.mark.parametrize(
    ("workload_class", "accelerator", "expected_s"),
    [
        # Gavel isolated throughput at scale factor 1, inverted (README example: ResNet-50 bs64 on V100 4.395 steps/s).
        ("resnet50", "v100", 1 / 4.394774823323071),
        ("transformer", "k80", 1 / 1.7522265657120206),
        ("lm", "p100", 1 / 21.157527655800312),
        # Sia one-GPU step time at the largest batch all five types measured (bert: 11).
        ("bert", "a100", 0.1630861461162567),
        ("bert", "t4", 0.8552833199501038),
        ("imagenet", "rtx6000", 0.4476453959941864),
    ],
)
def test_measured_cells(table: SpeedTable, workload_class: str, accelerator: str, expected_s: float) -> None:
    assert table.step_time_s(workload_class, accelerator) == pytest.approx(expected_s, rel=1e-6)
    assert table.origin(workload_class, accelerator).startswith("measured:")


@pytest.mark.parametrize(("workload_class", "accelerator"), [("bert", "k80"), ("resnet50", "a100"), ("lm", "t4")])
def test_filled_cells_scale_v100_by_median_ratio(table: SpeedTable, workload_class: str, accelerator: str) -> None:
    doc = json.loads(resources.files("asrpt").joinpath("data/speed_table.json").read_text())
    ratio = doc["fill_ratios_to_v100"][accelerator]
    assert table.origin(workload_class, accelerator) == "filled:median-ratio-to-v100"
    assert table.step_time_s(workload_class, accelerator) == pytest.approx(
        table.step_time_s(workload_class, "v100") * ratio, rel=1e-6
    )


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("V100", "v100"), ("V100M32", "v100"), ("v100m16", "v100"), ("MISC", "k80"), ("dgx", "a100"),
     ("A100", "a100"), ("rtx", "rtx2080ti"), ("quad", "rtx6000"), ("Tesla-T4", "t4")],
)
def test_accelerator_names_are_case_insensitive_with_aliases(table: SpeedTable, name: str, canonical: str) -> None:
    assert table.knows(name)
    assert table.canonical_accelerator(name) == canonical
    assert table.step_time_s("resnet50", name) == table.step_time_s("resnet50", canonical)


def test_class_names_are_case_insensitive(table: SpeedTable) -> None:
    assert table.step_time_s("BERT", "v100") == table.step_time_s("bert", "v100")
    assert table.step_time_s("ResNet-50", "v100") == table.step_time_s("resnet50", "v100")
    assert table.profile("Bert").name == "bert"


def test_unknown_class_names_the_valid_ones(table: SpeedTable) -> None:
    with pytest.raises(KeyError, match="valid:.*resnet50.*bert"):
        table.step_time_s("gpt-17", "v100")
    with pytest.raises(KeyError, match="valid:"):
        table.profile("gpt-17")


def test_unknown_accelerator_names_the_valid_ones(table: SpeedTable) -> None:
    assert not table.knows("npu-910b")
    with pytest.raises(KeyError, match="valid:.*v100.*a100"):
        table.step_time_s("bert", "npu-910b")


def test_relative_speed_configures_an_npu(table: SpeedTable) -> None:
    npu = table.with_relative_speed("npu-910b", 1.25, "a100", aliases=("910b",))
    assert npu.knows("NPU-910B") and npu.knows("910b")
    assert not table.knows("npu-910b")  # the original is untouched
    assert npu.accelerators == (*table.accelerators, "npu-910b")
    for cls in table.workload_classes:
        assert npu.step_time_s(cls, "910b") == pytest.approx(table.step_time_s(cls, "a100") / 1.25)
        assert npu.step_time_s(cls, "v100") == table.step_time_s(cls, "v100")
    assert npu.origin("bert", "npu-910b").startswith("relative:a100")
    assert npu != table and hash(npu) != hash(table)


@pytest.mark.parametrize("factor", [0, -1.0, float("nan"), float("inf")])
def test_relative_speed_rejects_bad_factors(table: SpeedTable, factor: float) -> None:
    with pytest.raises(ValueError, match="factor"):
        table.with_relative_speed("npu", factor, "v100")


def test_relative_speed_rejects_known_names_and_unknown_reference(table: SpeedTable) -> None:
    with pytest.raises(ValueError, match="already known"):
        table.with_relative_speed("V100M32", 2.0, "a100")
    with pytest.raises(KeyError, match="valid:"):
        table.with_relative_speed("npu", 2.0, "h100")


def test_tables_with_equal_content_are_equal_cache_keys(table: SpeedTable) -> None:
    doc = json.loads(resources.files("asrpt").joinpath("data/speed_table.json").read_text())
    again = SpeedTable.from_dict(doc)
    assert again == table and hash(again) == hash(table)
    assert {again: 1}[table] == 1


def test_profiles_are_positive(table: SpeedTable) -> None:
    for cls in table.workload_classes:
        prof = table.profile(cls)
        assert isinstance(prof, WorkloadProfile)
        assert prof.params_gb > 0 and prof.activation_gb_per_microbatch > 0 and prof.tp_allreduce_gb_per_microbatch > 0


def test_invalid_tables_are_rejected() -> None:
    prof = {"x": WorkloadProfile("x", 1.0, 0.1, 0.1)}
    with pytest.raises(ValueError, match="shape"):
        SpeedTable(workload_classes=["x"], accelerators=["a", "b"], step_time_s=[[1.0]], profiles=prof)
    with pytest.raises(ValueError, match="> 0"):
        SpeedTable(workload_classes=["x"], accelerators=["a"], step_time_s=[[0.0]], profiles=prof)
    with pytest.raises(ValueError, match="WorkloadProfile"):
        SpeedTable(workload_classes=["x", "y"], accelerators=["a"], step_time_s=[[1.0], [1.0]], profiles=prof)
    with pytest.raises(ValueError, match=">= 0"):
        WorkloadProfile("x", -1.0, 0.0, 0.0)


@pytest.mark.skipif(not (GAVEL.exists() and SIA.exists()), reason="shared trace copies not available")
def test_packaged_table_is_what_the_build_script_derives(tmp_path: Path) -> None:
    out = tmp_path / "speed_table.json"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_speed_table.py"), "--gavel", str(GAVEL),
         "--sia-seed", str(SIA), "--out", str(out)],
        check=True, capture_output=True,
    )
    packaged = resources.files("asrpt").joinpath("data/speed_table.json").read_text()
    assert json.loads(out.read_text()) == json.loads(packaged)
