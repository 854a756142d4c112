from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAI_SLICE = Path("traces/alibaba-pai-2020/pai_job_duration_estimate_head.csv")


@pytest.fixture(scope="session")
def pai_trace_path() -> Path:
    """The real PAI 2020 slice from the shared folder beside the repository."""
    candidates = [Path(os.environ["ASRPT_SHARED_DIR"])] if os.environ.get("ASRPT_SHARED_DIR") else []
    candidates.append(REPO.parent / "shared")
    for shared in candidates:
        if (shared / PAI_SLICE).is_file():
            return shared / PAI_SLICE
    pytest.skip(f"{PAI_SLICE} not found under {[str(c) for c in candidates]} (set ASRPT_SHARED_DIR)")


@pytest.fixture(scope="session")
def any_pai_trace_path() -> Path:
    """The shared PAI slice if it is there, else its first 2,271 rows bundled with the package
    (enough for tests that exercise the commands, not the accuracy claims)."""
    candidates = [Path(os.environ["ASRPT_SHARED_DIR"])] if os.environ.get("ASRPT_SHARED_DIR") else []
    candidates.append(REPO.parent / "shared")
    for shared in candidates:
        if (shared / PAI_SLICE).is_file():
            return shared / PAI_SLICE
    return REPO / "src" / "asrpt" / "data" / "traces" / "pai_slice.csv"
