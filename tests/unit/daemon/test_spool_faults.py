"""Issue 16: a spool record the history cannot store is set aside in ``bad/`` (kept), and
neither fails nor repeats in every later cycle."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from asrpt.submit_wrapper import spool
from tests.unit.ingest.test_wrapper_spool import record_document

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record's owner must be the job's user (root here)")


def test_a_record_that_cannot_be_stored_goes_to_bad_and_the_cycle_goes_on(daemon, monkeypatch) -> None:
    spool_dir = Path(daemon.config.spool.dir)
    os.chmod(spool_dir, 0o1777)
    for job_id in ("101", "102"):
        daemon.backend.jobs[job_id] = dataclasses.replace(daemon.backend.jobs[job_id], user="root")
        path = spool_dir / f"{job_id}.json"
        path.write_text(json.dumps(record_document(job_id)))
        os.chmod(path, 0o600)
    real = daemon.repository.record_submission

    def record_submission(record, **kw):
        if record.slurm_job_id == "101" and record.source == "wrapper":
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return real(record, **kw)

    monkeypatch.setattr(daemon.repository, "record_submission", record_submission)
    assert daemon.cycle() is not None
    assert daemon.cycle() is not None
    assert sorted(p.name for p in (spool_dir / spool.BAD_DIR).iterdir()) == ["101.json"]
    assert not (spool_dir / "102.json").exists()  # stored and removed
    assert daemon.repository.get_submission("102").model_name == "llama-7b"
    assert daemon.stats.failures == 0
