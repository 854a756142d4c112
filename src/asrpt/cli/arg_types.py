"""argparse ``type=`` checks shared by the sub-commands.

A bad value is a usage error at parse time (exit 2, one line naming the option), not a
traceback, and never after a long run: an output file whose directory is missing fails
before the replay it would have saved. Standard library only (``asrpt --help`` stays fast).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable


def output_file(text: str) -> Path:
    """A file we will write: its directory must exist and be writable; it must not be a directory."""
    path = Path(text)
    directory = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    if not directory.is_dir():
        why = "is not a directory" if directory.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"cannot write {text}: directory {directory} {why}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: directory {directory} is not writable")
    return path


def float_at_least(lowest: float) -> Callable[[str], float]:
    """A float >= ``lowest`` (inf allowed)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value >= lowest:
            raise argparse.ArgumentTypeError(f"must be >= {lowest:g}, got {text}")
        return value

    return parse


def int_at_least(lowest: int) -> Callable[[str], int]:
    """An integer >= ``lowest``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be >= {lowest}, got {text}")
        return value

    return parse
