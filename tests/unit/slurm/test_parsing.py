"""Parsers on recorded 22.05 and hand-written 24.11 outputs, and on garbage."""

from __future__ import annotations

import json
import math
import time

import pytest

from hypothesis import given
from hypothesis import strategies as st

from asrpt.exceptions import SlurmOutputMalformed, SlurmUnreachable
from asrpt.slurm.parsing import (
    compress_nodelist,
    expand_nodelist,
    failed_job_ids,
    iter_jobcomp,
    parse_jobcomp_lines,
    json_number,
    json_state,
    parse_duration_s,
    parse_exit_code,
    parse_gres,
    parse_job_id,
    parse_job_ids,
    parse_jobcomp_line,
    parse_nodes_json,
    parse_sacct,
    MAX_ARRAY_TASKS,
    parse_array_tasks,
    parse_squeue_json,
    parse_timestamp_s,
    parse_tres,
    parse_version,
)
from asrpt.slurm.records import GresItem

from .conftest import FIXTURES, fixture_text

# -- small values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("(null)", ()),
        ("node1", ("node1",)),
        ("node[1-3,5]", ("node1", "node2", "node3", "node5")),
        ("node[1-2],gpu-a[01-02]", ("node1", "node2", "gpu-a01", "gpu-a02")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("a,b", ("a", "b")),
    ],
)
def test_expand_nodelist(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("text", ["node[1-", "node1]", "node[3-1]", "node[a-b]", "node[[1]]", "a,,b", "node[1-2", "no de"])
def test_expand_nodelist_rejects_garbage(text):
    with pytest.raises(SlurmOutputMalformed, match="node list"):
        expand_nodelist(text)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["node1"], "node1"),
        (["node2", "node1", "node4", "node2"], "node[1-2,4]"),
        (["n08", "n09", "n10"], "n[08-10]"),
        (["login", "node1", "node3"], "login,node[1,3]"),
    ],
)
def test_compress_nodelist_round_trips(names, expected):
    assert compress_nodelist(names) == expected
    assert set(expand_nodelist(expected)) == set(names)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:8", (GresItem("gpu", "a100", 8),)),
        ("gpu:a100:8(IDX:0-7),npu:0", (GresItem("gpu", "a100", 8), GresItem("npu", None, 0))),
        ("gpu:v100:0(IDX:N/A),npu:0", (GresItem("gpu", "v100", 0), GresItem("npu", None, 0))),
        ("gpu:a100:8(S:0-1)", (GresItem("gpu", "a100", 8),)),
        ("npu(CNT:4)", (GresItem("npu", None, 4),)),
        ("npu:8", (GresItem("npu", None, 8),)),
        ("gres:gpu:a100:3", (GresItem("gpu", "a100", 3),)),
        ("gres/gpu:a100:3", (GresItem("gpu", "a100", 3),)),
        ("gres:gpu:2", (GresItem("gpu", None, 2),)),
        ("gres/gpu:v100:2,gres/npu:1", (GresItem("gpu", "v100", 2), GresItem("npu", None, 1))),
        ("gpu", (GresItem("gpu", None, 1),)),
        ("gpu:nvidia_a100_1g.5gb:2", (GresItem("gpu", "nvidia_a100_1g.5gb", 2),)),
        ("bandwidth:lustre:4G", (GresItem("bandwidth", "lustre", 4 * 1024**3),)),
        ("", ()),
        ("(null)", ()),
        ("N/A", ()),
    ],
)
def test_parse_gres(text, expected):
    assert parse_gres(text) == expected


@pytest.mark.parametrize("text", ["gpu:a100:8(IDX:0-7", "gpu:a100:x:y:z", ":8", "gpu,,npu", "gpu:a100:8)"])
def test_parse_gres_rejects_garbage(text):
    with pytest.raises(SlurmOutputMalformed, match="GRES"):
        parse_gres(text)


def test_gres_item_matches_name_and_optional_type():
    item = GresItem("gpu", "A100", 8)
    assert item.matches("gpu", None) and item.matches("GPU", "a100")
    assert not item.matches("gpu", "v100") and not item.matches("npu", None)


