"""Golden schedules: every policy, with and without the Slurm model, on two real trace slices.

A speed-up of the simulator or the dispatcher must not move a single job. Each case replays a
few hundred real jobs on a cluster small enough that queues build up (reservations, backfill,
holds and Slurm's own starts all happen), and the digest of every start (time, job,
partition, node of each worker) and end must equal the one stored in
``data/golden_schedules.csv``. The row also keeps the decision count and the total JCT, so a
failure says how much moved.

A change that is meant to change schedules regenerates the file and says why in its commit:

    .venv/bin/python -m tests.sim.test_schedule_golden --write
"""

from __future__ import annotations

import csv
import hashlib
import sys
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from asrpt.core.policies import POLICIES, make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.clusters import load_cluster
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import GroupHistoryPredictions
from asrpt.sim.traces import read_trace
from asrpt.sim.workload import build_jobs

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_schedules.csv"
PAI_SLICE = Path(str(resources.files("asrpt").joinpath("data/traces/pai_slice.csv")))
COLUMNS = ("case", "slurm_fills", "policy", "jobs", "decisions", "total_jct_s", "events_sha256")


def _case(name: str):
    """(jobs, cluster) of a case: Philly's first 400 jobs on the first 8 of its 80 nodes, or the
    bundled PAI slice's first 300 rows on every sixth node of the ``pai`` cluster."""
    if name == "philly":
        cluster = load_cluster("philly")
        cluster = replace(cluster, nodes=cluster.nodes[:8])
        read = read_trace(DATA / "philly_head_400.csv", "philly")
    else:
        cluster = load_cluster("pai")
        cluster = replace(cluster, nodes=cluster.nodes[::6])
        read = read_trace(PAI_SLICE, "pai", limit=300)
    speed = cluster.speed_table(default_speed_table())
    return build_jobs(read.records, cluster, speed, seed=0).jobs, cluster, speed


def replay_row(case: str, slurm_fills: bool, policy: str) -> dict[str, str]:
    jobs, cluster, speed = _case(case)
    result = simulate(jobs, cluster.partitions, cluster.nodes, make_policy(policy, speed), GroupHistoryPredictions(),
                      keep_events=True, slurm_fills=slurm_fills)
    total_jct_s = sum(r.end_s - r.job.submit_time_s for r in result.records.values())
    return {
        "case": case,
        "slurm_fills": str(slurm_fills),
        "policy": policy,
        "jobs": str(len(jobs)),
        "decisions": str(result.decisions),
        "total_jct_s": repr(total_jct_s),
        "events_sha256": hashlib.sha256(repr(result.events).encode()).hexdigest(),
    }


CASES = [(case, fills, policy) for case in ("philly", "pai") for fills in (True, False) for policy in POLICIES]


def _stored() -> dict[tuple[str, str, str], dict[str, str]]:
    with GOLDEN.open(newline="") as handle:
        return {(row["case"], row["slurm_fills"], row["policy"]): row for row in csv.DictReader(handle)}


def test_every_case_has_a_stored_schedule() -> None:
    assert set(_stored()) == {(case, str(fills), policy) for case, fills, policy in CASES}


@pytest.mark.parametrize(("case", "slurm_fills", "policy"), CASES)
def test_schedule_is_unchanged(case: str, slurm_fills: bool, policy: str) -> None:
    expected = _stored()[(case, str(slurm_fills), policy)]
    assert replay_row(case, slurm_fills, policy) == expected


def _write() -> None:
    with GOLDEN.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for case, fills, policy in CASES:
            writer.writerow(replay_row(case, fills, policy))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.sim.test_schedule_golden --write")
    _write()
