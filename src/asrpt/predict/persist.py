"""A disposable on-disk cache of the fitted predictor (for the daemon only).

Unpickling runs code, so a model file is loaded only from a place no other user can write
(file and folder owned by root or by the daemon's own user, not group- or world-writable),
and only if it was written by the same scikit-learn version (pickles do not survive version
changes reliably). Anything else yields None: the daemon retrains, which is always safe.
The CLI never loads a model; it reads predictions from the database.
"""

from __future__ import annotations

import logging
import os
import pickle
import stat
import tempfile
from pathlib import Path
from typing import Any

import sklearn

from asrpt.predict.predictor import IterationPredictor

logger = logging.getLogger(__name__)

_FORMAT = "asrpt-iteration-predictor/1"


def save_model(model: IterationPredictor, path: str | Path) -> None:
    """Write ``model`` atomically (temporary file + rename), readable by its owner only."""
    path = Path(path)
    payload = {"format": _FORMAT, "sklearn_version": sklearn.__version__, "model": model}
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def untrusted_reason(path: Path) -> str | None:
    """Why ``path`` must not be unpickled, or None if it is safe to load."""
    trusted_owners = {0, os.geteuid()}
    for target in (path, path.parent):
        try:
            info = target.stat()
        except OSError as error:
            return f"cannot stat {target}: {error.strerror or error}"
        if info.st_uid not in trusted_owners:
            return f"{target} is owned by uid {info.st_uid}"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{target} is writable by group or others"
    return None


def load_model(path: str | Path) -> IterationPredictor | None:
    """The cached model at ``path``, or None when it is missing, untrusted or stale."""
    path = Path(path)
    if not path.exists():
        return None
    reason = untrusted_reason(path)
    if reason is not None:
        logger.warning("not loading model %s: %s; retraining instead", path, reason)
        return None
    try:
        with path.open("rb") as handle:
            payload: Any = pickle.load(handle)
    except Exception as error:  # a truncated or foreign file: retrain
        logger.warning("not loading model %s: %s; retraining instead", path, error)
        return None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        logger.warning("not loading model %s: unknown format; retraining instead", path)
        return None
    if payload.get("sklearn_version") != sklearn.__version__:
        logger.info(
            "model %s was fitted with scikit-learn %s, running %s; retraining",
            path,
            payload.get("sklearn_version"),
            sklearn.__version__,
        )
        return None
    model = payload.get("model")
    return model if isinstance(model, IterationPredictor) else None