def test_parse_tres():
    assert parse_tres("cpu=2,mem=125G,node=2,gres/gpu:a100=6") == {"cpu": "2", "mem": "125G", "node": "2", "gres/gpu:a100": "6"}
    assert parse_tres("") == {}
    with pytest.raises(SlurmOutputMalformed, match="TRES"):
        parse_tres("cpu=2,garbage")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-02:03:04", 93784.0),
        ("02:03:04", 7384.0),
        ("30:00", 1800.0),
        ("30", 1800.0),
        ("1", 60.0),
        ("2-12", 2 * 86400.0 + 12 * 3600),
        ("2-12:30", 2 * 86400.0 + 12 * 3600 + 1800),
        ("365-00:00:00", 365 * 86400.0),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("Partition_Limit", None),
        ("NOT_SET", None),
        ("", None),
    ],
)
def test_parse_duration_s(text, seconds):
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["1-", "-1", "1:2:3:4", "abc", "1-2:x", "1.5"])
def test_parse_duration_rejects_garbage(text):
    with pytest.raises(SlurmOutputMalformed, match="time"):
        parse_duration_s(text)


def test_parse_timestamp_is_local_time():
    expected = time.mktime((2026, 12, 2, 11, 32, 3, 0, 0, -1))
    assert parse_timestamp_s("2026-12-02T11:32:03") == expected
    assert parse_timestamp_s(1796227092) == 1796227092.0
    for none in ("Unknown", "None", "N/A", "", 0, None, "0"):
        assert parse_timestamp_s(none) is None
    with pytest.raises(SlurmOutputMalformed, match="timestamp"):
        parse_timestamp_s("2026-13-45T99:00:00")


def test_json_number_both_versions():
    assert json_number(4294901758) == 4294901758
    assert json_number(None) is None
    assert json_number({"set": True, "infinite": False, "number": 60}) == 60
    assert json_number({"set": False, "infinite": False, "number": 0}) is None
    assert json_number({"set": True, "infinite": True, "number": 0}) == math.inf
    for bad in ("60", True, {"number": "x"}, [1]):
        with pytest.raises(SlurmOutputMalformed):
            json_number(bad)


def test_json_state_both_versions():
    assert json_state("PENDING") == ("PENDING", ())
    assert json_state(["PENDING", "REQUEUED"]) == ("PENDING", ("REQUEUED",))
    assert json_state("mixed") == ("MIXED", ())
    assert json_state("MIXED+DRAIN") == ("MIXED", ("DRAIN",))
    for bad in ("", [], None, 3, [""]):
        with pytest.raises(SlurmOutputMalformed):
            json_state(bad)


def test_parse_exit_code_both_versions():
    assert parse_exit_code(768) == (3, 0)  # 22.05: raw wait status
    assert parse_exit_code(15) == (0, 15)
    assert parse_exit_code("3:0") == (3, 0)  # jobcomp, sacct
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code({
        "status": ["ERROR"], "return_code": {"set": True, "infinite": False, "number": 3},
        "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
    }) == (3, 0)
    assert parse_exit_code({"status": ["SIGNALED"], "return_code": {"number": 0}, "signal": {"id": {"number": 15}, "name": "TERM"}}) == (0, 15)
    with pytest.raises(SlurmOutputMalformed):
        parse_exit_code("three")


def test_versions_and_job_ids():
    assert parse_version(fixture_text("22.05", "version.txt")) == (22, 5, 8)
    assert parse_version(fixture_text("24.11", "version.txt")) == (24, 11, 5)
    assert parse_version("slurm 23.02.7-1") == (23, 2, 7)
    with pytest.raises(SlurmOutputMalformed):
        parse_version("slurm-wlm")
    assert parse_job_id("42\n") == "42"
    assert parse_job_id("42;cluster") == "42"
    assert parse_job_id("42_7") == "42_7"
    assert parse_job_ids("1\n2 3,4\n") == ("1", "2", "3", "4")
    assert parse_job_ids("") == ()
    for bad in ("", "abc", "sbatch: error: Batch job submission failed", "-1"):
        with pytest.raises(SlurmOutputMalformed, match="job id"):
            parse_job_id(bad)


def test_failed_job_ids_from_multi_job_update():
    errors = (FIXTURES / "22.05" / "update_errors.txt").read_text()
    line = next(x for x in errors.splitlines() if ",999999 Priority=" in x)
    assert failed_job_ids(line.split(" | ")[2]) == {"999999"}


