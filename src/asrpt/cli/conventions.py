"""One spelling per meaning across ``asrpt``'s commands, and the old spellings kept working.

* ``--json`` prints JSON to stdout (a flag) everywhere; ``--json-out PATH`` writes it to a file.
* ``--trace-format`` names a trace format (``-o/--format`` stays squeue's output format).
* ``--seeds A[,B,...]`` takes one seed or a comma-separated sweep.

An old spelling (``--json PATH``, ``--format`` for a trace, a repeated ``--seed``) still works
and prints one warning on stderr that names the new spelling. A plain stderr line, not
``warnings.warn``: users see it whatever their warning filters, and it never becomes an error.
Standard library only (``asrpt --help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from asrpt.cli.arg_types import output_file


def warn_deprecated(old: str, new: str) -> None:
    print(f"asrpt: warning: {old} is deprecated; use {new}", file=sys.stderr)


def seed_list(text: str) -> list[int]:
    """``--seeds``: one integer or a comma-separated list of them."""
    seeds = []
    for part in text.split(","):
        try:
            seeds.append(int(part.strip()))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not an integer (give e.g. 0 or 0,1,2)") from None
    return seeds


class _DeprecatedAlias(argparse.Action):
    """An old option string: converts its value, stores it where the new option would, warns."""

    def __init__(self, option_strings: list[str], dest: str, *, new_option: str, convert: Callable[[str], Any] = str,
                 append: bool = False, **kwargs: Any) -> None:
        self.new_option = new_option
        self.convert = convert
        self.append = append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        warn_deprecated(f"{option_string} {self.metavar or 'VALUE'}", self.new_option)
        try:
            value = self.convert(values)
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument {option_string}: {error}")
        if self.append:
            current = getattr(namespace, self.dest, None) or []
            value = [*current, *(value if isinstance(value, list) else [value])]
        setattr(namespace, self.dest, value)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, *, dest: str, new_option: str,
                         convert: Callable[[str], Any] = str, append: bool = False, metavar: str = "VALUE") -> None:
    parser.add_argument(old, dest=dest, action=_DeprecatedAlias, new_option=new_option, convert=convert,
                        append=append, metavar=metavar, default=argparse.SUPPRESS,
                        help=f"deprecated spelling of {new_option}")


class _JsonFlag(argparse.Action):
    """``--json``: a flag (JSON to stdout); ``--json PATH`` is the old spelling of ``--json-out PATH``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is None:
            setattr(namespace, "json", True)
            return
        warn_deprecated("--json PATH", "--json-out PATH")
        try:
            setattr(namespace, "json_out", output_file(values))
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument --json: {error}")


def add_json_options(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--json`` (stdout) and ``--json-out PATH`` (a file) for a command that writes ``what`` as JSON."""
    parser.add_argument("--json", nargs="?", action=_JsonFlag, default=False, metavar="PATH",
                        help=f"print {what} as JSON on stdout instead of the table (--json PATH: deprecated, "
                        "use --json-out)")
    parser.add_argument("--json-out", type=output_file, default=None, metavar="PATH",
                        help=f"also write {what} as JSON to PATH")


def add_trace_format(parser: argparse.ArgumentParser, choices: tuple[str, ...] | list[str], *,
                     default: str | None) -> None:
    """``--trace-format`` (dest ``fmt``) and the old ``--format``; ``default=None`` makes it required."""
    parser.add_argument("--trace-format", dest="fmt", choices=choices, default=default,
                        help="trace format" + ("" if default else " (required)"))
    add_deprecated_alias(parser, "--format", dest="fmt", new_option="--trace-format", convert=_choice(choices),
                         metavar="FORMAT")


def require(args: argparse.Namespace, dest: str, option: str) -> Any:
    """The value of a required option that an old spelling may also give (argparse cannot check it)."""
    from asrpt.exceptions import AsrptError

    value = getattr(args, dest, None)
    if value is None:
        raise AsrptError(f"the option {option} is required")
    return value


def _choice(choices: tuple[str, ...] | list[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(choices)})")
        return text

    return parse


def emit_json(args: argparse.Namespace, document: Any) -> None:
    """Write ``document`` where ``--json-out`` says and print it on stdout with ``--json``."""
    import json

    from asrpt.exceptions import AsrptError

    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if args.json_out is not None:
        try:
            args.json_out.write_text(text, encoding="utf-8")
        except OSError as error:
            raise AsrptError(f"cannot write {args.json_out}: {error.strerror or error}") from error
    if args.json:
        sys.stdout.write(text)


def table_stream(args: argparse.Namespace) -> Any:
    """Where the human-readable table goes: stderr when ``--json`` keeps stdout for the JSON."""
    return sys.stderr if args.json else sys.stdout
