"""The ``asrpt:`` hints of a job's ``--comment`` (``asrpt:dp=2,tp=4,class=bert``), one rule
for both sides: the wrapper warns at submission about every hint this parser would drop, and
the daemon uses exactly what it keeps. Two parsers once disagreed (``dp=²`` passed one and
raised in the other's ``int()``).

Pure and light, because the wrapper imports it on every submission: standard library only,
no regular expressions, no dataclasses. Nothing here raises on any text.
"""

from __future__ import annotations

from asrpt.escaping import excerpt

#: Marks a hint word in the free-text comment.
PREFIX = "asrpt:"
#: Hint key -> the ``ParallelConfig`` field it sets.
PARALLEL_HINTS = {"dp": "data", "pp": "pipeline", "tp": "tensor", "mb": "micro_batches"}
HINT_KEYS = (*sorted(PARALLEL_HINTS), "class")
#: Largest parallel degree and micro-batch count taken literally (here and in ``#ASRPT``).
MAX_DEGREE = 1_000_000
MAX_MICRO_BATCHES = 10_000_000
#: Longest model or workload-class name (the history's ``String(128)`` columns).
MAX_NAME_CHARS = 128
_NAME_PUNCTUATION = frozenset("_.:/+@-")


def is_name(value: str, limit_chars: int = MAX_NAME_CHARS) -> bool:
    """Letters and digits (any script), then also ``_.:/+@-``; at most ``limit_chars`` long."""
    return (
        0 < len(value) <= limit_chars
        and value[0].isalnum()
        and all(ch.isalnum() or ch in _NAME_PUNCTUATION for ch in value)
    )


def positive_int(value: str, limit: int) -> int | None:
    """``value`` as an integer in 1..limit, written in ASCII digits only, else None."""
    if not (value.isascii() and value.isdigit()):
        return None
    number = int(value)
    return number if 1 <= number <= limit else None


class CommentHints:
    """What the comment's hints say (the last of a repeated key wins), and what was dropped."""

    __slots__ = ("parallel", "workload_class", "problems")

    def __init__(self) -> None:
        #: ``ParallelConfig`` field -> degree, for the hints that are usable.
        self.parallel: dict[str, int] = {}
        #: The hinted workload class as written (known to the speed table or not), or None.
        self.workload_class: str | None = None
        #: One line per dropped hint, naming it and what would be valid.
        self.problems: list[str] = []


def parse_comment_hints(comment: str | None) -> CommentHints:
    """The hints of every ``asrpt:`` word of ``comment``; bad ones go to ``problems``."""
    hints = CommentHints()
    for word in (comment or "").split():
        if not word.startswith(PREFIX):
            continue
        for item in word[len(PREFIX) :].split(","):
            if not item:
                continue
            key, _, value = item.partition("=")
            key = key.strip().lower()
            shown = f"--comment {PREFIX}{excerpt(item, 60)[1:-1]}"
            if key in PARALLEL_HINTS:
                limit = MAX_MICRO_BATCHES if key == "mb" else MAX_DEGREE
                number = positive_int(value, limit)
                if number is None:
                    hints.problems.append(f"{shown}: expected a positive integer up to {limit}; asrpt ignores it")
                else:
                    hints.parallel[PARALLEL_HINTS[key]] = number
            elif key == "class":
                if is_name(value):
                    hints.workload_class = value
                else:
                    hints.problems.append(
                        f"{shown}: expected a name of letters, digits and _.:/+@- (at most {MAX_NAME_CHARS} "
                        "characters); asrpt ignores it"
                    )
            else:
                hints.problems.append(f"{shown}: unknown hint (known: {', '.join(HINT_KEYS)}); asrpt ignores it")
    return hints
