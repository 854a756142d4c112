"""A 10-job scenario whose schedules were worked out by hand, one per policy.

One node with 2 accelerators, a workload class that does not communicate (alpha = 1 s per
iteration everywhere), perfect predictions. The derivations are in the comments so that a
failure can be checked against them.
"""

import pytest

from asrpt.core.policies import make_policy
from asrpt.sim.engine import simulate
from asrpt.sim.predictors import OraclePredictions
from tests.helpers import flat_job, flat_speed_table, partition_nodes

# (id, submit s, accelerators, iterations)
JOBS = [
    ("1", 0, 2, 100), ("2", 1, 1, 30), ("3", 2, 1, 10), ("4", 3, 2, 20), ("5", 4, 1, 5),
    ("6", 5, 1, 60), ("7", 6, 2, 5), ("8", 7, 1, 40), ("9", 8, 1, 15), ("10", 9, 2, 10),
]

EXPECTED_STARTS = {
    # FIFO, head-of-line, with Slurm's own backfill on time limits (6x the runtimes) behind it:
    # 1 runs 0-100; 2 and 3 at 100; at 110 (3 ends) 4 needs both and Slurm reserves them for it
    # at 280 (2's limit: 100 + 180); 5 (limit 30) ends before that: Slurm starts it at 110; at
    # 115 the same for 9 (limit 90; 6 and 8 have limits past 280); 4 at 130 (2 and 9 end); at
    # 150 fifo starts 6, 7 waits for both, Slurm reserves them at 510 (6's limit) and starts 8
    # (limit 240, ends by 390); 7 at 210 (6 ends); 10 at 215.
    "fifo": {"1": 0, "2": 100, "3": 100, "4": 130, "5": 110, "6": 150, "7": 210, "8": 150, "9": 115, "10": 215},
    # SJF by true runtime with EASY backfill. At 100 the order is 5,7,3,10,9,4,2,8,6: 5 starts,
    # 7 is blocked and reserved at 105, nothing ends by 105 so nothing backfills; 7 at 105; 3 at
    # 110 with 10 reserved at 120; 10 at 120; 9 at 130 with 4 reserved at 145; 4 at 145; 2, 8
    # at 165; 6 when 2 ends (195). Slurm's backfill (limits 6x) adds nothing: whenever an
    # accelerator is idle every 1-wide job's limit runs past the reservation.
    "sjf-oracle": {"1": 0, "5": 100, "7": 105, "3": 110, "10": 120, "9": 130, "4": 145, "2": 165, "8": 165, "6": 195},
    # Shortest predicted work (accelerators x iterations): 5,3,7,9,10,2,4,8,6. At 100: 5 and 3;
    # 7 reserved at 110 (3 ends); 7 at 110; 9 at 115 with 10 reserved at 130; 10 at 130; 2 at
    # 140 with 4 reserved at 170; 4 at 170; 8, 6 at 190.
    "spwf": {"1": 0, "5": 100, "3": 100, "7": 110, "9": 115, "10": 130, "2": 140, "4": 170, "8": 190, "6": 190},
    # A-SRPT with true sizes: virtual lengths g/2 x n = 100, 15, 5, 20, 2.5, 30, 5, 20, 7.5, 10.
    # At 0 the virtual machine has not released 1 yet, but it is pending, not held and fits:
    # Slurm starts it (0-100). Virtual SRPT completes 5@6.5, 3@9.5, 7@14.5, 9@22, 10@32, 2@46,
    # 4@66, 8@86, 6@116, all while 1 holds the cluster. At 100 Q is 5,3,7,9,10,2,4,8: 5 and 3
    # start; 7 waits for 3 (110); at 115 9 starts and 10 is reserved at 130 (the policy's
    # runtimes; by limits Slurm reserves at 205 and backfills nothing); 10 at 130; 2 at 140 with
    # 4 reserved at 170; 4 at 170; 8, 6 at 190.
    "asrpt-oracle": {"1": 0, "5": 100, "3": 100, "7": 110, "9": 115, "10": 130, "2": 140, "4": 170, "8": 190, "6": 190},
}


