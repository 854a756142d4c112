"""Profile readers: what they make of each source, and errors that name the file and line."""

import pytest

from asrpt.serving.errors import ProfileFormatError
from asrpt.serving.profiles import ProfileKey, read_profile

from tests.serving.helpers import write_splitwise_profile

SPLITWISE_HEADER = "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,e2e_time,tensor_parallel"


def test_splitwise_rows_become_prefill_and_decode_samples(tmp_path):
    path = tmp_path / "perf.csv"
    path.write_text(SPLITWISE_HEADER + "\nllama2-70b,a100-80gb,512,4,128,1,0.7,800.0,60.0,8000,2\n")
    profile = read_profile(path, "splitwise")
    (prefill,), (decode,) = profile.prefill, profile.decode
    assert prefill.key == ProfileKey("llama2-70b", "a100-80gb", 2)
    assert (prefill.batch_size, prefill.prompt_tokens, prefill.squared_prompt_tokens) == (4, 2048, 4 * 512**2)
    assert decode.cached_tokens == 4 * (512 + 64)  # mean over the 128 decode steps
    assert prefill.source == f"{path}:2"


def test_splitwise_prefill_repetitions_share_a_group_whatever_the_output_length(tmp_path):
    path = write_splitwise_profile(tmp_path / "perf.csv")
    profile = read_profile(path, "splitwise")
    groups = {s.group for s in profile.prefill if s.batch_size == 1 and s.prompt_tokens == 512}
    assert len(groups) == 1
    assert len({s.group for s in profile.decode if s.batch_size == 1 and s.cached_tokens > 512}) > 1


@pytest.mark.parametrize("row, message", [
    ("llama2-70b,a100-80gb,512,4,128,1,0.7,fast,60.0,8000,2", "column prompt_time is not a number"),
    ("llama2-70b,a100-80gb,512,4,128,1,0.7,-3,60.0,8000,2", "column prompt_time must be > 0"),
    ("llama2-70b,a100-80gb,512,4,128,1,0.7,800,60.0,8000,2.5", "tensor_parallel must be an integer"),
])
def test_splitwise_bad_row_names_file_and_line(tmp_path, row, message):
    path = tmp_path / "perf.csv"
    path.write_text(SPLITWISE_HEADER + "\nllama2-70b,a100-80gb,512,1,128,1,0.7,200,50,7000,2\n" + row + "\n")
    with pytest.raises(ProfileFormatError) as raised:
        read_profile(path, "splitwise")
    assert f"{path}:3" in str(raised.value)
    assert message in str(raised.value)


def test_missing_column_is_named(tmp_path):
    path = tmp_path / "perf.csv"
    path.write_text("model,hardware,prompt_size\nx,y,1\n")
    with pytest.raises(ProfileFormatError, match=r"perf.csv:1: missing column\(s\) batch_size"):
        read_profile(path, "splitwise")


def test_unknown_format_lists_the_known_ones(tmp_path):
    with pytest.raises(ProfileFormatError, match="splitwise, distserve, vidur"):
        read_profile(tmp_path / "x.csv", "nvidia")


def _exp(requests) -> str:
    return repr(requests) + "\n{\n\tnum_requests: %d\n}\n" % len(requests)


def test_distserve_timeline_reconstruction(tmp_path):
    # Request 0 decodes alone, then request 1 arrives, is prefilled (stalling 0) and decodes with it.
    requests = [
        {"prompt_len": 100, "output_len": 11, "issue_time": 0.0, "first_token_time": 0.05, "complete_time": 1.05},
        {"prompt_len": 300, "output_len": 6, "issue_time": 0.5, "first_token_time": 0.55, "complete_time": 1.05},
    ]
    path = tmp_path / "vllm-2-1.exp"
    path.write_text(_exp(requests))
    profile = read_profile(path, "distserve")
    assert {s.key for s in profile.prefill} == {ProfileKey("opt-13b", "a100-80gb", 1)}
    assert sorted(s.time_ms for s in profile.prefill) == pytest.approx([50.0, 50.0])
    first = next(s for s in profile.decode if "request 0" in s.source)
    assert first.time_ms == pytest.approx(100.0)  # 1 s over 10 steps
    assert first.batch_size == pytest.approx(1.5)  # request 1 decoded during half of the window
    assert first.interleaved_prefills == pytest.approx(0.1)  # one stalling prefill over 10 steps
    assert first.interleaved_prefill_tokens == pytest.approx(30.0)


def test_distserve_prefill_that_waited_for_another_is_skipped(tmp_path):
    requests = [
        {"prompt_len": 2000, "output_len": 3, "issue_time": 0.0, "first_token_time": 0.4, "complete_time": 0.5},
        {"prompt_len": 50, "output_len": 3, "issue_time": 0.1, "first_token_time": 0.45, "complete_time": 0.55},
    ]
    path = tmp_path / "vllm-2-1.exp"
    path.write_text(_exp(requests))
    profile = read_profile(path, "distserve")
    assert len(profile.prefill) == 1
    assert profile.skipped == {"prefill batch blocked by another prefill": 1}


def test_distserve_not_a_literal_names_the_file(tmp_path):
    path = tmp_path / "vllm-1-1.exp"
    path.write_text("[{'prompt_len': 1,\n")
    with pytest.raises(ProfileFormatError, match=r"vllm-1-1.exp:1: not a Python list literal"):
        read_profile(path, "distserve")


def test_distserve_times_out_of_order_are_refused(tmp_path):
    path = tmp_path / "vllm-1-1.exp"
    path.write_text(_exp([{"prompt_len": 5, "output_len": 2, "issue_time": 1.0, "first_token_time": 0.5, "complete_time": 2.0}]))
    with pytest.raises(ProfileFormatError, match="request 0: times out of order"):
        read_profile(path, "distserve")


def test_vidur_unknown_model_directory_lists_known_models(tmp_path):
    path = tmp_path / "compute" / "a100" / "Mystery-9b" / "mlp.csv"
    path.parent.mkdir(parents=True)
    path.write_text("num_tokens\n1\n")
    with pytest.raises(ProfileFormatError, match="Mystery-9b.*llama2-7b"):
        read_profile(path, "vidur")