# -- squeue --json ------------------------------------------------------------------------------------


def _by_name(version: str):
    _, jobs = parse_squeue_json(fixture_text(version, "squeue.json"))
    return {j.name: j for j in jobs}


def test_squeue_json_version(version):
    found, _ = parse_squeue_json(fixture_text(version, "squeue.json"))
    assert found == {"22.05": (22, 5, 8), "24.11": (24, 11, 5)}[version]


def test_squeue_json_running_jobs(version):
    jobs = _by_name(version)
    two = jobs["rec-two-nodes"]
    assert two.state == "RUNNING" and two.holds_resources and not two.is_pending
    assert two.nodes == ("node1", "node2") and two.node_count == 2
    assert two.gres_per_node == (GresItem("gpu", "a100", 3),)
    assert two.gres_allocated == ((GresItem("gpu", "a100", 3),), (GresItem("gpu", "a100", 3),))
    assert two.partitions == ("a100",)
    assert two.start_time_s is not None and two.start_time_s >= two.submit_time_s > 1.7e9
    v100 = jobs["rec-v100-gpus"]
    assert v100.gres_per_job == (GresItem("gpu", "v100", 2),) and v100.gres_per_node == ()
    assert v100.gres_allocated == ((GresItem("gpu", "v100", 2),),)
    assert jobs["rec-npu-run"].gres_allocated == ((GresItem("npu", None, 8),),)
    assert jobs["rec-cpu-only"].gres_per_node == () and jobs["rec-cpu-only"].gres_allocated == ()
    assert jobs["rec-fill-node1"].required_nodes == ("node1",)


def test_squeue_json_pending_jobs(version):
    jobs = _by_name(version)
    typed = jobs["rec-pend-typed"]
    assert typed.is_pending and typed.start_time_s is None  # 24.11's estimate is not a start
    assert typed.gres_per_node == (GresItem("gpu", "a100", 8),)
    assert typed.time_limit_s == 1564 * 60.0  # 1-02:03:04 rounded up to minutes
    assert typed.comment == 'asrpt:tp=2,pp=2,class=bert | "quoted" text'
    assert typed.reason == "Resources" and typed.user == "root"
    assert typed.priority is not None and 4294901000 < typed.priority <= 4294901759
    assert jobs["rec pend multi partition"].partitions == ("a100", "v100")
    assert jobs["rec pend multi partition"].gres_per_node == (GresItem("gpu", None, 6),)
    assert jobs["rec-pend-untyped"].time_limit_s is None  # no --time, unlimited partition
    assert jobs["rec-pend-gpus-per-job"].gres_per_job == (GresItem("gpu", None, 12),)
    assert jobs["rec-pend-npu"].gres_per_node == (GresItem("npu", None, 4),)
    held = jobs["rec-pend-held"]
    assert held.is_held and held.priority == 0 and held.reason == "JobHeldUser"
    assert jobs["rec-pend-begin"].reason == "BeginTime" and not jobs["rec-pend-begin"].is_held
    assert jobs["rec-pend-pinned-by-user"].required_nodes == ("node2",)
    admin = jobs["rec-pend-admin"]
    assert admin.admin_comment == "tag=abc asrpt[pin]: eta 12:00"
    assert admin.priority == 4294967000 and admin.required_nodes == ("node2",)


def test_squeue_json_finished_jobs_only_in_2205():
    jobs = _by_name("22.05")
    assert jobs["rec-completed"].state == "COMPLETED" and not jobs["rec-completed"].holds_resources
    assert jobs["rec-cancelled-pending"].state == "CANCELLED"
    assert "rec-completed" not in _by_name("24.11")


