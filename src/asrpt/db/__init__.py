"""Job history in SQL: models, engine factory, migrations and the repository verbs."""

from asrpt.db.repository import (
    AccuracySummary,
    ForecastRecord,
    HistoryRepository,
    HistoryRow,
    OutcomeRecord,
    PredictionRecord,
    PruneResult,
    RunSummary,
    StoredForecast,
    SubmissionRecord,
)
from asrpt.db.session import make_engine
from asrpt.paths import DEFAULT_DATABASE_URL

__all__ = [
    "AccuracySummary",
    "DEFAULT_DATABASE_URL",
    "ForecastRecord",
    "HistoryRepository",
    "HistoryRow",
    "OutcomeRecord",
    "PredictionRecord",
    "PruneResult",
    "RunSummary",
    "StoredForecast",
    "SubmissionRecord",
    "make_engine",
]
