"""Directive parsing: sbatch's command line, #SBATCH lines and #ASRPT directives.

The argv and #SBATCH expectations below were checked against Slurm 22.05's sbatch (see the
module docstring of asrpt.submit_wrapper.directives). The script cases are golden files:
``golden/scripts/NAME.sh`` -> ``golden/NAME.json``; a missing or different golden fails, and
``ASRPT_REGEN_GOLDEN=1 pytest tests/unit/submit_wrapper`` rewrites them (review the diff).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.submit_wrapper import directives
from asrpt.submit_wrapper.directives import parse_argv, recurrence_text, scan_script, split_directive

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("ASRPT_REGEN_GOLDEN") == "1"


# ---- the command line ---------------------------------------------------------------------

ARGV_CASES = [
    # (argv, options, script, script_args, wrap, confident, components)
    (["job.sh"], {}, "job.sh", [], None, True, 1),
    (["--parsable", "job.sh", "--lr", "3"], {"parsable": True}, "job.sh", ["--lr", "3"], None, True, 1),
    (["-p", "gpu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 1),
    (["-pgpu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 1),
    (["--partition=gpu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 1),
    (["--partition", "gpu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 1),
    (["--part=gpu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 1),
    (["--pa=gpu", "job.sh"], {"pa": "gpu"}, "job.sh", [], None, False, 1),  # ambiguous: parsable/partition
    (["-J=x", "job.sh"], {"job-name": "=x"}, "job.sh", [], None, True, 1),
    (["-HvN", "2", "job.sh"], {"hold": True, "verbose": True, "nodes": "2"}, "job.sh", [], None, True, 1),
    (["-N2", "-n8", "job.sh"], {"nodes": "2", "ntasks": "8"}, "job.sh", [], None, True, 1),
    (["--hold", "--array=0-2", "job.sh"], {"hold": True, "array": "0-2"}, "job.sh", [], None, True, 1),
    (["-a", "0-2%1", "job.sh"], {"array": "0-2%1"}, "job.sh", [], None, True, 1),
    (["--wrap", "echo hi"], {"wrap": "echo hi"}, None, [], "echo hi", True, 1),
    (["--wrap=echo hi", "-p", "gpu"], {"wrap": "echo hi", "partition": "gpu"}, None, [], "echo hi", True, 1),
    ([], {}, None, [], None, True, 1),
    (["--parsable"], {"parsable": True}, None, [], None, True, 1),
    (["--", "job.sh", "-x"], {}, "job.sh", ["-x"], None, True, 1),
    (["-", "a"], {}, "-", ["a"], None, True, 1),  # "-" is a file name for sbatch
    # optional arguments attach only with "=" (or directly to a short option)
    (["--exclusive", "user"], {"exclusive": True}, "user", [], None, True, 1),
    (["--exclusive=user", "job.sh"], {"exclusive": "user"}, "job.sh", [], None, True, 1),
    (["--nice=10", "job.sh"], {"nice": "10"}, "job.sh", [], None, True, 1),
    (["-k", "job.sh"], {"no-kill": True}, "job.sh", [], None, True, 1),
    (["-koff", "job.sh"], {"no-kill": "off"}, "job.sh", [], None, True, 1),
    # aliases getopt treats as one option
    (["--cluster=a", "job.sh"], {"clusters": "a"}, "job.sh", [], None, True, 1),
    (["--tasks-per-node=4", "job.sh"], {"ntasks-per-node": "4"}, "job.sh", [], None, True, 1),
    # heterogeneous job components
    (["-p", "gpu", ":", "-p", "npu", "job.sh"], {"partition": "gpu"}, "job.sh", [], None, True, 2),
    # unknown options (SPANK plugins add some): kept, but the parse is not trusted
    (["--container-image=ubuntu", "job.sh"], {"container-image": "ubuntu"}, "job.sh", [], None, False, 1),
    (["--foo"], {"foo": True}, None, [], None, False, 1),
    (["-Z", "job.sh"], {}, "job.sh", [], None, False, 1),
    (["--hold=yes", "job.sh"], {"hold": True}, "job.sh", [], None, False, 1),
    (["-p"], {}, None, [], None, False, 1),
    (["--partition"], {}, None, [], None, False, 1),
]


@pytest.mark.parametrize("argv, options, script, script_args, wrap, confident, components", ARGV_CASES)
def test_parse_argv(argv, options, script, script_args, wrap, confident, components):
    info = parse_argv(argv)
    assert info.options == options
    assert info.script == script
    assert info.script_args == script_args
    assert info.wrap == wrap
    assert info.confident is confident
    assert info.components == components
    assert bool(info.problems) is (not confident)


@pytest.mark.parametrize(
    "argv, source",
    [(["job.sh"], "file"), ([], "stdin"), (["-p", "gpu"], "stdin"), (["--wrap", "true"], "wrap"), (["-p", "x", "--", "j"], "file")],
)
def test_script_source(argv, source):
    assert parse_argv(argv).script_source == source


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["--help"], "help"),
        (["-h"], "help"),
        (["--usage"], "usage"),
        (["-V"], "version"),
        (["--test-only", "job.sh"], "test-only"),
        (["--test", "job.sh"], "test-only"),
        (["-Q", "job.sh"], "quiet"),
        (["job.sh", "--help"], None),  # an argument of the script, not of sbatch
        (["--parsable", "job.sh"], None),
    ],
)
def test_passthrough_options(argv, reason):
    assert parse_argv(argv).passthrough == reason


def test_every_short_option_maps_to_a_known_long_option():
    for letter, name in directives.SHORT_OPTIONS.items():
        assert name in directives.LONG_OPTIONS, letter


# ---- #SBATCH words ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, words, problem",
    [
        (" -J a1", ["-J", "a1"], None),
        ("--job-name=a2", ["--job-name=a2"], None),
        (" -J a4 # comment", ["-J", "a4"], None),
        (' --comment="a b  c"', ["--comment=a b  c"], None),
        (' -J "b3"x', ["-J", "b3x"], None),
        (' -J b"4 4"', ["-J", "b4 4"], None),
        (" --comment='x y'", ["--comment=x y"], None),
        (" --comment=x\\ y", ["--comment=x", "y"], None),  # backslash before blank is dropped
        (' --comment="a\\"b"', ['--comment=a"b'], None),
        (" --comment=a\\\\b", ["--comment=a\\b"], None),
        (" --comment=a\\'b", ["--comment=a'b"], None),
        (" --comment=a\\#b", ["--comment=a#b"], None),
        (' --comment="a#b"', ["--comment=a#b"], None),
        (" --comment=a\\nb", ["--comment=anb"], None),
        (" -J a15#x", ["-J", "a15"], None),
        (' --comment=""', ["--comment="], None),
        (' --comment="a\'b"c\'d e\'', ["--comment=a'bcd e"], None),
        ("\t-J a10", ["-J", "a10"], None),
        (' -J "b14', ["-J"], 'unmatched "'),
        ("", [], None),
        ("   ", [], None),
    ],
)
def test_split_directive(text, words, problem):
    assert split_directive(text) == (words, problem)


# ---- scripts (golden files) ---------------------------------------------------------------


def _script_summary(text: str) -> dict:
    info = scan_script(text)
    return {
        "shebang": info.shebang,
        "components": info.components,
        "asrpt": info.asrpt,
        "warnings": info.warnings,
        "problems": info.problems,
        "body_start": info.body_start,
        "recurrence_text": recurrence_text(text, info).splitlines(),
    }


SCRIPT_CASES = sorted(p.stem for p in (GOLDEN / "scripts").glob("*.sh"))


def test_there_are_golden_scripts():
    assert len(SCRIPT_CASES) >= 10


@pytest.mark.parametrize("name", SCRIPT_CASES)
def test_script_golden(name):
    text = (GOLDEN / "scripts" / f"{name}.sh").read_text(encoding="utf-8")
    actual = _script_summary(text)
    golden = GOLDEN / f"{name}.json"
    if REGEN:
        golden.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert golden.exists(), f"no golden for {name}; run with ASRPT_REGEN_GOLDEN=1 and review it"
    assert actual == json.loads(golden.read_text(encoding="utf-8"))


# ---- #ASRPT -------------------------------------------------------------------------------

ASRPT_CASES = [
    # (line, fields, number of warnings, text every warning contains)
    ("#ASRPT model=llama-7b", {"model": "llama-7b"}, 0, ""),
    ("#ASRPT model=meta-llama/Llama-2-7b class=llm", {"model": "meta-llama/Llama-2-7b", "workload_class": "llm"}, 0, ""),
    ("#ASRPT parallel=2x2x4", {"parallel_data": 2, "parallel_pipeline": 2, "parallel_tensor": 4}, 0, ""),
    ("#ASRPT dp=2 pp=2 tp=4", {"parallel_data": 2, "parallel_pipeline": 2, "parallel_tensor": 4}, 0, ""),
    ("#ASRPT parallel=2x2x4 tp=8", {"parallel_data": 2, "parallel_pipeline": 2, "parallel_tensor": 8}, 0, ""),
    ("#ASRPT micro_batches=16 iterations=100000", {"micro_batches": 16, "iterations": 100000}, 0, ""),
    ("#ASRPT iterations=1e5", {"iterations": 100000}, 0, ""),
    ("#ASRPT iterations=2.5", {"iterations": 2.5}, 0, ""),
    ("#ASRPT microbatches=4 iters=10", {"micro_batches": 4, "iterations": 10}, 0, ""),
    ('#ASRPT model="gpt-2" # a comment', {"model": "gpt-2"}, 0, ""),
    ("#ASRPT", {}, 0, ""),
    ("#ASRPT parallel=2x2", {}, 1, "#ASRPT parallel=2x2"),
    ("#ASRPT parallel=0x1x1", {}, 1, "#ASRPT parallel=0x1x1"),
    ("#ASRPT dp=two", {}, 1, "#ASRPT dp=two"),
    ("#ASRPT dp=-1", {}, 1, "#ASRPT dp=-1"),
    ("#ASRPT micro_batches=0", {}, 1, "#ASRPT micro_batches=0"),
    ("#ASRPT iterations=-5", {}, 1, "#ASRPT iterations=-5"),
    ("#ASRPT iterations=nan", {}, 1, "#ASRPT iterations=nan"),
    ("#ASRPT iterations=inf", {}, 1, "#ASRPT iterations=inf"),
    ("#ASRPT iterations=1e400", {}, 1, "#ASRPT iterations=1e400"),
    ("#ASRPT model=", {}, 1, "#ASRPT model="),
    ('#ASRPT model="two words"', {}, 1, "#ASRPT model=two words"),
    ("#ASRPT colour=blue", {}, 1, "unknown key 'colour'"),
    ("#ASRPT llama", {}, 1, "#ASRPT llama is not key=value"),
    ("#ASRPT =3", {}, 1, "#ASRPT =3 is not key=value"),
    ("#ASRPT model=ok dp=x tp=2", {"model": "ok", "parallel_tensor": 2}, 1, "#ASRPT dp=x"),
    ('#ASRPT model="unterminated', {}, 1, "unmatched"),
    # serving jobs: the model is recorded as given (known to asrpt or not: the daemon judges)
    ("#ASRPT serve-model=llama-2-7b tp=auto", {"serve_model": "llama-2-7b", "parallel_tensor_auto": True}, 0, ""),
    ("#ASRPT serve_model=meta-llama/Llama-2-7b-hf tp=AUTO", {"serve_model": "meta-llama/Llama-2-7b-hf", "parallel_tensor_auto": True}, 0, ""),
    ("#ASRPT serve-model=no-such-model tp=2", {"serve_model": "no-such-model", "parallel_tensor": 2}, 0, ""),
    ("#ASRPT serve-model=llama-2-7b", {"serve_model": "llama-2-7b"}, 0, ""),
    ("#ASRPT serve-model=x tp=auto tp=4", {"serve_model": "x", "parallel_tensor": 4}, 0, ""),
    ("#ASRPT serve-model=x tp=4 tp=auto", {"serve_model": "x", "parallel_tensor_auto": True}, 0, ""),
    ("#ASRPT serve-model=x tp=auto parallel=1x1x2", {"serve_model": "x", "parallel_data": 1, "parallel_pipeline": 1, "parallel_tensor": 2}, 0, ""),
    ("#ASRPT serve-model=x tp=0", {"serve_model": "x"}, 1, "expected a positive integer up to 1000000, or auto"),
    ("#ASRPT serve-model=x tp=automatic", {"serve_model": "x"}, 1, "#ASRPT tp=automatic"),
    ('#ASRPT serve-model="two words"', {}, 1, "#ASRPT serve-model=two words"),
    ("#ASRPT serve-model=", {}, 1, "#ASRPT serve-model="),
    ("#ASRPT tp=auto", {"parallel_tensor_auto": True}, 1, "tp=auto has an effect only on a serving job"),
]


@pytest.mark.parametrize("line, fields, n_warnings, fragment", ASRPT_CASES)
def test_asrpt_directives(line, fields, n_warnings, fragment):
    info = scan_script(f"#!/bin/bash\n{line}\nsrun train\n")
    assert info.asrpt == fields
    assert len(info.warnings) == n_warnings
    for warning in info.warnings:
        assert warning.startswith("line 2: ")
        assert fragment in warning


def test_tp_on_a_later_line_replaces_an_earlier_one():
    auto_then_four = scan_script("#!/bin/sh\n#ASRPT serve-model=x tp=auto\n#ASRPT tp=4\ntrue\n")
    assert auto_then_four.asrpt == {"serve_model": "x", "parallel_tensor": 4}
    four_then_auto = scan_script("#!/bin/sh\n#ASRPT parallel=2x1x4\n#ASRPT serve-model=x tp=auto\ntrue\n")
    assert four_then_auto.asrpt == {"serve_model": "x", "parallel_data": 2, "parallel_pipeline": 1, "parallel_tensor_auto": True}
    assert four_then_auto.warnings == []


def test_serving_directives_change_the_recurrence_group():
    plain = recurrence_text("#!/bin/sh\nsrun ./serve.sh\n")
    served = recurrence_text("#!/bin/sh\n#ASRPT serve-model=llama-2-7b tp=auto\nsrun ./serve.sh\n")
    other = recurrence_text("#!/bin/sh\n#ASRPT serve-model=llama-2-13b tp=auto\nsrun ./serve.sh\n")
    assert len({plain, served, other}) == 3


def test_asrpt_must_be_followed_by_a_blank():
    assert scan_script("#!/bin/sh\n#ASRPTmodel=x\ntrue\n").asrpt == {}


def test_asrpt_after_the_first_command_is_ignored_with_a_warning():
    info = scan_script("#!/bin/sh\necho start\n#ASRPT model=x\n")
    assert info.asrpt == {}
    assert info.warnings == ["line 3: #ASRPT after the first command is ignored (directives must come before it, as for #SBATCH)"]


# ---- recurrence group ---------------------------------------------------------------------

BASE = "#!/bin/bash\n#SBATCH -J run-17 -o out-%j.txt\n#SBATCH --gres=gpu:4\n#ASRPT model=m class=c\n\nsrun python train.py  \n"


@pytest.mark.parametrize(
    "variant",
    [
        BASE.replace("run-17", "run-18"),  # another run of the same job
        BASE.replace("-o out-%j.txt", "--output=elsewhere.txt"),
        BASE.replace("#SBATCH --gres=gpu:4", "#SBATCH   --gres gpu:4  # four"),
        BASE.replace("\n\n", "\n# a comment\n\n\n"),
        BASE.replace("  \n", "\n"),
        BASE.replace("#ASRPT model=m class=c", "#ASRPT class=c model=m"),
        BASE + "# trailing comment\n",
    ],
)
def test_recurrence_group_ignores_cosmetic_changes(variant):
    assert recurrence_text(variant) == recurrence_text(BASE)


@pytest.mark.parametrize(
    "variant",
    [
        BASE.replace("train.py", "eval.py"),
        BASE.replace("gpu:4", "gpu:8"),
        BASE.replace("model=m", "model=n"),
        BASE.replace("#!/bin/bash", "#!/bin/sh"),
        BASE + "echo done\n",
    ],
)
def test_recurrence_group_changes_with_the_work(variant):
    assert recurrence_text(variant) != recurrence_text(BASE)


def test_wrap_recurrence_collapses_whitespace():
    assert directives.wrap_recurrence_text(" echo   hi ") == directives.wrap_recurrence_text("echo hi")


# ---- fuzzing: the parsers never raise -----------------------------------------------------

_WORDS = st.sampled_from(["-p", "--parsable", "--wrap", "-J", ":", "--", "-", "--pa", "-HvN", "=", "--x=y", "job.sh", ""])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_WORDS, st.text(max_size=12)), max_size=12))
def test_parse_argv_never_raises(argv):
    info = parse_argv(argv)
    assert info.script_source in ("file", "stdin", "wrap")
    assert info.confident or info.problems


_LINES = st.sampled_from(
    ["#!/bin/sh", "#SBATCH -J x", "#SBATCH", "#SBATCH hetjob", "#ASRPT model=m", "#ASRPT parallel=1x2x3", "#ASRPT dp=", "", "  # c", "echo", "#ASRPT"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_LINES, st.text(max_size=40), st.builds(lambda s: "#ASRPT " + s, st.text(max_size=30)), st.builds(lambda s: "#SBATCH " + s, st.text(max_size=30))), max_size=12))
def test_scan_script_never_raises(lines):
    text = "\n".join(lines)
    info = scan_script(text)
    assert not any("internal error" in p for p in info.problems)
    assert set(info.asrpt) <= set(directives.ASRPT_FIELDS)
    recurrence_text(text, info)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_split_directive_never_raises(text):
    words, problem = split_directive(text)
    assert all(isinstance(w, str) for w in words)
