"""Azure trace reading, request streams, the output-length predictor, cluster descriptions."""

import math

import numpy as np
import pytest

from asrpt.exceptions import TraceFormatError
from asrpt.serving.cluster import parse_cluster, parse_instances
from asrpt.serving.errors import ClusterSpecError, UnknownAccelerator
from asrpt.serving.output_predictor import BucketMeanPredictor
from asrpt.serving.workload import (
    TraceRow,
    poisson_arrivals_s,
    read_azure_trace,
    sample_lengths,
    split_by_time,
    usable_lengths,
)

from tests.serving.helpers import write_azure_trace


def test_azure_trace_round_trip(tmp_path):
    rows = read_azure_trace(write_azure_trace(tmp_path / "trace.csv", count=50))
    assert len(rows) == 50
    assert rows[1].timestamp_s - rows[0].timestamp_s == pytest.approx(1.0, abs=1e-3)


def test_azure_bad_row_names_file_and_line(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,1,2\n")
    with pytest.raises(TraceFormatError, match=r"trace.csv:3: cannot parse"):
        read_azure_trace(path)


def test_lengths_follow_the_engine_limit():
    rows = [TraceRow(0, 5000, 10), TraceRow(1, 4000, 500), TraceRow(2, 100, 50)]
    lengths = usable_lengths(rows, 4096)
    assert lengths.prompt_tokens == (4000, 100)
    assert lengths.output_tokens == (96, 50)
    assert (lengths.dropped_long_prompts, lengths.clipped_outputs) == (1, 1)
    assert len(sample_lengths(lengths, 10, 0)) == 10


def test_poisson_arrivals_are_seeded_and_have_the_rate():
    arrivals = poisson_arrivals_s(20_000, 8.0, seed=1)
    assert (arrivals == poisson_arrivals_s(20_000, 8.0, seed=1)).all()
    assert len(arrivals) / arrivals[-1] == pytest.approx(8.0, rel=0.03)
    assert (poisson_arrivals_s(5, math.inf, seed=1) == 0).all()


def test_split_by_time_keeps_the_future_out_of_the_history():
    rows = [TraceRow(float(t), 10, 10) for t in (5, 1, 3, 2, 4, 0)]
    history, future = split_by_time(rows)
    assert max(r.timestamp_s for r in history) < min(r.timestamp_s for r in future)


def test_bucket_predictor_learns_output_by_prompt_length():
    prompts = np.concatenate([np.full(100, 200), np.full(100, 2000)])
    outputs = np.concatenate([np.full(100, 400), np.full(100, 30)])
    predictor = BucketMeanPredictor.fit(prompts, outputs, buckets=2)
    assert predictor.predict(150) == 400
    assert predictor.predict(3000) == 30
    assert BucketMeanPredictor.constant(77).predict(10_000) == 77


def test_inline_cluster():
    cluster = parse_cluster("a100x8+h100x4*2")
    assert [(m.accelerator, m.gpus, m.count) for m in cluster.machines] == [("a100-80gb", 8, 1), ("h100-80gb", 4, 2)]
    assert cluster.label == "a100-80gbx8+h100-80gbx4*2"


def test_toml_cluster_with_engine_settings(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('[[machines]]\naccelerator = "a40"\ngpus = 4\ncount = 3\n\n[engine]\nmemory_fraction = 0.85\n')
    cluster = parse_cluster(str(path))
    assert cluster.machines[0].accelerator == "a40-48gb" and cluster.machines[0].count == 3
    assert cluster.engine.memory_fraction == 0.85


@pytest.mark.parametrize("text, error, message", [
    ("a100", ClusterSpecError, "expected <accelerator>x<gpus>"),
    ("tpux8", UnknownAccelerator, "known accelerators"),
])
def test_bad_cluster_strings(text, error, message):
    with pytest.raises(error, match=message):
        parse_cluster(text)


def test_toml_unknown_keys_list_the_valid_ones(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('[[machines]]\naccelerator = "a100"\ngpus = 8\n\n[engine]\ngpu_util = 0.9\n')
    with pytest.raises(ClusterSpecError, match="unknown engine key.*gpu_util.*valid: .*memory_fraction"):
        parse_cluster(str(path))


def test_instances_spec():
    assert parse_instances("a100-80gb:tp2x2,h100:tp4") == [("a100-80gb", 2, 2), ("h100-80gb", 4, 1)]
    with pytest.raises(ClusterSpecError, match="expected <accelerator>:tp<t>"):
        parse_instances("a100-80gb/2")
