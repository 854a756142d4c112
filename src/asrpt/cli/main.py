"""``asrpt``: the command researchers and admins type.

Sub-commands register themselves from small modules; each handler takes the parsed
arguments and returns an exit code. Errors of ours (bad trace, bad config) print one line
and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from asrpt.exceptions import AsrptError


def build_parser() -> argparse.ArgumentParser:
    from asrpt.cli import simulate

    parser = argparse.ArgumentParser(prog="asrpt", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    simulate.add_parsers(commands)
    for module_name, adder in (
        ("asrpt.cli.db_commands", "add_db_parser"),
        ("asrpt.cli.predict_commands", "add_predict_parser"),
        ("asrpt.cli.serving_commands", "add_serving_parser"),
        ("asrpt.cli.bench_commands", "add_bench_parser"),
        ("asrpt.cli.queue_commands", "add_queue_parsers"),
        ("asrpt.cli.shell_integration", "add_shell_parsers"),
    ):
        module = importlib.import_module(module_name)
        getattr(module, adder)(commands)
    from asrpt.cli.help_format import finish_parsers

    return finish_parsers(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="asrpt: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except AsrptError as error:
        print(f"asrpt: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
