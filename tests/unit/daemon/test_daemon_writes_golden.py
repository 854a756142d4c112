"""Golden daemon writes: every scontrol write of a fixed scenario through real daemon cycles.

The scenario is the ``asrpt bench daemon`` queue, small: a real SQLite history (trained
forest), a real spool directory, ``squeue``/``sinfo`` answered from the synthetic queue's JSON,
and every ``scontrol`` write recorded (and applied to the queue, as slurmctld would show it at
the next poll). The clock is fixed and advanced by hand: a first cycle (all jobs new), Slurm
starting what was pinned, quiet cycles a little later (ETA drift below the rewrite threshold),
jobs ending and arriving, a jump of hours (running jobs outlive their predictions), and the
stop (asrpt's pins and holds released).

The whole list of writes (priorities, node lists, holds, releases, AdminComment texts) must
equal ``data/daemon_writes_golden.txt``. A refactoring of the cycle must not move one of them;
a change meant to change them regenerates the file and says why in its commit:

    .venv/bin/python -m tests.unit.daemon.test_daemon_writes_golden --write
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from asrpt.cli.bench_daemon import RecordedSlurm, _seed_history, _write_spool_records, synthetic_queue

GOLDEN = Path(__file__).parent / "data" / "daemon_writes_golden.txt"
#: 2026-06-01T00:00:00Z: every ETA text is a fixed date.
START_S = 1_780_272_000.0


class _Clock:
    def __init__(self, t_s: float) -> None:
        self.t_s = t_s

    def now_s(self) -> float:
        return self.t_s


def scenario_writes() -> list[str]:
    """The scenario's writes, one line each (``cycle N: scontrol ARGS``), in order."""
    from asrpt.daemon.config import DaemonConfig, DaemonSection, DatabaseSection, SpoolSection
    from asrpt.daemon.service import Daemon
    from asrpt.db.migrate import upgrade
    from asrpt.db.repository import HistoryRepository

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="asrpt-golden-writes-") as tmp:
        url = f"sqlite:///{tmp}/history.db"
        spool_dir = os.path.join(tmp, "spool")
        os.makedirs(spool_dir, mode=0o700)
        upgrade(url)
        clock = _Clock(START_S)
        queue = synthetic_queue(60, 20, 12, clock.t_s, seed=7)
        _write_spool_records(spool_dir, list(queue.jobs.values()))
        config = DaemonConfig(
            daemon=DaemonSection(policy="asrpt", state_dir=tmp),
            database=DatabaseSection(url=url),
            spool=SpoolSection(dir=spool_dir),
        )
        repository = HistoryRepository.from_url(url)
        try:
            _seed_history(repository, queue, 300, clock.t_s)
            daemon = Daemon(config, repository=repository, clock=clock)
            recorder = RecordedSlurm(queue)
            daemon.backend.runner = recorder
            daemon.retrain()
            cycle_no = 0

            def cycle(advance_s: float) -> None:
                nonlocal cycle_no
                cycle_no += 1
                recorder.writes.clear()
                assert daemon.cycle() is not None, daemon.stats.last_error
                lines.append(f"cycle {cycle_no} at +{clock.t_s - START_S:.0f}s: {len(recorder.writes)} write(s)")
                lines.extend("  " + " ".join(args[1:]) for args in recorder.writes)
                clock.t_s += advance_s

            cycle(30.0)  # every job new
            for _ in range(3):  # Slurm starts what was pinned
                queue.start_pinned(clock.t_s)
                cycle(30.0)
            cycle(240.0)  # quiet: ETAs drift by less than the rewrite threshold
            cycle(30.0)
            running_ids = sorted(job_id for job_id, job in queue.jobs.items() if job["job_state"] == "RUNNING")
            for job_id in running_ids[:4]:
                queue.end_job(job_id)
            new_jobs = [queue.pending_job(clock.t_s) for _ in range(5)]
            for job in new_jobs:
                job["submit_time"] = int(clock.t_s) - 5
                queue.jobs[job["job_id"]] = job
            _write_spool_records(spool_dir, new_jobs)
            cycle(30.0)  # jobs ended and arrived
            queue.start_pinned(clock.t_s)
            cycle(4 * 3600.0)
            cycle(30.0)  # hours later: running jobs outlived their predictions
            cycle(30.0)
            recorder.writes.clear()
            daemon.release_holds()  # asrptd stopping: every pin and hold it placed is released
            lines.append(f"stop: {len(recorder.writes)} write(s)")
            lines.extend("  " + " ".join(args[1:]) for args in recorder.writes)
        finally:
            repository.close()
    return lines


def test_daemon_writes_equal_the_golden_file():
    got = scenario_writes()
    want = GOLDEN.read_text().splitlines()
    assert got == want, "the daemon's writes moved; diff against " + str(GOLDEN)


def test_golden_scenario_exercises_every_kind_of_write():
    """The golden file covers priorities, node lists, holds and ETA texts (else it guards little)."""
    text = GOLDEN.read_text()
    for needle in ("Priority=", "ReqNodeList=", "AdminComment=asrpt: eta start", "AdminComment=asrpt: eta end", "\nstop: "):
        assert needle in text, needle


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text("\n".join(scenario_writes()) + "\n")
    print(f"wrote {GOLDEN}")
