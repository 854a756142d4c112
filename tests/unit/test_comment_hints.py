"""One rule for ``--comment asrpt:`` hints: what the wrapper accepts at submission is what the
daemon uses, and what the daemon would ignore the wrapper warns about. Neither raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from asrpt.slurm.cli_backend import parse_hints
from asrpt.submit_wrapper.directives import comment_problems

PARALLEL = {"dp": "data", "pp": "pipeline", "tp": "tensor", "mb": "micro_batches"}


def test_a_superscript_digit_is_warned_about_and_ignored_not_a_crash():
    assert comment_problems("asrpt:dp=²")  # the wrapper warns at submission
    assert parse_hints("asrpt:dp=²").parallel == {}  # the daemon ignores it (int('²') raised)
    assert parse_hints("asrpt:dp=٣,tp=2").parallel == {"tensor": 2}  # Arabic-Indic three


def test_degrees_beyond_the_limits_are_warned_about_and_ignored():
    huge = "asrpt:mb=" + "9" * 30
    assert comment_problems(huge) and parse_hints(huge).parallel == {}


def test_an_unknown_hint_key_is_warned_about():
    assert any("unknown hint" in p and "dp" in p for p in comment_problems("asrpt:dpp=2"))
    assert parse_hints("asrpt:dpp=2").parallel == {}


NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=10**8).map(str),
    st.text(alphabet="0123456789²³¹٣۴߂०१௧൧๓໒༣၃႒០᠑१𝟘𝟙 +-.e_x", max_size=8),
)


@given(key=st.sampled_from(sorted(PARALLEL)), value=NUMBERS, case=st.booleans())
def test_a_degree_hint_is_used_exactly_when_the_wrapper_accepts_it(key, value, case):
    comment = f"job asrpt:{key.upper() if case else key}={value} more"
    used = PARALLEL[key] in parse_hints(comment).parallel
    assert used == (not comment_problems(comment)), comment


@given(value=st.text(max_size=20).filter(lambda v: "," not in v and not any(c.isspace() for c in v)))
def test_a_class_the_daemon_ignores_is_warned_about(value):
    comment = f"asrpt:class={value}"
    hinted = parse_hints(comment).workload_class
    problems = comment_problems(comment)
    if hinted is None and value:
        assert problems, comment
    if not problems:
        assert hinted == value


@given(comment=st.text(alphabet=st.characters(), max_size=80).map(lambda t: "asrpt:" + t))
def test_neither_side_raises_on_any_comment(comment):
    parse_hints(comment)
    comment_problems(comment)
