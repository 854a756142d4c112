"""docs/configuration.md, generated from the configuration dataclasses themselves.

Every key, its default and its ``#:`` comment come from the classes asrptd validates the file
against (``asrpt.daemon.config``, ``SlurmBackendConfig``) and the keys the sbatch wrapper and
the user commands read, so the page cannot leave a key out; a test compares the committed
page with this output. Regenerate: ``python -m asrpt.cli.config_reference > docs/configuration.md``.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, Field, fields
from typing import Any, Iterator

INTRO = """# Configuration file

asrptd, asrpt-sbatch and `asrpt queue|eta|explain` read one TOML file: `$ASRPT_CONFIG`, else
`/etc/asrpt/asrpt.toml`. Every key is optional. asrptd validates the whole file at start: an
unknown key or a bad value is an error that names it and lists the valid ones. Any key can be
overridden from the environment as `ASRPT_<SECTION>_<KEY>` (`ASRPT_DAEMON_INTERVAL_S=10`,
`ASRPT_DATABASE_URL=postgresql+psycopg://...`).

The sbatch wrapper reads only `[wrapper] real_sbatch` and `[spool] dir`; the user commands
only `[database] url`, `[database] read_url`, `[daemon] socket_path`, `[slurm] slurm_conf` and
`[slurm] bin_dir`. This page is generated from the code
(`python -m asrpt.cli.config_reference > docs/configuration.md`); a test keeps it current.
"""


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines right above each field of dataclass ``cls``, joined."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            comments[match.group(1)] = " ".join(pending)
        pending = []
    return comments


def _default(item: Field[Any]) -> str:
    if item.default is not MISSING:
        value = item.default
    elif item.default_factory is not MISSING:
        value = item.default_factory()
    else:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def sections() -> Iterator[tuple[str, type, set[str]]]:
    """(TOML section, dataclass, keys to leave out) in the page's order."""
    from asrpt.daemon import config
    from asrpt.slurm.cli_backend import SlurmBackendConfig

    for name, cls in config._SECTIONS.items():
        yield name, cls, set()
    yield "slurm", SlurmBackendConfig, {"partitions"}
    yield "[slurm.partitions]", config.PartitionSection, set()


def documented_keys() -> set[tuple[str, str]]:
    return {(name.strip("[]"), item.name) for name, cls, skip in sections() for item in fields(cls) if item.name not in skip}


def render() -> str:
    from asrpt.daemon.config import _CHOICES

    out = [INTRO]
    for name, cls, skip in sections():
        comments = field_comments(cls)
        section = name.strip("[]")
        out.append(f"\n## [{name}]\n" if not name.startswith("[") else f"\n## {name} (one table per partition)\n")
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__):
            out.append(" ".join(doc.split("\n\n")[0].split()) + "\n")
        out.append("| key | default | meaning |\n|---|---|---|")
        for item in fields(cls):
            if item.name in skip:
                continue
            meaning = comments.get(item.name, "")
            choices = _CHOICES.get((section, item.name))
            if choices:
                meaning = (meaning + " " if meaning else "") + "One of " + ", ".join(f"`{c}`" for c in choices) + "."
            if section == "slurm" and item.name == "partitions":
                continue
            out.append(f"| `{item.name}` | `{_default(item)}` | {meaning.replace('|', '/')} |")
        if section == "slurm":
            out.append("\nAccelerator partitions are `[[slurm.partitions]]` tables, below.")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
