"""Job history in SQL: models, engine factory, migrations and the repository verbs."""

from asrpt.db.repository import (
    HistoryRepository,
    HistoryRow,
    OutcomeRecord,
    PredictionRecord,
    PruneResult,
    SubmissionRecord,
)
from asrpt.db.session import DEFAULT_DATABASE_URL, make_engine

__all__ = [
    "DEFAULT_DATABASE_URL",
    "HistoryRepository",
    "HistoryRow",
    "OutcomeRecord",
    "PredictionRecord",
    "PruneResult",
    "SubmissionRecord",
    "make_engine",
]