def test_squeue_json_unreachable_2205_exits_0_with_errors():
    """22.05 with slurmctld down: rc 0, an errors list and no jobs. Never an empty queue."""
    assert (FIXTURES / "22.05" / "unreachable" / "squeue_json.rc").read_text().strip() == "0"
    with pytest.raises(SlurmUnreachable, match="Failed while looking for jobs"):
        parse_squeue_json(fixture_text("22.05", "unreachable/squeue_json.stdout"))
    with pytest.raises(SlurmUnreachable):
        parse_nodes_json(fixture_text("22.05", "unreachable/sinfo_json.stdout"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "garbage",
        "[1, 2]",
        '{"meta": {}, "errors": []}',
        '{"jobs": "none"}',
        '{"jobs": [42]}',
        '{"jobs": [{"job_id": "x", "job_state": "PENDING"}]}',
        '{"jobs": [{"job_id": 1}]}',
        '{"jobs": [{"job_id": 1, "job_state": "PENDING", "nodes": "node[1-"}]}',
        '{"jobs": [{"job_id": 1, "job_state": "PENDING", "tres_per_node": "gres:gpu:(("}]}',
        '{"jobs": [{"job_id": 1, "job_state": "PENDING", "priority": "high"}]}',
    ],
)
def test_squeue_json_garbage_is_malformed(text):
    with pytest.raises(SlurmOutputMalformed):
        parse_squeue_json(text)


