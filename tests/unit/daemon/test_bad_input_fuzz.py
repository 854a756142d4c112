"""Issue 16's fuzz suite: whatever users put in directives, comments and job names, whatever
squeue reports and whatever lies in the spool, a daemon cycle on the fake Slurm (recorded
squeue output, real parsing, real SQLite history) never raises and loses no job.

The fuzzed data enters where it enters in production: the job's squeue fields are parsed by
the CLI backend, the ``#ASRPT`` script lines by the wrapper's directive parser into a spool
record, and the spool record (or a file of arbitrary bytes) by the daemon's ingest.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asrpt.daemon.config import parse_config
from asrpt.daemon.service import Daemon
from asrpt.db.migrate import upgrade
from asrpt.db.repository import HistoryRepository
from asrpt.slurm.cli_backend import SlurmCliBackend
from asrpt.submit_wrapper import directives
from tests.unit.daemon.conftest import ManualClock
from tests.unit.slurm.test_cli_backend import PARTITIONS, FakeSlurm

FUZZED = "rec-pend-typed"
SUBMIT_S = 1_796_227_092
NOW_S = SUBMIT_S + 3600.0

#: Text users write: control characters, NUL, escapes, non-ASCII digits, long runs.
_user_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="asrpt:=,.-_ x²٣\x00\n\t\x1b[]#", max_size=60),
    st.integers(min_value=1, max_value=2000).map(lambda n: "x" * n),
    st.text(alphabet="0123456789²³¹٣", min_size=1, max_size=3),  # digits int() does not take
)
_hint_comment = st.lists(
    st.tuples(st.sampled_from(["dp", "pp", "tp", "mb", "class", "DP", "zz", ""]), _user_text),
    max_size=5,
).map(lambda items: "asrpt:" + ",".join(f"{k}={v}" for k, v in items))
_integers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from([0, -1, 2**31, 2**32 - 2, 2**63 - 1, SUBMIT_S, SUBMIT_S + 10**9]),
)
_directive_line = st.one_of(
    st.lists(
        st.tuples(
            st.sampled_from(["model", "class", "parallel", "dp", "pp", "tp", "micro_batches", "iterations", "serve-model", "x"]),
            st.one_of(_user_text, st.sampled_from(["1e25", "inf", "nan", "2x2x2", "0", "auto", "99999999999999999999"])),
        ),
        max_size=4,
    ).map(lambda words: "#ASRPT " + " ".join(f"{k}={v}" for k, v in words)),
    _user_text.map(lambda t: "#ASRPT " + t),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _integers, st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
_asrpt_overlay = st.dictionaries(
    st.sampled_from(["model", "workload_class", "parallel_data", "parallel_pipeline", "parallel_tensor",
                     "micro_batches", "iterations", "serve_model", "parallel_tensor_auto"]),
    _json, max_size=3,
)


@pytest.fixture(scope="module")
def template_db(tmp_path_factory) -> Path:
    """A migrated history, copied for each example (migrating each time is slow)."""
    path = tmp_path_factory.mktemp("template") / "asrpt.db"
    upgrade(f"sqlite:///{path}")
    return path


def _daemon(tmp: Path, template_db: Path, fake: FakeSlurm) -> Daemon:
    db = tmp / "asrpt.db"
    shutil.copy(template_db, db)
    spool = tmp / "spool"
    spool.mkdir()
    os.chmod(spool, 0o1777)
    # As an admin configures it: the NPU partition with its relative speed (the speed table lacks it).
    config = parse_config({
        "spool": {"dir": str(spool)},
        "slurm": {"partitions": [
            {"name": p.name, "accelerator": p.accelerator, "intra_node_gbps": p.intra_node_gbps,
             "inter_node_gbps": p.inter_node_gbps, **({"relative_speed": 0.5} if p.accelerator == "npu" else {})}
            for p in PARTITIONS
        ]},
    }, {})
    repository = HistoryRepository.from_url(f"sqlite:///{db}")
    daemon = Daemon(config, repository=repository, backend=SlurmCliBackend(config.slurm, runner=fake),  # type: ignore[arg-type]
                    clock=ManualClock(NOW_S))
    daemon.backend._iteration_time_s = daemon._iteration_time_s
    daemon.backend._admin_comment = daemon._admin_comment
    return daemon


def _spool_file(spool: Path, job_id: str, content: bytes) -> Path:
    path = spool / f"{job_id}.0.json"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    return path


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    version=st.sampled_from(["22.05", "24.11"]),
    name=_user_text,
    comment=st.one_of(_hint_comment, _user_text),
    admin_comment=_user_text,
    user=st.one_of(st.just("root"), _user_text),
    submit_time=_integers,
    time_limit=_integers,
    script_lines=st.lists(_directive_line, max_size=4),
    overlay=_asrpt_overlay,
    raw_spool=st.one_of(st.none(), st.binary(max_size=200), _json.map(lambda v: json.dumps(v).encode())),
)
# The cases issue 16 found, kept as examples: a superscript degree, a name over its column and
# a NUL the AdminComment write echoes, an integer of 2^70 in a spool record.
@example(version="22.05", name="x" * 300, comment="asrpt:dp=²", admin_comment="a\x00b", user="u" * 200,
         submit_time=SUBMIT_S, time_limit=60, script_lines=["#ASRPT class=zzz iterations=1e25"],
         overlay={"parallel_data": 2**70}, raw_spool=None)
@example(version="24.11", name="n", comment="asrpt:mb=1e25,class=bert2", admin_comment="", user="root",
         submit_time=SUBMIT_S + 10**9, time_limit=2**63, script_lines=[], overlay={}, raw_spool=b"[" * 5000)
def test_a_cycle_never_raises_and_loses_no_job_whatever_the_input(
    tmp_path_factory, template_db, caplog, version, name, comment, admin_comment, user, submit_time, time_limit,
    script_lines, overlay, raw_spool,
) -> None:
    fake = FakeSlurm(version)
    job = fake.job(FUZZED)
    job_id = str(job["job_id"])
    wrap = (lambda v: {"set": True, "infinite": False, "number": v}) if version == "24.11" else (lambda v: v)
    job.update(name=name, comment=comment, admin_comment=admin_comment, user_name=user,
               submit_time=wrap(submit_time), time_limit=wrap(time_limit))
    daemon = _daemon(tmp_path_factory.mktemp("fuzz"), template_db, fake)
    try:
        spool = Path(daemon.config.spool.dir)
        if raw_spool is not None:
            _spool_file(spool, job_id, raw_spool)
        else:
            script = "#!/bin/sh\n" + "\n".join(script_lines) + "\ntrue\n"
            asrpt = {**directives.scan_script(script).asrpt, **overlay}
            record = {"format": "asrpt-submission", "version": 1, "slurm_job_id": job_id,
                      "submit_time_s": float(SUBMIT_S), "directives": {"asrpt": asrpt}}
            _spool_file(spool, job_id, json.dumps(record, default=str).encode())
        # The jobs the recorded squeue holds as schedulable, the fuzzed one included: bad data
        # makes a job ordinary, never invisible to asrpt.
        pending = {j.job_id for j in SlurmCliBackend(daemon.config.slurm, runner=FakeSlurm(version)).snapshot().pending}  # type: ignore[arg-type]
        assert job_id in pending

        caplog.clear()
        with caplog.at_level(logging.ERROR):
            decision = daemon.cycle()
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]  # nothing escaped

        assert decision is not None, daemon.stats.last_error
        assert daemon.stats.consecutive_failures == 0 and daemon.stats.escaped == 0, daemon.stats.last_error
        assert daemon.stats.forecast_failures == 0  # ETAs and `asrpt queue` rows for everyone
        scheduled = set(decision.order) | {p.job_id for p in decision.starts}
        assert pending <= scheduled, f"lost {pending - scheduled}"
        for lost in pending:
            assert daemon.repository.get_submission(lost) is not None, lost  # and recorded
        assert not (spool / f"{job_id}.0.json").exists(), "a spool file for a known job was left to fire again"
        # subprocess refuses an argument with a NUL: such a write would be lost every cycle
        assert not [argv for argv in fake.writes() if any("\0" in word for word in argv)]
        assert daemon.cycle() is not None  # and the next cycle too
    finally:
        daemon.repository.close()
