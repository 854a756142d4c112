"""``asrpt completion bash|zsh`` and ``asrpt man``: generated from the argparse parsers.

Generated, not written by hand, so they cannot drift from the options: shtab writes the
completion scripts and argparse-manpage the roff pages. Both libraries are imported only when
these commands run (``asrpt --help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SHELLS = ("bash", "zsh")
MAN_PAGES = ("asrpt", "asrptd")


def add_shell_parsers(subparsers: argparse._SubParsersAction) -> None:
    completion = subparsers.add_parser(
        "completion", help="print a shell completion script for asrpt and asrptd",
        description="Print a completion script for asrpt and asrptd; source it or install it in the shell's "
        "completion directory.")
    completion.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    completion.set_defaults(func=run_completion)

    man = subparsers.add_parser("man", help="write the man pages of asrpt and asrptd",
                                description="Write asrpt.1 and asrptd.1 (roff), generated from the options.")
    man.add_argument("--directory", type=Path, default=None, metavar="DIR",
                     help="write DIR/asrpt.1 and DIR/asrptd.1 (default: print the asrpt page on stdout)")
    man.set_defaults(func=run_man)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from asrpt.cli.main import build_parser
    from asrpt.daemon.main import build_parser as build_daemon_parser

    return {"asrpt": build_parser(), "asrptd": build_daemon_parser()}


def completion_script(shell: str) -> str:
    import shtab

    return "\n".join(shtab.complete(parser, shell=shell) for parser in _parsers().values())


def man_page(name: str, parser: argparse.ArgumentParser) -> str:
    from argparse_manpage.manpage import Manpage

    from asrpt import __version__

    return str(Manpage(parser, _data={"project_name": "asrpt", "version": __version__, "manual_section": 1,
                                      "manual_title": "asrpt manual"}))


def run_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(args.shell))
    return 0


def run_man(args: argparse.Namespace) -> int:
    from asrpt.exceptions import AsrptError

    pages = {name: man_page(name, parser) for name, parser in _parsers().items()}
    if args.directory is None:
        sys.stdout.write(pages["asrpt"])
        return 0
    if not args.directory.is_dir():
        raise AsrptError(f"--directory {args.directory}: not a directory")
    for name, text in pages.items():
        (args.directory / f"{name}.1").write_text(text, encoding="utf-8")
        print(f"asrpt: wrote {args.directory / f'{name}.1'}", file=sys.stderr)
    return 0
