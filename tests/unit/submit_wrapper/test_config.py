"""WrapperConfig: where the real sbatch and the spool come from; problems never raise."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from asrpt.submit_wrapper.config import DEFAULT_SPOOL_DIR, WrapperConfig, check_real_sbatch, load_wrapper_config

from .wrapper_helpers import STUB


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def load(environ, self_paths=(), default=None, tmp_path=None):
    """load_wrapper_config; ASRPT_CONFIG "" stands for an empty file (hermetic: never /etc)."""
    default = default or str(tmp_path / "no-default-sbatch")
    if environ.get("ASRPT_CONFIG") == "":
        empty = Path(default).parent / "empty-asrpt.toml"
        empty.write_text("")
        environ = {**environ, "ASRPT_CONFIG": str(empty)}
    return load_wrapper_config(environ, list(self_paths), default_real_sbatch=default)


def test_environment_wins_over_the_file(tmp_path):
    other = executable(tmp_path / "other")
    config_file = tmp_path / "asrpt.toml"
    config_file.write_text(f'[wrapper]\nreal_sbatch = "{other}"\n[spool]\ndir = "/srv/spool"\n')
    config, problems = load({"ASRPT_CONFIG": str(config_file), "ASRPT_REAL_SBATCH": str(STUB), "ASRPT_SPOOL_DIR": "/x"}, tmp_path=tmp_path)
    assert (config.real_sbatch, config.spool_dir, problems) == (str(STUB), "/x", [])
    assert config.config_path == str(config_file)


def test_the_file_is_used_without_environment(tmp_path):
    config_file = tmp_path / "asrpt.toml"
    config_file.write_text(f'[wrapper]\nreal_sbatch = "{STUB}"\n[spool]\ndir = "/srv/spool"\n[slurm]\nanything = 1\n')
    config, problems = load({"ASRPT_CONFIG": str(config_file)}, tmp_path=tmp_path)
    assert (config.real_sbatch, config.spool_dir, problems) == (str(STUB), "/srv/spool", [])


def test_daemon_spelling_of_the_variable_works(tmp_path):
    config, problems = load({"ASRPT_CONFIG": "", "ASRPT_WRAPPER_REAL_SBATCH": str(STUB)}, tmp_path=tmp_path)
    assert config.real_sbatch == str(STUB)


def test_defaults(tmp_path):
    default = executable(tmp_path / "sbatch")
    config, problems = load({"ASRPT_CONFIG": str(tmp_path / "none.toml")}, default=str(default))
    assert config.real_sbatch == str(default) and config.spool_dir == DEFAULT_SPOOL_DIR
    assert problems == [f"configuration file {tmp_path / 'none.toml'} does not exist"]


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("sbatch", "is not an absolute path (no PATH lookup is done)"),
        ("/nonexistent/sbatch", "No such file or directory"),
        ("/etc", "is not an executable file"),
    ],
)
def test_unusable_real_sbatch_is_refused_and_the_next_source_used(tmp_path, value, fragment):
    config, problems = load({"ASRPT_CONFIG": "", "ASRPT_REAL_SBATCH": value}, default=str(executable(tmp_path / "default-sbatch")))
    assert config.real_sbatch == str(tmp_path / "default-sbatch")
    assert len(problems) == 1 and fragment in problems[0] and "(from ASRPT_REAL_SBATCH)" in problems[0]


def test_a_non_executable_file_is_refused(tmp_path):
    plain = tmp_path / "sbatch"
    plain.write_text("#!/bin/sh\n")
    assert "is not an executable file" in check_real_sbatch(str(plain), [])


def test_the_wrapper_itself_is_refused_by_identity_and_by_content(tmp_path):
    me = executable(tmp_path / "asrpt-sbatch", "#!/usr/bin/python3\nprint()\n")
    link = tmp_path / "sbatch-link"
    link.symlink_to(me)
    hard = tmp_path / "sbatch-hard"
    os.link(me, hard)
    copy = executable(tmp_path / "sbatch-copy", "#!/venv/bin/python\nfrom asrpt.submit_wrapper.main import main\n")
    for candidate in (me, link, hard):
        assert "is asrpt-sbatch itself" in check_real_sbatch(str(candidate), [str(me)])
    assert "is asrpt-sbatch itself" in check_real_sbatch(str(copy), [])
    assert check_real_sbatch(str(STUB), [str(me)]) is None


def test_nothing_usable_leaves_real_sbatch_none_with_every_reason(tmp_path):
    me = executable(tmp_path / "asrpt-sbatch")
    config, problems = load({"ASRPT_CONFIG": "", "ASRPT_REAL_SBATCH": str(me)}, self_paths=[str(me)], tmp_path=tmp_path)
    assert config.real_sbatch is None
    assert len(problems) == 2 and "itself" in problems[0] and "no-default-sbatch" in problems[1]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[wrapper\n", "cannot parse configuration file"),
        ('[wrapper]\nreal_sbatch = 5\n', "[wrapper] real_sbatch must be a non-empty string"),
        ('[wrapper]\nspool_dir = "/x"\n', "unknown key(s) spool_dir in [wrapper]; valid keys: real_sbatch"),
        ('wrapper = 3\n', "[wrapper] must be a table"),
        ('[spool]\ndir = 3\n', "[spool] dir must be a string"),
        ('[spool]\ndir = "relative"\n', "is not an absolute path; not recording"),
        (b"\xff\xfe", "cannot parse configuration file"),
    ],
)
def test_bad_files_become_problems_not_exceptions(tmp_path, text, fragment):
    config_file = tmp_path / "asrpt.toml"
    if isinstance(text, bytes):
        config_file.write_bytes(text)
    else:
        config_file.write_text(text)
    config, problems = load({"ASRPT_CONFIG": str(config_file)}, default=str(STUB))
    assert config.real_sbatch == str(STUB)
    assert any(fragment in p for p in problems), problems


def test_an_unreadable_file_is_a_problem(tmp_path, monkeypatch):
    config_file = tmp_path / "asrpt.toml"
    config_file.write_text("")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    config, problems = load({"ASRPT_CONFIG": str(config_file)}, default=str(STUB))
    assert problems and "Permission denied" in problems[0]


def test_config_is_immutable():
    config = WrapperConfig(real_sbatch="/usr/bin/sbatch", spool_dir="/s")
    with pytest.raises(AttributeError):
        config.spool_dir = "/t"  # type: ignore[misc]
    assert "spool_dir='/s'" in repr(config)


def test_stub_is_executable():
    assert STUB.stat().st_mode & stat.S_IXOTH


# ---- the quick TOML reader agrees with tomllib ----------------------------------------------

import tomllib  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from asrpt.submit_wrapper.config import NOT_A_STRING, quick_parse  # noqa: E402

_KEYS = st.sampled_from(["real_sbatch", "dir", "spool_dir", "interval_s", "name", "wrapper", "spool", "a-b", "x_1", '"quoted"', "dotted.key"])
_VALUES = st.sampled_from(
    [
        '"/usr/bin/sbatch"', "'/var/spool/asrpt'", '""', '"a # not a comment"', '"with \\\\ escape"', '"tab\there"',
        "5", "-3", "1e3", "2.5", "inf", "true", "false", "1979-05-27", "1979-05-27T07:32:00Z", "07:32:00",
        '[1, "a]", 2.5,]', "[]", "[[1], [2]]", "{a = 1}", '"""multi"""', "'''lit'''", "abc", '"unterminated', "0x1F", "1_000",
        '"a\x01b"', "'x'y'", '"a"b', "1979-05-27 07:32:00", "-0.5e3", "truex", "[1 2]", "nan", "00", "01.5", "1__0", '"#"',
    ]
)
_HEADERS = st.sampled_from(["[wrapper]", "[spool]", "[daemon]", "[ wrapper ]", "[[slurm.partitions]]", "[wrapper.x]", "[[wrapper]]", "[slurm]", "[a.b]"])
_LINE = st.one_of(
    _HEADERS,
    st.builds(lambda k, v, c: f"{k} = {v}{c}", _KEYS, _VALUES, st.sampled_from(["", "  # comment", "#c"])),
    st.sampled_from(["", "# comment", "   ", "garbage", "key =", "# \x01"]),
    st.text(max_size=20),
)


def _as_wrapper_sees_it(document: dict) -> dict:
    out = {}
    for name in ("wrapper", "spool"):
        if name in document:
            table = document[name]
            out[name] = {k: (v if isinstance(v, str) else NOT_A_STRING) for k, v in table.items()} if isinstance(table, dict) else table
    return out


@settings(max_examples=500, deadline=None)
@given(st.lists(_LINE, max_size=10))
def test_quick_parse_agrees_with_tomllib_whenever_it_answers(lines):
    text = "\n".join(lines) + "\n"
    quick = quick_parse(text)
    if quick is None:
        return  # tomllib decides
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        # Accepted although invalid elsewhere (see quick_parse): our two tables alone must
        # still be valid TOML and read the same.
        document = tomllib.loads(_only_our_tables(lines))
    assert quick == _as_wrapper_sees_it(document)


def _only_our_tables(lines: list[str]) -> str:
    kept, inside = [], False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped.replace(" ", "") in ("[wrapper]", "[spool]")
            kept.append(line if inside else "")
        elif inside:
            kept.append(line)
    return "\n".join(kept) + "\n"


def test_quick_parse_reads_the_testbed_style_file():
    text = (
        '# comment\n[daemon]\ninterval_s = 10.0\ndatabase = "sqlite:////x/asrpt.db"\n\n'
        '[wrapper]\nreal_sbatch = "/usr/bin/sbatch"\n\n[spool]\ndir = "/x/spool-asrpt"\n\n'
        '[slurm]\naccelerator_gres = ["gpu", "npu"]\nuse_sacct = false\n\n'
        '[[slurm.partitions]]\nname = "a100"\nintra_node_gbps = 300.0\n'
    )
    assert quick_parse(text) == {"wrapper": {"real_sbatch": "/usr/bin/sbatch"}, "spool": {"dir": "/x/spool-asrpt"}}


@pytest.mark.parametrize(
    "text",
    ['[wrapper]\nreal_sbatch = """\n/x"""\n', "[wrapper]\nreal_sbatch = \"a\\tb\"\n", "wrapper.real_sbatch = \"/x\"\n", "[wrapper]\n[wrapper]\n"],
)
def test_quick_parse_hands_unusual_files_to_tomllib(text):
    assert quick_parse(text) is None
