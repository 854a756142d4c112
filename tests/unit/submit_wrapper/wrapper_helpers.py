"""Running asrpt-sbatch against the stub sbatch in a subprocess (plain functions, no fixtures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUB = HERE / "stub_sbatch.sh"


def wrapper_command() -> list[str]:
    """The installed console script if there is one, else ``python -m``."""
    script = Path(sys.executable).with_name("asrpt-sbatch")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "asrpt.submit_wrapper.main"]


def make_spool(path: Path) -> Path:
    """A spool directory like the real one: sticky and world-writable."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o1777)
    return path


def base_env(tmp: Path, spool: Path, real: Path | str = STUB, **extra: str) -> dict[str, str]:
    config = tmp / "asrpt.toml"
    if not config.exists():
        config.write_text("")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "USER": "someone",
        "LANG": "C.UTF-8",
        "ASRPT_CONFIG": str(config),
        "ASRPT_REAL_SBATCH": str(real),
        "ASRPT_SPOOL_DIR": str(spool),
    }
    env.update(extra)
    return env


def run_wrapper(args: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("timeout", 60)
    return subprocess.run(wrapper_command() + args, env=env, **kwargs)


def run_stub(args: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("timeout", 60)
    return subprocess.run([str(STUB), *args], env=env, **kwargs)


def records(spool: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(spool.glob("*.json"))]


def record_files(spool: Path) -> list[Path]:
    return sorted(spool.glob("*.json"))


def warning_lines(stderr: bytes) -> list[bytes]:
    return [line for line in stderr.splitlines() if line.startswith(b"asrpt-sbatch: warning:")]