def test_squeue_json_truncated_is_malformed(version):
    text = fixture_text(version, "squeue.json")
    for cut in (len(text) // 3, len(text) // 2, len(text) - 5):
        with pytest.raises(SlurmOutputMalformed, match="not JSON"):
            parse_squeue_json(text[:cut])


# -- nodes -----------------------------------------------------------------------------------------


def test_nodes_json(version):
    nodes = {n.name: n for n in parse_nodes_json(fixture_text(version, "nodes.json"))}
    assert set(nodes) == {"node1", "node2", "node3", "node4"}
    assert nodes["node1"].gres == (GresItem("gpu", "a100", 8),)
    assert nodes["node1"].partitions == ("gpu", "a100")
    assert [g for g in nodes["node2"].gres_used if g.name == "gpu"] == [GresItem("gpu", "a100", 3)]
    assert nodes["node2"].available and nodes["node2"].state == "MIXED"
    assert "DRAIN" in nodes["node3"].state_flags and not nodes["node3"].available
    assert nodes["node3"].reason == "recorded drain"
    assert nodes["node4"].gres == (GresItem("npu", None, 8),)
    assert [g for g in nodes["node4"].gres_used if g.name == "npu"] == [GresItem("npu", None, 8)]


def test_scontrol_show_node_json_missing_in_2205():
    assert "unrecognized option" in fixture_text("22.05", "scontrol_show_node_json.stderr")


@pytest.mark.parametrize(
    "text",
    ["", "{", '{"nodes": {}}', '{"nodes": [{"state": "idle"}]}', '{"nodes": [{"name": "n1", "state": 5}]}',
     '{"nodes": [{"name": "n1", "state": "idle", "gres": "gpu:a100:8(IDX"}]}'],
)
def test_nodes_json_garbage_is_malformed(text):
    with pytest.raises(SlurmOutputMalformed):
        parse_nodes_json(text)


def test_nodes_json_with_errors_is_unreachable():
    doc = {"nodes": [], "errors": [{"error": "Unable to contact slurm controller (connect failure)"}]}
    with pytest.raises(SlurmUnreachable, match="connect failure"):
        parse_nodes_json(json.dumps(doc))


# -- job completion log ----------------------------------------------------------------------------------


def test_jobcomp_log_recorded_states():
    records = {r.name: r for r in iter_jobcomp(fixture_text("22.05", "jobcomp.log"))}
    completed = records["rec-completed"]
    assert completed.state == "COMPLETED" and completed.exit_code == 0 and completed.ran
    assert completed.nodes == ("node1",) and completed.user == "root" and completed.partition == "gpu"
    assert completed.runtime_s is not None and 0 <= completed.runtime_s <= 5
    assert records["rec-failed"].state == "FAILED" and records["rec-failed"].exit_code == 3
    assert records["rec-killed"].exit_code == 0 and records["rec-killed"].signal == 9
    timeout = records["rec-timeout"]
    assert timeout.state == "TIMEOUT" and timeout.time_limit_s == 60.0 and timeout.runtime_s >= 60
    running = records["rec cancelled running"]
    assert running.state == "CANCELLED" and running.ran
    pending = records["rec-cancelled-pending"]
    assert pending.state == "CANCELLED" and not pending.ran and pending.start_time_s is None
    assert pending.nodes == () and pending.runtime_s is None and pending.time_limit_s is None


def test_jobcomp_name_with_spaces_and_keys():
    line = ("JobId=16 UserId=alice(1001) GroupId=alice(1001) Name=name with JobState=FAKE Partition=x spaces "
            "JobState=FAILED Partition=gpu TimeLimit=UNLIMITED StartTime=2026-12-02T15:48:23 "
            "EndTime=2026-12-02T15:48:24 NodeList=node[1-2] NodeCnt=2 ProcCnt=2 WorkDir=/tmp/a b "
            "ReservationName= Tres=cpu=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-12-02T15:48:20 "
            "EligibleTime=2026-12-02T15:48:20 DerivedExitCode=0:0 ExitCode=3:0 ")
    record = parse_jobcomp_line(line)
    assert record.job_id == "16" and record.user == "alice"
    assert record.name == "name with JobState=FAKE Partition=x spaces"
    assert record.state == "FAILED" and record.partition == "gpu" and record.nodes == ("node1", "node2")
    assert record.exit_code == 3 and record.time_limit_s is None
    assert record.end_time_s - record.start_time_s == 1.0
    assert record.submit_time_s == parse_timestamp_s("2026-12-02T15:48:20")


def jobcomp_line(job_id: int, user: str, uid: int, name: str, start: str, end: str, work_dir: str = "/home/x") -> str:
    """One record as jobcomp/filetxt writes it (JOB_FORMAT of jobcomp_filetxt.c, 22.05 and 24.11)."""
    return (f"JobId={job_id} UserId={user}({uid}) GroupId={user}({uid}) Name={name} JobState=COMPLETED "
            f"Partition=gpu TimeLimit=60 StartTime={start} EndTime={end} NodeList=node1 NodeCnt=1 ProcCnt=1 "
            f"WorkDir={work_dir} ReservationName= Tres=cpu=1,node=1 Account=ml QOS=normal WcKey= Cluster=c "
            f"SubmitTime=2026-12-02T10:00:00 EligibleTime=2026-12-02T10:00:00 DerivedExitCode=0:0 ExitCode=0:0 \n")  # fmt: skip


FORGED = "x\nJobId=41 UserId=alice(1001) GroupId=alice(1001) Name=train"


def test_jobcomp_a_newline_in_a_job_name_cannot_forge_another_users_record():
    """Issue 16: bob's 45 s job named FORGED wrote a second line that read as alice's job 41."""
    alice = jobcomp_line(41, "alice", 1001, "train", "2026-12-02T10:00:00", "2026-12-02T10:00:04")
    bob = jobcomp_line(42, "bob", 1002, FORGED, "2026-12-02T10:00:00", "2026-12-02T10:00:45")
    for text in (alice + bob, bob + alice):
        records, rejected, consumed = parse_jobcomp_lines(text.splitlines(), at_end=True)
        assert [(r.job_id, r.user, r.runtime_s) for r in records] == [("41", "alice", 4.0)]
        [bad] = rejected  # both of bob's lines, neither trusted
        assert bad.line_count == 2 and "JobId=42 UserId=bob" in bad.text and "ambiguous" in bad.reason
        assert consumed == 3
    with pytest.raises(SlurmOutputMalformed):
        list(iter_jobcomp(alice + bob))


def test_jobcomp_a_record_whose_name_or_work_dir_holds_a_newline_is_one_record():
    odd = jobcomp_line(42, "bob", 1002, "a\nb", "2026-12-02T10:00:00", "2026-12-02T10:00:45", work_dir="/tmp/c\nd")
    plain = jobcomp_line(43, "bob", 1002, "p", "2026-12-02T10:00:00", "2026-12-02T10:00:05")
    records, rejected, consumed = parse_jobcomp_lines((odd + plain).splitlines(), at_end=True)
    assert [(r.job_id, r.name, r.runtime_s) for r in records] == [("42", "a\nb", 45.0), ("43", "p", 5.0)]
    assert rejected == [] and consumed == 4
    # cut after its first line: it waits for the rest instead of being judged
    records, rejected, consumed = parse_jobcomp_lines((plain + odd).splitlines()[:2], at_end=False)
    assert [r.job_id for r in records] == ["43"] and rejected == [] and consumed == 1


def test_jobcomp_fields_are_read_from_their_fixed_places():
    # a work dir that repeats the fields after it cannot move them
    tail = (" ReservationName= Tres=cpu=1 Account=x QOS=normal WcKey= Cluster=c SubmitTime=2026-12-02T10:00:00"
            " EligibleTime=2026-12-02T10:00:00 DerivedExitCode=0:0 ExitCode=9:0 ")  # fmt: skip
    record = parse_jobcomp_line(jobcomp_line(7, "bob", 1002, "n", "2026-12-02T10:00:00", "2026-12-02T10:00:09", work_dir="/w" + tail))
    assert (record.exit_code, record.runtime_s) == (0, 9.0)
    # the fields between Name and WorkDir repeated in one of them: two readings, so neither
    middle = (" JobState=FAILED Partition=x TimeLimit=1 StartTime=2026-12-02T10:00:00 EndTime=2026-12-02T11:00:00"
              " NodeList=n NodeCnt=1 ProcCnt=1 WorkDir=y")  # fmt: skip
    for name, work_dir in (("n" + middle, "/w"), ("n", "/w" + middle)):
        with pytest.raises(SlurmOutputMalformed, match="ambiguous"):
            parse_jobcomp_line(jobcomp_line(7, "bob", 1002, name, "2026-12-02T10:00:00", "2026-12-02T10:00:09", work_dir=work_dir))
    with pytest.raises(SlurmOutputMalformed):  # the fields after ExitCode= are not Slurm's
        parse_jobcomp_line(jobcomp_line(7, "bob", 1002, "n", "2026-12-02T10:00:00", "2026-12-02T10:00:09").rstrip("\n") + "Extra=1 ")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "garbage",
        "JobId=abc UserId=root(0) GroupId=root(0) Name=x JobState=COMPLETED EndTime=2026-12-02T15:48:24",
        "JobId=1 UserId=root(0) GroupId=root(0) Name=x",
        "JobId=1 UserId=root(0) GroupId=root(0) Name=x JobState=COMPLETED StartTime=Unknown EndTime=Unknown",
        # a line cut in the middle
        "JobId=1 UserId=root(0) GroupId=root(0) Name=x JobState=COMPLETED Partition=gpu TimeLimit=5 StartTi",
    ],
)
def test_jobcomp_garbage_is_malformed(line):
    with pytest.raises(SlurmOutputMalformed):
        parse_jobcomp_line(line)


