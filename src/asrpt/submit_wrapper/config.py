"""The wrapper's configuration: which sbatch is the real one, and where records go.

Sources, highest first:

* ``ASRPT_REAL_SBATCH`` (or ``ASRPT_WRAPPER_REAL_SBATCH``, the daemon's
  ``ASRPT_<SECTION>_<KEY>`` spelling) and ``ASRPT_SPOOL_DIR`` (empty: record nothing);
* the shared configuration file, ``$ASRPT_CONFIG`` or ``/etc/asrpt/asrpt.toml``: key
  ``real_sbatch`` of ``[wrapper]`` and key ``dir`` of ``[spool]`` (the same key the daemon
  reads its spool from, so the two cannot disagree). The file must be readable by every user;
  keep secrets such as the database password out of it (the daemon takes
  ``ASRPT_DATABASE_URL`` from its environment);
* defaults: ``/usr/bin/sbatch`` and ``/var/spool/asrpt``.

The real sbatch is only ever an absolute path, never a ``PATH`` lookup: with the wrapper
installed first on ``PATH`` as ``sbatch``, a lookup would find the wrapper itself. A configured
path that is relative, missing, not executable or *is the wrapper* (the same file, or a script
that mentions asrpt, such as a copy of the console-script launcher) is refused with a warning
and the next source is tried, down to the default.

Unlike the daemon, the wrapper never stops on a configuration problem (it fails open): each
problem becomes part of the single warning line, and the submission goes ahead with what could
be salvaged. A plain file is read by a small subset reader (:func:`quick_parse`); ``tomllib``
is imported only for a file that needs it.
"""

from __future__ import annotations

import os
import stat

DEFAULT_CONFIG_PATH = "/etc/asrpt/asrpt.toml"
DEFAULT_REAL_SBATCH = "/usr/bin/sbatch"
DEFAULT_SPOOL_DIR = "/var/spool/asrpt"
#: Script text kept in a record; the hash always covers the whole script.
DEFAULT_SCRIPT_TEXT_LIMIT_BYTES = 64 * 1024
#: Keys of ``[wrapper]``; the daemon's loader validates the same section.
WRAPPER_KEYS = ("real_sbatch",)


class WrapperConfig:
    """Validated once per run, then passed down; immutable."""

    __slots__ = ("real_sbatch", "spool_dir", "script_text_limit_bytes", "config_path")

    real_sbatch: str | None
    spool_dir: str
    script_text_limit_bytes: int
    config_path: str | None

    def __init__(
        self,
        *,
        real_sbatch: str | None,
        spool_dir: str,
        script_text_limit_bytes: int = DEFAULT_SCRIPT_TEXT_LIMIT_BYTES,
        config_path: str | None = None,
    ) -> None:
        #: Absolute path of the real sbatch; None when no usable one was found.
        object.__setattr__(self, "real_sbatch", real_sbatch)
        #: Spool directory; empty string disables recording.
        object.__setattr__(self, "spool_dir", spool_dir)
        object.__setattr__(self, "script_text_limit_bytes", script_text_limit_bytes)
        #: The configuration file that was read, if any.
        object.__setattr__(self, "config_path", config_path)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("WrapperConfig is immutable")

    def __repr__(self) -> str:
        return (
            f"WrapperConfig(real_sbatch={self.real_sbatch!r}, spool_dir={self.spool_dir!r}, "
            f"script_text_limit_bytes={self.script_text_limit_bytes}, config_path={self.config_path!r})"
        )


def _read_file(path: str, explicit: bool, problems: list[str]) -> dict[str, object]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(1024 * 1024)
    except FileNotFoundError:
        if explicit:
            problems.append(f"configuration file {path} does not exist")
        return {}
    except OSError as exc:
        problems.append(f"cannot read configuration file {path}: {exc.strerror or exc}")
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(f"cannot parse configuration file {path}: {exc}")
        return {}
    quick = quick_parse(text)
    if quick is not None:
        return quick
    import tomllib  # only for files quick_parse does not vouch for: start-up time

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"cannot parse configuration file {path}: {exc}")
        return {}


# ---- a fast reader for plain TOML files ----------------------------------------------------
#
# ``import tomllib`` costs more than everything else the wrapper does (it pulls in typing,
# datetime and a dozen compiled regular expressions), and every submission would pay it.
# Configuration files are usually plain: table headers and one-line ``key = value`` pairs.
# quick_parse() reads exactly that subset and returns None for anything else (multi-line
# values, escapes, inline tables, dotted or quoted keys, redefinitions), which then goes to
# tomllib. For a file it accepts, the tables "wrapper" and "spool" come out as tomllib would
# give them, except that values other than strings are replaced by NOT_A_STRING (the wrapper
# only reads strings). It does not check the rest of the file as tomllib would (a key that
# redefines a table elsewhere, say): the wrapper then uses its two tables from a file the
# daemon refuses at start-up, which is the fail-open choice. A test compares the two readers
# on generated files.

