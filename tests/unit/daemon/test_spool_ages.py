"""Spool records wait for their job on a clock that survives wall-clock steps (issue 16: the
clock stepped forward 2 days expired 11 waiting records)."""

from __future__ import annotations

import json
import os

from asrpt.daemon.spool_ages import SpoolWaitAges
from asrpt.ingest import wrapper_spool


class SteppedClocks:
    def __init__(self) -> None:
        self.wall_s = 1_000_000.0
        self.mono_s = 50.0

    def advance(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds


def test_a_forward_step_of_the_wall_clock_does_not_age_a_record() -> None:
    clocks = SteppedClocks()
    ages = SpoolWaitAges(monotonic=lambda: clocks.mono_s)
    spooled_at_s = clocks.wall_s - 5.0
    assert ages.age_s(("a",), spooled_at_s, clocks.wall_s) == 5.0
    clocks.advance(30.0)
    clocks.wall_s += 2 * 86400.0  # NTP steps the wall clock two days ahead
    assert ages.age_s(("a",), spooled_at_s, clocks.wall_s) == 35.0
    clocks.wall_s -= 4 * 86400.0  # and then back past the truth: never below 0
    assert ages.age_s(("a",), spooled_at_s, clocks.wall_s) == 0.0


def test_records_that_left_are_forgotten() -> None:
    ages = SpoolWaitAges(monotonic=lambda: 0.0)
    ages.age_s(("a",), 0.0, 1.0)
    ages.age_s(("b",), 0.0, 1.0)
    ages.keep_only({("b",)})
    assert ages.tracked == 1


def test_a_waiting_wrapper_record_survives_a_forward_step(tmp_path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    document = {"format": "asrpt-submission", "version": 1, "slurm_job_id": "77", "submit_time_s": 1.0,
                "cwd": "/", "argv": [], "argv_truncated": False, "script": None, "recurrence_group": None,
                "directives": {}, "claimed_user": None, "claimed_uid": os.getuid(), "hostname": "h",
                "wrapper_version": "t"}
    path = spool_dir / "1-77.json"
    path.write_text(json.dumps(document))
    os.chmod(path, 0o600)
    [record] = wrapper_spool.read_spool(str(spool_dir))
    two_days_on_s = record.spooled_at_s + 2 * 86400.0
    # The wall clock says two days; the daemon has watched the record for a second.
    assert not wrapper_spool.accept_record(record, lambda _job: None, now_s=two_days_on_s, max_pending_age_s=86400.0, age_s=1.0)
    assert path.exists()
    assert not wrapper_spool.accept_record(record, lambda _job: None, now_s=two_days_on_s, max_pending_age_s=86400.0)
    assert not path.exists()  # without the daemon's own clock it expired
