"""Recorded (22.05) and hand-written (24.11) Slurm outputs; see fixtures/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = ("22.05", "24.11")


def fixture_text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs once per Slurm version's fixtures."""
    return request.param