#: Stands for any value that is not a string.
NOT_A_STRING = object()
_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SCALAR_CHARS = _BARE_KEY_CHARS | frozenset("+.:")
_SCALAR_WORDS = frozenset({"true", "false", "inf", "+inf", "-inf", "nan", "+nan", "-nan"})
_READ_TABLES = ("wrapper", "spool")
# (String methods, not regular expressions: compiling patterns would cost what tomllib costs.)


def _is_bare_key(text: str) -> bool:
    return bool(text) and all(ch in _BARE_KEY_CHARS for ch in text)


def _is_plain_text(text: str) -> bool:
    """No control character other than tab (TOML forbids them in strings and comments)."""
    return all(ch >= " " or ch == "\t" for ch in text) and "\x7f" not in text


def _rest_is_blank(text: str) -> bool:
    rest = text.lstrip(" \t")
    return not rest or (rest[0] == "#" and _is_plain_text(rest))


def _quick_string(text: str, pos: int) -> tuple[str, int] | None:
    quote = text[pos]
    if text.startswith(quote * 3, pos):
        return None  # multi-line string
    end = text.find(quote, pos + 1)
    if end < 0:
        return None
    value = text[pos + 1 : end]
    if (quote == '"' and "\\" in value) or not _is_plain_text(value):
        return None  # escapes: tomllib
    return value, end + 1


def _quick_scalar(text: str, pos: int) -> tuple[object, int] | None:
    """A number, boolean, date or time (TOML's bare values; a date with a space is not)."""
    end = pos
    while end < len(text) and text[end] in _SCALAR_CHARS:
        end += 1
    word = text[pos:end]
    if word and (word in _SCALAR_WORDS or word[0] in "0123456789+-"):
        return NOT_A_STRING, end
    return None


def _digits(text: str) -> bool:
    return bool(text) and text.isascii() and text[0].isdigit() and text[-1].isdigit() and "__" not in text and text.replace("_", "").isdigit()


def _is_toml_decimal(word: str) -> bool:
    """A TOML decimal integer or float (``5``, ``-3``, ``1_000``, ``2.5``, ``1e3``)."""
    body = word[1:] if word[:1] in "+-" else word
    mantissa, has_exponent, exponent = body.lower().partition("e")
    whole, dot, fraction = mantissa.partition(".")
    if not _digits(whole) or (len(whole) > 1 and whole[0] == "0") or (dot and not _digits(fraction)):
        return False
    return not has_exponent or _digits(exponent[1:] if exponent[:1] in "+-" else exponent)


def _quick_value(text: str, pos: int) -> tuple[object, int] | None:
    """One value starting at ``pos``: (value, end) or None if not in the subset."""
    if pos >= len(text):
        return None
    if text[pos] in "\"'":
        return _quick_string(text, pos)
    if text[pos] != "[":
        return _quick_scalar(text, pos)
    pos += 1  # a one-line array of strings and bare values
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if text.startswith("]", pos):
            return NOT_A_STRING, pos + 1
        if pos >= len(text):
            return None
        item = _quick_string(text, pos) if text[pos] in "\"'" else _quick_scalar(text, pos)
        if item is None:
            return None
        pos = item[1]
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            return None


def _quick_header(line: str) -> tuple[str, bool] | None:
    array = line.startswith("[[")
    close = "]]" if array else "]"
    start = 2 if array else 1
    end = line.find(close, start)
    if end < 0 or not _rest_is_blank(line[end + len(close) :]):
        return None
    parts = [part.strip(" \t") for part in line[start:end].split(".")]
    if not all(_is_bare_key(part) for part in parts):
        return None
    return ".".join(parts), array


def quick_parse(text: str) -> dict[str, object] | None:
    """The tables the wrapper reads from a plain TOML file, or None (use tomllib)."""
    tables: dict[str, dict[str, object]] = {}
    seen_headers: set[str] = set()
    current: str | None = ""
    keys_in_current: set[str] = set()
    for line in text.split("\n"):
        line = line.removesuffix("\r").strip(" \t")
        if not line or line.startswith("#"):
            if line and not _is_plain_text(line):
                return None
            continue
        if line.startswith("["):
            header = _quick_header(line)
            if header is None:
                return None
            name, array = header
            top = name.split(".")[0]
            if top in _READ_TABLES and (array or name != top):
                return None  # [[wrapper]] or [wrapper.x]: let tomllib judge
            if not array:
                if name in seen_headers:
                    return None
                seen_headers.add(name)
            current = name if not array else None  # keys of [[...]] entries are not read
            keys_in_current = set()
            continue
        equals = line.find("=")
        key = line[:equals].rstrip(" \t") if equals > 0 else ""
        if not _is_bare_key(key):
            return None
        pos = equals + 1
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        parsed = _quick_value(line, pos)
        if parsed is None or not _rest_is_blank(line[parsed[1] :]):
            return None
        if key in keys_in_current:
            return None
        keys_in_current.add(key)
        if current == "" and key in _READ_TABLES:
            return None  # wrapper = ... at the top level
        if current in _READ_TABLES:
            # In our tables be exact: strings, booleans and plain decimals only.
            word = line[pos : parsed[1]]
            if parsed[0] is NOT_A_STRING and word not in ("true", "false") and not _is_toml_decimal(word):
                return None
            tables.setdefault(current, {})[key] = parsed[0]
    for name in _READ_TABLES:
        if name in seen_headers:
            tables.setdefault(name, {})
    return tables


