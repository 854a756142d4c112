"""Every option of ``asrpt`` and ``asrptd`` has help that shows its default, and every
command's help ends with examples."""

import argparse

import pytest

from asrpt.cli.help_format import shows_default, walk_parsers
from asrpt.cli.main import build_parser
from asrpt.daemon.main import build_parser as build_daemon_parser

PARSERS = [p for root in (build_parser(), build_daemon_parser()) for p in walk_parsers(root)]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.prog)
def test_every_option_has_help_that_shows_its_default(parser):
    actions = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]
    assert [a.dest for a in actions if not a.help] == []
    text = parser.format_help()
    for action in actions:
        if shows_default(action):
            formatted = parser.formatter_class(parser.prog)._get_help_string(action)
            assert "default" in formatted.lower(), f"{parser.prog} {action.option_strings}: no default shown"
    assert "usage:" in text


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.prog)
def test_every_command_help_ends_with_examples(parser):
    text = parser.format_help().rstrip()
    assert "examples:" in text, f"{parser.prog}: no examples"
    examples = [line.strip() for line in text.rsplit("examples:", 1)[1].splitlines() if line.strip()]
    assert examples and all(line.startswith((parser.prog.split()[0], "--")) for line in examples), examples


def test_a_default_is_shown_in_the_help_text():
    simulate = next(p for p in PARSERS if p.prog == "asrpt simulate")
    assert "(default: backfill)" in " ".join(simulate.format_help().split())
