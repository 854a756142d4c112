"""The import direction of DESIGN.md: the scheduling core stays pure (no I/O, clock, database,
scheduler or subprocess), enforced by the import-linter contract in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