# -- sacct -------------------------------------------------------------------------------------------


def test_sacct_recorded_with_slurmdbd():
    records = {r.name: r for r in parse_sacct(fixture_text("22.05", "sacct.txt"))}
    assert "rec-two-nodes" not in records  # still running: not finished
    assert "rec-pend-typed" not in records
    assert records["rec-failed"].state == "FAILED" and records["rec-failed"].exit_code == 3
    assert records["rec cancelled running"].state == "CANCELLED"  # "CANCELLED by 0"
    assert records["rec-timeout"].time_limit_s == 60.0 and records["rec-timeout"].state == "TIMEOUT"
    assert records["rec-killed"].signal == 9
    assert all(r.source == "sacct" for r in records.values())


def test_sacct_name_with_delimiter_and_garbage():
    line = "7|bob|gpu|COMPLETED|2026-12-02T15:58:09|2026-12-02T15:58:10|2026-12-02T15:58:11|node1|0:0|00:05:00|a|b"
    (record,) = parse_sacct(line)
    assert record.name == "a|b" and record.user == "bob" and record.time_limit_s == 300.0
    for bad in ("1|root|gpu", "x|root|gpu|COMPLETED|a|b|c|node1|0:0|1|n",
                "1|root|gpu||2026-12-02T15:58:09|2026-12-02T15:58:10|2026-12-02T15:58:11|node1|0:0|1|n"):
        with pytest.raises(SlurmOutputMalformed):
            parse_sacct(bad)


def test_gres_in_24_11_tres_form():
    """24.11's squeue --json shows --gpus-per-task as ``gres/gpu=1``; one such job must not
    make the whole poll malformed."""
    from asrpt.slurm.parsing import parse_gres
    from asrpt.slurm.records import GresItem

    assert parse_gres("gres/gpu=1") == (GresItem("gpu", None, 1),)
    assert parse_gres("gres/gpu:a100=2,gres/npu=4") == (GresItem("gpu", "a100", 2), GresItem("npu", None, 4))


# -- job arrays -------------------------------------------------------------------------------------


