"""Help that every ``asrpt`` and ``asrptd`` parser shares: defaults shown, examples at the end.

``finish_parsers`` walks a built parser tree once, so the commands' own modules keep only
their options; the examples live in :mod:`asrpt.cli.help_examples`, keyed by ``prog``.
Standard library only (``asrpt --help`` stays fast).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Iterator

from asrpt.cli.help_examples import EXAMPLES


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already names its default.

    Flags (default False) and options without a default (None) get nothing: there is no
    value to show. The epilog keeps its line breaks (examples are command lines).
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if shows_default(action) and "default" not in text.lower():
            text += " (default: %(default)s)"
        return text


def shows_default(action: argparse.Action) -> bool:
    """Whether ``action`` has a default worth printing."""
    default = action.default
    if default is None or default is False or default is argparse.SUPPRESS or default == []:
        return False
    return bool(action.option_strings) and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))


def walk_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command parser under it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from walk_parsers(sub)


def finish_parsers(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give every parser under ``parser`` the shared formatter and its examples epilog."""
    for each in walk_parsers(parser):
        each.formatter_class = DefaultsHelpFormatter
        examples = EXAMPLES.get(each.prog)
        if examples and "examples:" not in (each.epilog or ""):
            block = "examples:\n" + "\n".join(f"  {line}" for line in examples)
            prose = "\n\n".join(textwrap.fill(part, width=78) for part in (each.epilog or "").split("\n\n") if part)
            each.epilog = f"{prose}\n\n{block}" if prose else block
    return parser