#: The idealised cluster (``slurm_fills=False``: exactly the decisions' starts run).
IDEALISED_STARTS = {
    # FIFO, head-of-line: 1 runs 0-100; 2 and 3 at 100; 4 needs both, waits for 2 (130); 5, 6
    # at 150; 7 waits for 6 (210); 8, 9 at 215; 10 waits for 8 (255).
    "fifo": {"1": 0, "2": 100, "3": 100, "4": 130, "5": 150, "6": 150, "7": 210, "8": 215, "9": 215, "10": 255},
    # A-SRPT dispatches from virtual completion: 5 at 6.5, 3 at 9.5, 7 waits for 3 (19.5), 9 for
    # 7 (24.5), 10 for 9 (39.5), 2 at 49.5, 4 waits for 2 (79.5), 8 at 99.5, 6 at 116, 1 at 215.
    "asrpt-oracle": {"5": 6.5, "3": 9.5, "7": 19.5, "9": 24.5, "10": 39.5, "2": 49.5, "4": 79.5, "8": 99.5, "6": 116, "1": 215},
}


def _run(policy_name, slurm_fills=True):
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=2)
    jobs = [flat_job(i, g, float(n), submit_s=float(t), time_limit_s=6.0 * n) for i, t, g, n in JOBS]
    return simulate(jobs, [partition], nodes, make_policy(policy_name, speed), OraclePredictions(), slurm_fills=slurm_fills)


@pytest.mark.parametrize("policy_name", sorted(IDEALISED_STARTS))
def test_hand_checked_starts_on_the_idealised_cluster(policy_name):
    result = _run(policy_name, slurm_fills=False)
    starts = {job_id: r.first_start_s for job_id, r in result.records.items()}
    assert starts == pytest.approx(IDEALISED_STARTS[policy_name])


@pytest.mark.parametrize("policy_name", sorted(EXPECTED_STARTS))
def test_hand_checked_starts(policy_name):
    result = _run(policy_name)
    starts = {job_id: r.first_start_s for job_id, r in result.records.items()}
    assert starts == pytest.approx(EXPECTED_STARTS[policy_name])


def test_multifactor_backfills_on_time_limits_not_runtimes():
    """Limits are 6x the runtime: at 100 the head (largest job first: 4, 7, 10 are 2-wide and
    oldest first) is 4; backfill trusts limits, so a 1-wide job may run beside nothing that
    would end before the head's reservation computed from limits."""
    result = _run("multifactor")
    starts = {job_id: r.first_start_s for job_id, r in result.records.items()}
    assert starts["1"] == 0
    assert starts["4"] == 100  # largest and oldest pending at 100: size factor wins
    assert starts["7"] > starts["4"] and starts["10"] > starts["7"]


def test_tiresias_keeps_young_jobs_in_fifo_order():
    """Job 1 attains only 200 accelerator-seconds, below the first queue threshold (3600), so
    Tiresias behaves as FIFO without backfill here: 1 runs to the end before anyone else."""
    result = _run("tiresias")
    assert result.records["1"].preemptions == 0 and result.records["1"].end_s == 100


def test_tiresias_preempts_a_job_that_climbed_a_queue():
    """A 2-wide job passes 3600 accelerator-seconds at t=1800 and drops to queue 1; a 1-wide job
    arriving at 2000 is in queue 0 and displaces it. The long job resumes when it ends."""
    speed = flat_speed_table()
    partition, nodes = partition_nodes("gpu", "gpu", count=1, per_node=2)
    jobs = [flat_job("long", 2, 5000.0), flat_job("short", 1, 10.0, submit_s=2000.0)]
    result = simulate(jobs, [partition], nodes, make_policy("tiresias", speed), OraclePredictions())
    long_job, short = result.records["long"], result.records["short"]
    assert long_job.preemptions == 1
    assert (short.first_start_s, short.end_s) == (2000.0, 2010.0)
    assert long_job.end_s == pytest.approx(5010.0)
    assert long_job.service_s == pytest.approx(2 * 5000.0)


