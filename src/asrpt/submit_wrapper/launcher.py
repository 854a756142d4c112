"""Write a lean launcher for asrpt-sbatch, for sites that want the last milliseconds back.

pip's console script (``asrpt-sbatch``) starts the interpreter with ``site`` and runs
``import re`` before it calls the wrapper; on the benchmark machine those two cost more CPU
than everything the wrapper itself does (bench/README.md). The lean launcher runs the same
``main()`` under ``python -IS``: isolated mode (``PYTHON*`` variables and the user's site
directory are ignored, so a user's ``PYTHONPATH`` cannot change the wrapper either) and no
``site``, with the directory holding the ``asrpt`` package put on ``sys.path`` explicitly.

    python -m asrpt.submit_wrapper.launcher /usr/local/bin/sbatch

writes the launcher (mode 0755) using this interpreter and this installation of asrpt.
Regenerate it after moving the virtual environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TEMPLATE = """#!{python} -IS
# asrpt-sbatch, lean launcher written by `python -m asrpt.submit_wrapper.launcher`.
import sys
sys.path.insert(0, {path!r})
from asrpt.submit_wrapper.main import main
sys.exit(main())
"""


def launcher_text(python: str | None = None, package_dir: str | None = None) -> str:
    """The launcher script for ``python`` and the directory that contains ``asrpt``."""
    import asrpt

    python = python or sys.executable
    package_dir = package_dir or str(Path(asrpt.__file__).resolve().parents[1])
    if not os.path.isabs(python) or " " in python:
        raise ValueError(f"the interpreter must be an absolute path without spaces: {python!r}")
    return TEMPLATE.format(python=python, path=package_dir)


def write_launcher(destination: str | os.PathLike[str], python: str | None = None) -> Path:
    """Write the launcher to ``destination`` atomically, mode 0755."""
    target = Path(destination)
    temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    temp.write_text(launcher_text(python))
    temp.chmod(0o755)
    temp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m asrpt.submit_wrapper.launcher DESTINATION", file=sys.stderr)
        return 2
    path = write_launcher(args[0])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
