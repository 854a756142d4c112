"""Trace readers: each format on a checked-in slice, bad rows, strict mode, file-level errors."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

import pytest

from asrpt.exceptions import AsrptError, ConfigError, TraceFormatError
from asrpt.sim.traces import (
    FORMATS,
    SIA_STEPS_TO_TARGET,
    TraceFileNotFound,
    TraceRecord,
    parse_columns,
    parse_slurm_duration_s,
    read_trace,
    workload_class_name,
)

DATA = Path(__file__).parent / "data"
PAI_SLICE = Path(str(resources.files("asrpt").joinpath("data/traces/pai_slice.csv")))

PAI_HEADER = "job_id,user,num_gpu,num_cpu,num_pod,duration,job_name,submit_time,group,gpu_type,wait_time,user_dur,group_dur,group_gpu_dur"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _sorted(records: list[TraceRecord]) -> bool:
    keys = [(r.submit_time_s, r.source_line) for r in records]
    return keys == sorted(keys)


# -- pai ----------------------------------------------------------------------------------------


def test_pai_bundled_slice_counts_and_a_hand_checked_row():
    result = read_trace(PAI_SLICE, "pai")
    assert len(result.records) == 2000
    assert result.skipped == {"cpu-only": 271}
    assert result.bad_lines == [] and result.bad_rows == 0
    assert _sorted(result.records)
    # Line 3 of the file: 1,d4d51aca8806,3.0,72.0,12.0,15748,1ccc18d7...,3,31d2ec35...,T4,...
    first = result.records[0]
    assert first == TraceRecord(
        job_id="1", submit_time_s=3.0, duration_s=15748.0, accelerators=3, user="d4d51aca8806",
        name="1ccc18d7d13073b642b3a016", group="31d2ec35b56db324b92e91aa92b277d2",
        accelerator_type="T4", source_line=3,
    )
    by_id = {r.job_id: r for r in result.records}
    # Line 21: job 19 asks for half a GPU: rounded up to one.
    assert by_id["19"].accelerators == 1 and by_id["19"].accelerator_type == "MISC"
    assert by_id["19"].submit_time_s == 298.0 and by_id["19"].duration_s == 180.0
    assert {r.accelerator_type for r in result.records} == {"MISC", "T4", "P100", "V100"}


def test_pai_fractional_drop_and_limit():
    dropped = read_trace(PAI_SLICE, "pai", fractional="drop")
    assert len(dropped.records) == 2000 - 974
    assert dropped.skipped == {"cpu-only": 271, "fractional accelerator share": 974}
    limited = read_trace(PAI_SLICE, "pai", limit=10)
    assert [r.job_id for r in limited.records] == [r.job_id for r in read_trace(PAI_SLICE, "pai").records[:10]]
    assert read_trace(PAI_SLICE, "pai", limit=0).records == []


def test_reading_is_deterministic():
    assert read_trace(PAI_SLICE, "pai") == read_trace(PAI_SLICE, "pai")


# -- bad rows -----------------------------------------------------------------------------------


BAD_PAI = "\n".join([
    PAI_HEADER,                                                                    # line 1
    "0,u1,1.0,6.0,1.0,100,n1,0,g1,T4,0,1,1,1",                                     # 2 ok
    "this is garbage",                                                             # 3 bad
    "2,u1,1.0,6.0,1.0,-5,n1,10,g1,T4,0,1,1,1",                                     # 4 negative duration
    "3,u1,1.0,6.0,1.0,100,n1,20,g1,T4,0,1,1",                                      # 5 a field missing
    "4,u2,0.0,6.0,1.0,100,n2,30,g2,CPU,0,1,1,1",                                   # 6 cpu-only (not bad)
    "5,u2,two,6.0,1.0,100,n2,40,g2,V100,0,1,1,1",                                  # 7 unparseable count
    "6,u2,8.0,6.0,1.0,50,n2,5,g2,V100,0,1,1,1",                                    # 8 ok
    "",
])


def test_bad_rows_are_skipped_counted_and_located(tmp_path, caplog):
    path = _write(tmp_path, "bad.csv", BAD_PAI)
    with caplog.at_level(logging.WARNING, logger="asrpt.sim.traces"):
        result = read_trace(path, "pai")
    assert [r.job_id for r in result.records] == ["0", "6"]  # sorted by submit time
    assert result.bad_lines == [3, 4, 5, 7]
    assert result.bad_rows == 4
    assert result.skipped == {
        "wrong number of fields": 2,
        "negative duration": 1,
        "unparseable accelerator count": 1,
        "cpu-only": 1,
    }
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "4 bad pai row(s)" in warning and "3, 4, 5, 7" in warning


def test_strict_raises_at_the_first_bad_row_with_its_line(tmp_path):
    path = _write(tmp_path, "bad.csv", BAD_PAI)
    with pytest.raises(TraceFormatError, match=r"bad\.csv:3: .*wrong number of fields"):
        read_trace(path, "pai", strict=True)


def test_strict_does_not_fail_on_deliberate_skips(tmp_path):
    path = _write(tmp_path, "ok.csv", "\n".join([PAI_HEADER, "4,u2,0.0,6.0,1.0,100,n2,30,g2,CPU,0,1,1,1",
                                                  "5,u2,0.5,6.0,1.0,100,n2,30,g2,T4,0,1,1,1"]))
    result = read_trace(path, "pai", strict=True)
    assert len(result.records) == 1 and result.skipped == {"cpu-only": 1}


def test_missing_required_column_is_a_file_error(tmp_path):
    path = _write(tmp_path, "nocol.csv", "job_id,user,num_gpu,submit_time\n1,u,1,0\n")
    with pytest.raises(TraceFormatError, match="duration.*missing"):
        read_trace(path, "pai")


def test_unknown_format_missing_file_and_empty_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_trace(PAI_SLICE, "alibaba")
    for fmt in FORMATS:
        assert fmt in str(info.value)
    with pytest.raises(TraceFileNotFound, match="not found"):
        read_trace(tmp_path / "nope.csv", "pai")
    with pytest.raises(FileNotFoundError):  # also an OSError for callers that expect one
        read_trace(tmp_path / "nope.csv", "pai")
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(_write(tmp_path, "empty.csv", "\n"), "pai")
    with pytest.raises(ConfigError, match="fractional"):
        read_trace(PAI_SLICE, "pai", fractional="round")
    with pytest.raises(ConfigError, match="column mapping applies only"):
        read_trace(PAI_SLICE, "pai", columns={"submit": "x", "duration": "y", "gpus": "z"})
    assert issubclass(TraceFileNotFound, AsrptError)


# -- philly -------------------------------------------------------------------------------------


def test_philly_slice():
    result = read_trace(DATA / "philly_slice.csv", "philly")
    assert len(result.records) == 50 and result.skipped == {}
    assert _sorted(result.records)
    # Line 15: "2017-09-28 16:59:54,908661.0,4,3634644.0,b436b2" is the earliest submit.
    first = result.records[0]
    assert (first.job_id, first.submit_time_s, first.duration_s, first.accelerators, first.user, first.source_line) == (
        "13", 0.0, 908661.0, 4, "b436b2", 15)
    assert sum(1 for r in result.records if r.accelerators > 1) == 7
    # Line 2: "2017-10-09 04:45:44,2761.0,1,..." is 10 days, 11 h, 45 min, 50 s later.
    second_line = next(r for r in result.records if r.source_line == 2)
    assert second_line.job_id == "0"
    assert second_line.submit_time_s == 10 * 86400 + 11 * 3600 + 45 * 60 + 50


# -- gavel --------------------------------------------------------------------------------------


def test_gavel_slice():
    result = read_trace(DATA / "b436b2.trace", "gavel")
    assert len(result.records) == 40 and result.skipped == {}
    first = result.records[0]
    assert first == TraceRecord(
        job_id="0", submit_time_s=0.0, duration_s=None, accelerators=4, user="b436b2",
        name="Transformer (batch size 128)", workload_class="transformer", iterations=6720840.0,
        batch_size=128, source_line=1,
    )
    assert {r.workload_class for r in result.records} <= {
        "a3c", "cyclegan", "lm", "recommendation", "resnet18", "resnet50", "transformer"}
    assert all(r.duration_s is None and r.iterations for r in result.records)
    assert sorted({r.accelerators for r in result.records}) == [1, 4, 8, 16]


def test_gavel_bad_line(tmp_path):
    good = (DATA / "b436b2.trace").read_text().splitlines()[0]
    path = _write(tmp_path, "x.trace", "\n".join([good, "only\ttwo", good.replace("\t6720840\t", "\t-3\t")]))
    result = read_trace(path, "gavel")
    assert len(result.records) == 1
    assert result.bad_lines == [2, 3]
    assert result.skipped == {"wrong number of fields": 1, "negative total steps": 1}


def test_workload_class_name():
    assert workload_class_name("ResNet-50") == "resnet50"
    assert workload_class_name("CycleGAN") == "cyclegan"
    assert workload_class_name("A3C") == "a3c"


# -- sia ----------------------------------------------------------------------------------------


def test_sia_slice():
    result = read_trace(DATA / "sia_philly_workload-1_slice.csv", "sia")
    assert len(result.records) == 40 and result.skipped == {}
    first = result.records[0]
    # Line 2: cifar10-0,107,cifar10,6,2048 -> 3,178 steps to target at batch 2048.
    assert first == TraceRecord(
        job_id="cifar10-0", submit_time_s=107.0, duration_s=None, accelerators=6, name="cifar10",
        workload_class="cifar10", iterations=3178.0, batch_size=2048, source_line=2,
    )
    assert {r.workload_class for r in result.records} <= set(SIA_STEPS_TO_TARGET)


def test_sia_unprofiled_batch_and_unknown_app(tmp_path):
    path = _write(tmp_path, "w.csv", "name,time,application,num_replicas,batch_size\n"
                  "a,0,cifar10,4,3000\nb,5,gpt9,4,64\n")
    result = read_trace(path, "sia")
    # 3000 is nearer 4096 than 2048 in log scale; steps scale inversely with the batch.
    assert result.records[0].iterations == pytest.approx(2011 * 4096 / 3000)
    assert result.skipped == {"unknown application": 1} and result.bad_lines == [3]


# -- csv ----------------------------------------------------------------------------------------


def test_csv_with_mapping_iso_times_and_slurm_durations(tmp_path):
    path = _write(tmp_path, "mine.csv", "\n".join([
        "id,when,runtime,ngpu,who,type,limit",
        "a,2024-03-01T10:00:00,3600,2,alice,A100,02:00:00",
        "b,2024-03-01T09:00:00,1-00:00:00,1,bob,,",
        "c,2024-03-01T11:00:00,60,0,carol,,",
        "d,2024-03-01T12:00:00,60,4,dave,cpu,",
        "e,1234,60,4,erin,,",
    ]))
    columns = parse_columns("submit=when, duration=runtime, gpus=ngpu, user=who, gpu_type=type, time_limit=limit, job_id=id")
    result = read_trace(path, "csv", columns=columns)
    assert [r.job_id for r in result.records] == ["b", "a"]
    b, a = result.records
    assert b.submit_time_s == 0.0 and b.duration_s == 86400.0 and b.time_limit_s is None
    assert a.submit_time_s == 3600.0 and a.accelerator_type == "A100" and a.time_limit_s == 7200.0
    assert result.skipped == {"cpu-only": 2, "mixed submit time formats": 1}
    assert result.bad_lines == [6]


def test_csv_numeric_submit_and_default_ids(tmp_path):
    path = _write(tmp_path, "n.csv", "t,d,g\n100,10,1\n50,20,2\n")
    result = read_trace(path, "csv", columns={"submit": "t", "duration": "d", "gpus": "g"})
    assert [(r.job_id, r.submit_time_s, r.accelerators) for r in result.records] == [("1", 0.0, 2), ("0", 50.0, 1)]


def test_csv_mapping_errors(tmp_path):
    path = _write(tmp_path, "n.csv", "t,d,g\n100,10,1\n")
    with pytest.raises(ConfigError, match="column mapping"):
        read_trace(path, "csv")
    with pytest.raises(ConfigError, match="gpus"):
        read_trace(path, "csv", columns={"submit": "t", "duration": "d"})
    with pytest.raises(ConfigError, match="valid keys"):
        parse_columns("submit=t,duration=d,gpus=g,gpu=x")
    with pytest.raises(ConfigError, match="KEY=COLUMN"):
        parse_columns("submit")
    with pytest.raises(TraceFormatError, match="nope.*missing.*t, d, g"):
        read_trace(path, "csv", columns={"submit": "t", "duration": "d", "gpus": "nope"})


# -- sacct --------------------------------------------------------------------------------------


SACCT = "\n".join([
    "JobID|User|JobName|Partition|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES|Timelimit|State",
    "101|alice|train|gpu|2024-05-01T10:00:00|2024-05-01T10:01:00|2024-05-01T11:01:00|3600|"
    "billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|cpu=8,gres/gpu=2|1-00:00:00|COMPLETED",
    "101.batch|||||2024-05-01T10:01:00|2024-05-01T11:01:00|3600|cpu=8,gres/gpu=2|||COMPLETED",
    "101.extern|||||2024-05-01T10:01:00|2024-05-01T11:01:00|3600|cpu=8|||COMPLETED",
    "102|bob|prep|cpu|2024-05-01T09:30:00|2024-05-01T09:30:00|2024-05-01T09:40:00|600|cpu=4,mem=8G|cpu=4|01:00:00|COMPLETED",
    "103|carol|infer|npu|2024-05-01T10:30:00|2024-05-01T10:31:00|2024-05-01T10:41:00|600|cpu=4,gres/npu=8|cpu=4,gres/npu=8|UNLIMITED|FAILED",
    "104|dave|wait|gpu|2024-05-01T10:40:00|Unknown|Unknown|0||cpu=2,gres/gpu=1|00:30:00|PENDING",
    "105|erin|gone|gpu|2024-05-01T10:45:00|None|2024-05-01T10:50:00|0||cpu=2,gres/gpu:v100=1|00:30:00|CANCELLED by 1000",
    "106_3|alice|sweep|gpu|2024-05-01T10:50:00|2024-05-01T10:50:05|2024-05-01T11:20:05|1800|"
    "cpu=2,gres/gpu=1|cpu=2,gres/gpu=1|00:30:00|TIMEOUT",
    "107|bob|broken|gpu|yesterday|x|y|10|cpu=1,gres/gpu=1|cpu=1|00:10:00|COMPLETED",
])


def test_sacct(tmp_path):
    result = read_trace(_write(tmp_path, "sacct.txt", SACCT), "sacct")
    assert [r.job_id for r in result.records] == ["101", "103", "106_3"]
    a, npu, sweep = result.records
    assert a == TraceRecord(
        job_id="101", submit_time_s=0.0, duration_s=3600.0, accelerators=2, user="alice", name="train",
        group="alice/train", accelerator_type="a100", time_limit_s=86400.0, source_line=2,
    )
    assert npu.accelerators == 8 and npu.accelerator_type == "npu" and npu.time_limit_s is None
    assert npu.submit_time_s == 1800.0
    assert sweep.accelerator_type is None and sweep.time_limit_s == 1800.0 and sweep.duration_s == 1800.0
    assert result.skipped == {
        "job step": 2, "cpu-only": 1, "not finished": 1, "zero duration": 1, "unparseable timestamp": 1,
    }
    assert result.bad_lines == [10]


def test_sacct_dash_p_trailing_delimiter_and_elapsed(tmp_path):
    text = "JobID|Submit|Elapsed|ReqTRES|State|\n7|2024-01-01T00:00:00|1-02:03:04|gres/gpu=4|COMPLETED|\n"
    (record,) = read_trace(_write(tmp_path, "p.txt", text), "sacct").records
    assert record.duration_s == 86400 + 2 * 3600 + 3 * 60 + 4 and record.accelerators == 4


def test_sacct_without_header_or_columns(tmp_path):
    with pytest.raises(TraceFormatError, match="noheader"):
        read_trace(_write(tmp_path, "h.txt", "101|alice|train\n"), "sacct")
    with pytest.raises(TraceFormatError, match="AllocTRES or ReqTRES"):
        read_trace(_write(tmp_path, "c.txt", "JobID|Submit|ElapsedRaw\n1|2024-01-01T00:00:00|5\n"), "sacct")


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800.0), ("05:30", 330.0), ("01:02:03", 3723.0), ("2-00", 172800.0),
    ("1-01:30", 91800.0), ("1-00:00:01", 86401.0), ("00:01:02.500", 62.5),
    ("UNLIMITED", None), ("Partition_Limit", None), ("", None),
])
def test_parse_slurm_duration(text, seconds):
    assert parse_slurm_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "x-01:00:00", "ab:cd", "1-"])
def test_parse_slurm_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_slurm_duration_s(text)