def test_same_seed_same_everything():
    assert _run("asrpt").records.keys() == _run("asrpt").records.keys()
    for a, b in zip(_run("qssf").records.values(), _run("qssf").records.values()):
        assert (a.first_start_s, a.end_s) == (b.first_start_s, b.end_s)


def _run_two_partitions(policy_name):
    """Partitions a and b with one accelerator each; (id, submit s, iterations = seconds, partition)."""
    speed = flat_speed_table()
    part_a, nodes_a = partition_nodes("a", "gpu", count=1, per_node=1)
    part_b, nodes_b = partition_nodes("b", "gpu", count=1, per_node=1)
    spec = [("1", 0, 100, "a"), ("2", 1, 10, "a"), ("3", 2, 10, "b")]
    jobs = [flat_job(i, 1, float(n), submit_s=float(t), allowed_partitions=(p,)) for i, t, n, p in spec]
    return simulate(jobs, [part_a, part_b], nodes_a + nodes_b, make_policy(policy_name, speed), OraclePredictions())


def test_strict_head_blocks_only_its_own_partition():
    """Issue 14 item 3. FIFO: 1 runs on a 0-100; 2 waits for a (100-110); 3 asks for b, which
    is free, at 2 and ends at 12 although 2 is ahead of it. JCT 100 + 109 + 10 = 219 s (a head
    that blocked every partition made 3 wait until 100: 317 s)."""
    result = _run_two_partitions("fifo")
    starts = {job_id: r.first_start_s for job_id, r in result.records.items()}
    assert starts == pytest.approx({"1": 0, "2": 100, "3": 2})
    total_jct_s = sum(r.end_s - r.job.submit_time_s for r in result.records.values())
    assert total_jct_s == pytest.approx(219.0)


@pytest.mark.parametrize("policy_name", ["sjf-oracle", "asrpt-oracle"])
def test_equal_durations_go_by_arrival(policy_name):
    """Issue 14 item 4. Iterations are derived as duration / alpha (sim/workload.py), so two
    25 s jobs of different classes come back as 25.0 s (a3c) and 24.999999999999996 s (bert).
    One v100; a 10 s job arrives first; a (a3c) arrives at 1, b (bert) at 2: a must go 25 s
    before b (sjf-oracle: 10 and 35; A-SRPT dispatches from virtual completion: 35 and 60)."""
    from asrpt.core.model import Node, Partition
    from asrpt.core.placement import alpha_min_s
    from asrpt.core.speed import default_speed_table

    speed = default_speed_table()
    partition = Partition(name="gpu", accelerator="v100")
    nodes = (Node(name="n0", partition="gpu", accelerator="v100", accelerators_total=1, accelerators_free=1),)

    def job(job_id, workload_class, submit_s, duration_s):
        probe = flat_job(job_id, 1, 1.0, submit_s=submit_s)
        probe = probe.__class__(**{**{f: getattr(probe, f) for f in probe.__slots__}, "workload_class": workload_class})
        alpha_s = alpha_min_s(probe, (partition,), nodes, speed)
        n = duration_s / alpha_s
        return probe.__class__(**{**{f: getattr(probe, f) for f in probe.__slots__},
                                  "true_iterations": n, "predicted_iterations": n})

    jobs = [job("first", "a3c", 0.0, 10.0), job("a", "a3c", 1.0, 25.0), job("b", "bert", 2.0, 25.0)]
    a_s = jobs[1].true_iterations * alpha_min_s(jobs[1], (partition,), nodes, speed)
    b_s = jobs[2].true_iterations * alpha_min_s(jobs[2], (partition,), nodes, speed)
    assert b_s < a_s  # the noise this test is about
    result = simulate(jobs, [partition], nodes, make_policy(policy_name, speed), OraclePredictions())
    starts = {job_id: r.first_start_s for job_id, r in result.records.items()}
    assert starts["first"] < starts["a"]
    assert starts["b"] == pytest.approx(starts["a"] + 25.0)
