"""Bad trace input gets a clear error and loses nothing silently: a BOM is accepted,
duplicate job ids are reported, dropped rows are counted by reason, and no error message
echoes raw binary (only a short, escaped excerpt)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.exceptions import TraceFormatError
from asrpt.sim.traces import FORMATS, read_trace

PAI_HEADER = "job_id,user,num_gpu,num_cpu,num_pod,duration,job_name,submit_time,group,gpu_type,wait_time,user_dur,group_dur,group_gpu_dur"


def _pai_row(job_id: str, submit: int = 0, gpus: str = "1.0", duration: str = "100") -> str:
    return f"{job_id},u1,{gpus},2.0,1.0,{duration},name,{submit},g1,V100,0,0,0,0"


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_a_utf8_bom_before_the_header_is_accepted(tmp_path, suffix):
    data = ("\ufeff" + PAI_HEADER + "\n" + _pai_row("1") + "\n").encode("utf-8")
    path = tmp_path / f"bom.csv{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)
    result = read_trace(path, "pai", strict=True)
    assert [r.job_id for r in result.records] == ["1"]


def test_a_bom_before_a_sacct_header_is_accepted(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text("\ufeffJobID|Submit|ElapsedRaw|AllocTRES|State\n"
                    "7|2024-01-01T00:00:00|60|cpu=1,gres/gpu=1|COMPLETED\n", encoding="utf-8")
    assert [r.job_id for r in read_trace(path, "sacct", strict=True).records] == ["7"]


def _duplicates(tmp_path: Path) -> Path:
    rows = [_pai_row("1", 0), _pai_row("2", 5), _pai_row("1", 9, duration="999"), _pai_row("2", 1), _pai_row("3", 3)]
    path = tmp_path / "dup.csv"
    path.write_text(PAI_HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_duplicate_job_ids_under_strict_are_rejected_naming_the_ids(tmp_path):
    with pytest.raises(TraceFormatError) as error:
        read_trace(_duplicates(tmp_path), "pai", strict=True)
    message = str(error.value)
    assert "duplicate job id" in message and "'1'" in message and "'2'" in message
    assert "lines 2 and 4" in message  # the first row of id 1 and its repeat (1-based, header = 1)


def test_duplicate_job_ids_keep_the_first_row_and_are_counted(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="asrpt.sim.traces")
    result = read_trace(_duplicates(tmp_path), "pai")
    assert sorted(r.job_id for r in result.records) == ["1", "2", "3"]
    first_one = next(r for r in result.records if r.job_id == "1")
    assert first_one.duration_s == 100 and first_one.source_line == 2
    assert result.skipped == {"duplicate job id": 2}
    assert result.bad_rows == 2 and result.bad_lines == [4, 5]
    assert "duplicate job id: 2" in result.summary()
    assert "duplicate job id" in caplog.text


def test_dropped_rows_are_counted_by_reason_in_the_summary(tmp_path):
    rows = [_pai_row("1"), _pai_row("2", gpus="0"), _pai_row("3", duration="abc"), _pai_row("4", duration="-5")]
    path = tmp_path / "mixed.csv"
    path.write_text(PAI_HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    result = read_trace(path, "pai")
    summary = result.summary()
    for reason in ("cpu-only: 1", "unparseable duration: 1", "negative duration: 1"):
        assert reason in summary
    assert len(result.records) + sum(result.skipped.values()) == len(rows)


BINARY = bytes(range(256)) * 8


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "csv"])
@pytest.mark.parametrize("strict", [False, True])
def test_errors_about_a_binary_file_show_a_short_escaped_excerpt(tmp_path, fmt, strict):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + BINARY)
    try:
        result = read_trace(path, fmt, strict=strict)
    except TraceFormatError as error:
        message = str(error)
    else:  # gavel has no header: every line is a bad row, counted
        assert not strict and not result.records and result.bad_rows > 0
        return
    assert message.isprintable(), message
    assert "\ufffd" not in message
    assert len(message) < 400


@settings(max_examples=60, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300), fmt=st.sampled_from([f for f in FORMATS if f != "csv"]),
       strict=st.booleans())
def test_no_trace_error_echoes_unprintable_text(tmp_path_factory, garbage, fmt, strict):
    path = tmp_path_factory.mktemp("g") / "garbage.txt"
    path.write_bytes(garbage)
    try:
        read_trace(path, fmt, strict=strict)
    except TraceFormatError as error:
        assert str(error).isprintable() and "\ufffd" not in str(error) and len(str(error)) < 600


def test_simulate_explains_every_dropped_row_and_job_on_stderr(tmp_path, capsys):
    from asrpt.cli.main import main

    rows = [_pai_row(str(i), i * 10) for i in range(1, 6)]
    rows += [_pai_row("1", 60), _pai_row("7", 70, gpus="0"), _pai_row("8", 80, gpus="4096")]
    path = tmp_path / "t.csv"
    path.write_text(PAI_HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    assert main(["simulate", "--trace", str(path), "--format", "pai", "--cluster", "testbed", "--policy", "fifo",
                 "--predictor", "oracle", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "duplicate job id" in err and "cpu-only" in err
    assert "too large for cluster" in err  # left out when turned into jobs, not only in --json