def test_a_pending_array_record_is_one_job_per_task_2205():
    """Recorded: tasks 0-1 running (own records, job ids 2 and 3), 2-9 one pending record (id 1)."""
    _, jobs = parse_squeue_json(fixture_text("22.05", "squeue_array.json"))
    by_id = {j.job_id: j for j in jobs}
    assert sorted(by_id, key=lambda j: int(j.split("_")[1])) == [f"1_{t}" for t in range(10)]
    assert by_id["1_0"].state == "RUNNING" and by_id["1_0"].nodes
    assert all(by_id[f"1_{t}"].is_pending and by_id[f"1_{t}"].array_task_id == t for t in range(2, 10))
    assert {j.array_job_id for j in jobs} == {"1"}
    assert by_id["1_5"].gres_per_node == by_id["1_0"].gres_per_node


def test_a_pending_array_record_is_one_job_per_task_2411():
    """24.11 prints the array fields as {"set", "number"} objects; an unset task id is a pending record."""
    doc = {"meta": {"slurm": {"version": {"major": "24", "minor": "11", "micro": "5"}}}, "errors": [], "jobs": [
        {"job_id": {"set": True, "number": 7}, "job_state": ["PENDING"], "array_job_id": {"set": True, "number": 7},
         "array_task_id": {"set": False, "infinite": False, "number": 0}, "array_task_string": "0-3%2",
         "user_name": "alice", "name": "sweep", "partition": "gpu", "tres_per_node": "gres/gpu:a100:1"},
        {"job_id": {"set": True, "number": 9}, "job_state": ["PENDING"], "array_job_id": {"set": True, "number": 0},
         "array_task_id": {"set": False, "infinite": False, "number": 0}, "array_task_string": "",
         "user_name": "bob", "name": "plain", "partition": "gpu"},
    ]}
    _, jobs = parse_squeue_json(json.dumps(doc))
    assert [j.job_id for j in jobs] == ["7_0", "7_1", "7_2", "7_3", "9"]
    assert jobs[-1].array_job_id == "" and jobs[-1].array_task_id is None


@pytest.mark.parametrize(("text", "tasks"), [
    ("2-9", tuple(range(2, 10))), ("2,4", (2, 4)), ("0-9:3", (0, 3, 6, 9)), ("1-3%1", (1, 2, 3)), ("5", (5,)),
])
def test_array_task_strings(text, tasks):
    assert parse_array_tasks(text) == tasks


@pytest.mark.parametrize("text", ["", "a-b", "9-2", "1-5:0", "1,,2", "[1-3]"])
def test_a_bad_array_task_string_is_an_error_naming_it(text):
    with pytest.raises(SlurmOutputMalformed, match="array task list"):
        parse_array_tasks(text)


def test_a_huge_array_range_is_capped_without_building_it():
    started = time.perf_counter()
    assert len(parse_array_tasks("0-4000000000")) == MAX_ARRAY_TASKS
    assert time.perf_counter() - started < 1.0


def test_jobcomp_an_array_task_is_recorded_as_array_underscore_task():
    line = jobcomp_line(12, "alice", 1001, "sweep", "2026-12-02T10:00:01", "2026-12-02T10:00:05")
    line = line.replace(" DerivedExitCode=", " ArrayJobId=10 ArrayTaskId=2 DerivedExitCode=")
    assert parse_jobcomp_line(line).job_id == "10_2"
    assert parse_jobcomp_line(jobcomp_line(12, "alice", 1001, "x", "2026-12-02T10:00:01", "2026-12-02T10:00:05")).job_id == "12"


def test_job_ids_order_by_number_then_task_with_foreign_ids_last():
    from asrpt.slurm.parsing import job_id_order_key

    ids = ["h7", "43", "42_10", "9", "42", "42_2", "42+1", "abc", "1000"]
    assert sorted(ids, key=job_id_order_key) == ["9", "42", "42+1", "42_2", "42_10", "43", "1000", "abc", "h7"]


@given(st.lists(st.integers(min_value=0, max_value=10**12), unique=True))
def test_plain_job_ids_order_as_their_numbers(numbers):
    from asrpt.slurm.parsing import job_id_order_key

    assert sorted((str(n) for n in numbers), key=job_id_order_key) == [str(n) for n in sorted(numbers)]
