"""What the ``asrpt`` commands take from the daemon's configuration file, read once per command.

The file is ``$ASRPT_CONFIG``, else /etc/asrpt/asrpt.toml. Only the keys below are looked at
and nothing is validated (asrptd validates the whole file at start, naming unknown keys), so
an unrelated mistake in the file cannot break a user's command; a file that cannot be read
counts as absent, with the reason kept for messages. ``ASRPT_<SECTION>_<KEY>`` overrides a key
as it does for the daemon. Standard library only: this is on the CLI's start-up path.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass

from asrpt.paths import DEFAULT_CONFIG_PATH, DEFAULT_DATABASE_URL, DEFAULT_SOCKET_PATH

CONFIG_ENV = "ASRPT_CONFIG"
DATABASE_URL_ENV = "ASRPT_DATABASE_URL"

#: (section, key) -> the attribute of :class:`SiteConfig` it fills.
_KEYS = {
    ("database", "url"): "database_url",
    ("database", "read_url"): "read_url",
    ("daemon", "socket_path"): "socket_path",
    ("slurm", "slurm_conf"): "slurm_conf",
    ("slurm", "bin_dir"): "bin_dir",
}


@dataclass(frozen=True, slots=True)
class SiteConfig:
    #: The file read (or that would have been).
    path: str
    #: ``[database] url``: the daemon's (writing) database.
    database_url: str | None = None
    #: ``[database] read_url``: what user-facing reads use instead (a read-only role).
    read_url: str | None = None
    #: ``[daemon] socket_path``: asrptd's Unix socket; "" = the daemon serves none.
    socket_path: str = DEFAULT_SOCKET_PATH
    slurm_conf: str | None = None
    bin_dir: str | None = None
    #: Why the file could not be read (None: read, or there is none).
    problem: str | None = None


def read_site_config(environ: Mapping[str, str] | None = None) -> SiteConfig:
    """The keys the CLI uses, from the configuration file and ``ASRPT_<SECTION>_<KEY>``."""
    env = os.environ if environ is None else environ
    path = env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH
    document: dict[str, object] = {}
    problem = None
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        pass
    except OSError as error:
        problem = f"cannot read {path}: {error.strerror}"
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        problem = f"cannot read {path}: {error}"
    values: dict[str, str] = {}
    for (section, key), attribute in _KEYS.items():
        table = document.get(section)
        value = env.get(f"ASRPT_{section.upper()}_{key.upper()}", table.get(key) if isinstance(table, dict) else None)
        if isinstance(value, str):
            values[attribute] = value
    socket_path = values.pop("socket_path", DEFAULT_SOCKET_PATH)  # "" stays "": no socket
    return SiteConfig(path=path, problem=problem, socket_path=socket_path, **{k: v or None for k, v in values.items()})


def resolve_database_url(cli_url: str | None, environ: Mapping[str, str] | None = None, *, site: SiteConfig | None = None,
                         for_reading: bool = False) -> str:
    """``--url``, else ``$ASRPT_DATABASE_URL``, else (``for_reading``: ``[database] read_url``,
    then) ``[database] url`` of the configuration, else the default."""
    if cli_url:
        return cli_url
    env = os.environ if environ is None else environ
    if env.get(DATABASE_URL_ENV):
        return env[DATABASE_URL_ENV]
    site = site or read_site_config(env)
    if for_reading and site.read_url:
        return site.read_url
    return site.database_url or DEFAULT_DATABASE_URL
