"""argv builders: exact lists, never shell strings."""

from __future__ import annotations

import time

import pytest

from asrpt.slurm import commands
from asrpt.slurm.parsing import SACCT_FIELDS


def test_read_commands():
    assert commands.squeue_jobs() == ["squeue", "--json", "--states=all"]
    assert commands.version() == ["scontrol", "--version"]
    assert commands.nodes_query((22, 5, 8)) == ["sinfo", "--json"]
    assert commands.nodes_query((23, 2, 0)) == ["scontrol", "show", "node", "--json"]
    assert commands.nodes_query((24, 11, 5)) == ["scontrol", "show", "node", "--json"]


def test_a_nul_never_reaches_an_scontrol_argument():
    """squeue shows a NUL a user put in the AdminComment's other text; asrpt writes that text back.
    subprocess refuses such an argument, so the write (ETA, flags) was lost every cycle."""
    assert commands.update_jobs(["7"], admin_comment="tag=a\x00b asrpt[held]: eta") == [
        "scontrol", "update", "JobId=7", "AdminComment=tag=ab asrpt[held]: eta",
    ]
    for bad in (["7\x00"], ["\x00"]):
        with pytest.raises(ValueError, match="bad job id"):
            commands.update_jobs(bad, priority=1)


def test_update_jobs():
    assert commands.update_jobs(["7"], priority=4294967000) == ["scontrol", "update", "JobId=7", "Priority=4294967000"]
    assert commands.update_jobs(["7", "8"], priority=5, req_nodes="node[1-2]", admin_comment="asrpt: a\nb  c") == [
        "scontrol", "update", "JobId=7,8", "Priority=5", "ReqNodeList=node[1-2]", "AdminComment=asrpt: a b c",
    ]
    assert commands.update_jobs(["7"], req_nodes="") == ["scontrol", "update", "JobId=7", "ReqNodeList="]
    assert commands.update_jobs(["7"], admin_comment="") == ["scontrol", "update", "JobId=7", "AdminComment="]
    with pytest.raises(ValueError, match="at least one field"):
        commands.update_jobs(["7"])
    for bad in ([], ["7 8"], ["7,8"], ["Priority=1"], [""]):
        with pytest.raises(ValueError):
            commands.update_jobs(bad, priority=1)


def test_hold_release():
    assert commands.hold(["1", "2"]) == ["scontrol", "hold", "1,2"]
    assert commands.release(["3"]) == ["scontrol", "release", "3"]


def test_sacct():
    since = time.mktime((2026, 12, 2, 11, 0, 0, 0, 0, -1))
    argv = commands.sacct_finished(since)
    assert argv[:5] == ["sacct", "-X", "-n", "-P", "-a"]
    assert argv[argv.index("-S") + 1] == "2026-12-02T11:00:00"
    assert argv[-1] == ",".join(SACCT_FIELDS) and SACCT_FIELDS[-1] == "JobName"