def _section(document: dict[str, object], name: str, path: str, problems: list[str]) -> dict[str, object]:
    section = document.get(name, {})
    if not isinstance(section, dict):
        problems.append(f"{path}: [{name}] must be a table")
        return {}
    return section


def is_wrapper(path: str, self_paths: list[str]) -> bool:
    """True if ``path`` is this wrapper: the same file as one of ``self_paths`` (hard or
    symbolic links included), or a script that mentions asrpt (a copy of the launcher)."""
    try:
        target = os.stat(path)
    except OSError:
        return False
    for own in self_paths:
        try:
            mine = os.stat(own)
        except OSError:
            continue
        if (mine.st_dev, mine.st_ino) == (target.st_dev, target.st_ino):
            return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and b"asrpt" in head


def check_real_sbatch(path: str, self_paths: list[str]) -> str | None:
    """Why ``path`` cannot be the real sbatch, or None if it can."""
    if not os.path.isabs(path):
        return f"real sbatch {path!r} is not an absolute path (no PATH lookup is done)"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"real sbatch {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode) or not os.access(path, os.X_OK):
        return f"real sbatch {path} is not an executable file"
    if is_wrapper(path, self_paths):
        return f"real sbatch {path} is asrpt-sbatch itself; set [wrapper] real_sbatch to Slurm's sbatch"
    return None


def load_wrapper_config(
    environ: dict[str, str] | os._Environ[str],
    self_paths: list[str],
    *,
    default_real_sbatch: str = DEFAULT_REAL_SBATCH,
) -> tuple[WrapperConfig, list[str]]:
    """Build the configuration; never raises. Returns (config, problems for the warning line).

    ``self_paths`` are the files that are this wrapper (the launcher script being run), used
    to refuse a real sbatch that would run the wrapper again. The real sbatch is the first
    usable of ``ASRPT_REAL_SBATCH``, ``ASRPT_WRAPPER_REAL_SBATCH``, ``[wrapper] real_sbatch``
    and ``default_real_sbatch``; real_sbatch is None if none is usable.
    """
    problems: list[str] = []
    explicit = bool(environ.get("ASRPT_CONFIG"))
    path = environ.get("ASRPT_CONFIG") or DEFAULT_CONFIG_PATH
    document: dict[str, object] = {}
    config_path: str | None = None
    try:
        document = _read_file(path, explicit, problems)
        if document:
            config_path = path
    except Exception as exc:  # fail open on anything
        problems.append(f"configuration file {path}: {exc!r}")

    wrapper = _section(document, "wrapper", path, problems)
    spool = _section(document, "spool", path, problems)
    unknown = sorted(key for key in wrapper if key not in WRAPPER_KEYS)
    if unknown:
        problems.append(f"{path}: unknown key(s) {', '.join(unknown)} in [wrapper]; valid keys: {', '.join(WRAPPER_KEYS)}")

    # Every source in order of precedence; the first usable one wins, and each refused one
    # is named in the warning.
    candidates: list[tuple[str, str]] = []
    for variable in ("ASRPT_REAL_SBATCH", "ASRPT_WRAPPER_REAL_SBATCH"):
        if environ.get(variable):
            candidates.append((variable, environ[variable]))
    configured = wrapper.get("real_sbatch")
    if isinstance(configured, str) and configured:
        candidates.append((f"{path} [wrapper] real_sbatch", configured))
    elif configured is not None:
        problems.append(f"{path}: [wrapper] real_sbatch must be a non-empty string")
    candidates.append(("default", default_real_sbatch))

    real_sbatch: str | None = None
    tried: set[str] = set()
    for origin, candidate in candidates:
        if candidate in tried:
            continue
        tried.add(candidate)
        trouble = check_real_sbatch(candidate, self_paths)
        if trouble is None:
            real_sbatch = candidate
            break
        problems.append(trouble if origin == "default" else f"{trouble} (from {origin})")

    if "ASRPT_SPOOL_DIR" in environ:
        spool_dir = environ["ASRPT_SPOOL_DIR"]
    else:
        configured_dir = spool.get("dir", DEFAULT_SPOOL_DIR)
        if isinstance(configured_dir, str):
            spool_dir = configured_dir
        else:
            problems.append(f"{path}: [spool] dir must be a string")
            spool_dir = DEFAULT_SPOOL_DIR
    if spool_dir and not os.path.isabs(spool_dir):
        problems.append(f"spool directory {spool_dir!r} is not an absolute path; not recording")
        spool_dir = ""

    config = WrapperConfig(real_sbatch=real_sbatch, spool_dir=spool_dir, config_path=config_path)
    return config, problems
