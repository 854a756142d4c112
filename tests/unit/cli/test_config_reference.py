"""docs/configuration.md documents every key asrptd, asrpt-sbatch and the user commands read."""

from dataclasses import fields
from pathlib import Path

from asrpt.cli import config_reference, site_config
from asrpt.daemon import config
from asrpt.slurm.cli_backend import SlurmBackendConfig
from asrpt.submit_wrapper.config import WRAPPER_KEYS

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_committed_page_is_the_generated_one():
    assert PAGE.read_text(encoding="utf-8") == config_reference.render(), (
        "docs/configuration.md is stale: python -m asrpt.cli.config_reference > docs/configuration.md")


def test_every_key_any_reader_accepts_is_documented_with_a_meaning():
    keys = {(name, f.name) for name, cls in config._SECTIONS.items() for f in fields(cls)}
    keys |= {("slurm", f.name) for f in fields(SlurmBackendConfig) if f.name != "partitions"}
    keys |= {("slurm.partitions", f.name) for f in fields(config.PartitionSection)}
    keys |= {("wrapper", key) for key in WRAPPER_KEYS} | set(site_config._KEYS) | {("spool", "dir")}
    assert keys - config_reference.documented_keys() == set()
    page = PAGE.read_text(encoding="utf-8")
    for _section, key in keys:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{key}` |"))
        assert not row.rstrip().endswith("|  |"), f"{key}: no meaning"
