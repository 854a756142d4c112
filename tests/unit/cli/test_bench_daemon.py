"""`asrpt bench daemon` runs real daemon cycles (real SQLite and spool, Slurm's answers built in
memory) and counts their writes: a cycle writes in proportion to what changed, not to the
queue (issue 16: 3,000 pending jobs used to get about 2,950 AdminComment and up to 1,000
priority rewrites per cycle although nothing changed). Times are reported, never asserted."""

from __future__ import annotations

import json

from asrpt.cli.bench_daemon import RecordedSlurm, run_daemon_bench, synthetic_queue
from asrpt.cli.main import main


def test_writes_follow_what_changed_not_the_queue_size() -> None:
    result = run_daemon_bench(pending=200, running=30, nodes=30, history=300)
    jobs = result.pending + result.running
    assert result.running == 30
    # The first cycle gives every job its priority band and ETA text.
    assert result.writes_first >= result.pending
    assert result.writes_by_command["first"]["squeue"] == 1
    # Afterwards: about one write per changed job, plus ETAs that really moved.
    assert result.writes_steady <= 2 * result.changed_steady + jobs // 10
    assert result.writes_idle <= jobs // 10


def test_the_recorded_slurm_shows_the_daemons_writes_at_the_next_poll() -> None:
    queue = synthetic_queue(pending=3, running=0, nodes=1, now_s=1e9, seed=1)
    slurm = RecordedSlurm(queue)
    job_id = next(iter(queue.jobs))
    slurm.run(["scontrol", "update", f"JobId={job_id}", "Priority=77", "ReqNodeList=gn00000", "AdminComment=asrpt: eta x"])
    slurm.run(["scontrol", "hold", str(job_id)])
    shown = {job["job_id"]: job for job in json.loads(slurm.run(["squeue", "--json"]).stdout)["jobs"]}[job_id]
    assert (shown["required_nodes"], shown["admin_comment"], shown["state_reason"]) == ("gn00000", "asrpt: eta x", "JobHeldAdmin")
    assert slurm.calls["scontrol update"] == 1 and len(slurm.writes) == 2


def test_the_command_rejects_a_negative_size_and_an_unknown_policy(capsys) -> None:
    for argv, text in ((["bench", "daemon", "--pending", "-5"], "at least 1"), (["bench", "daemon", "--policy", "foo"], "valid:")):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        assert code == 2
        assert text in capsys.readouterr().err
