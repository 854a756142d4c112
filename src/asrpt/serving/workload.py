"""Request streams from the Azure LLM inference trace (2023): lengths, arrivals, and the
output-length guess a router has to make.

The trace gives real prompt and output lengths of production traffic (CC-BY 4.0; Patel et
al., Splitwise, ISCA 2024). Arrivals for a chosen request rate are Poisson with a seed, as
in vLLM's serving benchmark; rate ``inf`` sends everything at time 0.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from asrpt.exceptions import TraceFormatError

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request as the simulators see it; the router sees only the predicted output."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    predicted_output_tokens: int


def _parse_timestamp(raw: str) -> float:
    # "2023-11-16 18:15:46.6805900": seven fractional digits, more than strptime's %f takes.
    head, _, fraction = raw.strip().partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + fraction) if fraction else 0.0)


def read_azure_trace(path: str | Path) -> list[TraceRow]:
    """Rows of ``AzureLLMInferenceTrace_{conv,code}.csv``; bad rows fail naming file:line."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise TraceFormatError(f"{path}: cannot read: {error.strerror or error}") from error
    rows: list[TraceRow] = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _AZURE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"{path}:1: missing column(s) {', '.join(missing)} (an Azure LLM inference trace has "
                                   f"{', '.join(_AZURE_COLUMNS)})")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            try:
                prompt, output = int(row["ContextTokens"]), int(row["GeneratedTokens"])
                stamp = _parse_timestamp(row["TIMESTAMP"])
            except (TypeError, ValueError):
                raise TraceFormatError(f"{where}: cannot parse {dict(row)!r}") from None
            if prompt < 1 or output < 1:
                raise TraceFormatError(f"{where}: token counts must be >= 1, got {prompt} and {output}")
            rows.append(TraceRow(stamp, prompt, output))
    if not rows:
        raise TraceFormatError(f"{path}: no data rows")
    return rows


@dataclass(frozen=True, slots=True)
class LengthSample:
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    #: Trace rows left out because the prompt alone reaches ``max_model_len``.
    dropped_long_prompts: int
    #: Rows whose output was cut so that prompt + output <= ``max_model_len``.
    clipped_outputs: int

    def __len__(self) -> int:
        return len(self.prompt_tokens)


def usable_lengths(rows: Sequence[TraceRow], max_model_len: int) -> LengthSample:
    """What an engine with ``max_model_len`` would serve: vLLM rejects prompts that do
    not leave room for one output token and stops generation at the length limit."""
    prompts, outputs = [], []
    dropped = clipped = 0
    for row in rows:
        if row.prompt_tokens >= max_model_len:
            dropped += 1
            continue
        output = min(row.output_tokens, max_model_len - row.prompt_tokens)
        clipped += output < row.output_tokens
        prompts.append(row.prompt_tokens)
        outputs.append(output)
    return LengthSample(tuple(prompts), tuple(outputs), dropped, clipped)


def sample_lengths(lengths: LengthSample, count: int, seed: int) -> LengthSample:
    """``count`` rows drawn without replacement (with replacement if the trace is shorter)."""
    rng = np.random.default_rng(seed)
    total = len(lengths)
    if total == 0:
        raise TraceFormatError("no usable requests in the trace for this model's max_model_len")
    picks = rng.choice(total, size=count, replace=count > total)
    return LengthSample(tuple(lengths.prompt_tokens[i] for i in picks), tuple(lengths.output_tokens[i] for i in picks),
                        lengths.dropped_long_prompts, lengths.clipped_outputs)


def poisson_arrivals_s(count: int, rate_per_s: float, seed: int) -> np.ndarray:
    """Arrival times of a Poisson stream starting at 0; ``inf`` puts them all at 0."""
    if math.isinf(rate_per_s):
        return np.zeros(count)
    if rate_per_s <= 0:
        raise ValueError(f"request rate must be > 0, got {rate_per_s}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=count)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def build_requests(lengths: LengthSample, arrivals_s: Sequence[float],
                   predict_output: Callable[[int], int]) -> list[Request]:
    """Requests with arrival times; ``predict_output(prompt_tokens)`` is the router's guess."""
    return [
        Request(request_id=i, arrival_s=float(t), prompt_tokens=p, output_tokens=o,
                predicted_output_tokens=predict_output(p))
        for i, (t, p, o) in enumerate(zip(arrivals_s, lengths.prompt_tokens, lengths.output_tokens))
    ]


def split_by_time(rows: Sequence[TraceRow], history_fraction: float = 0.5) -> tuple[list[TraceRow], list[TraceRow]]:
    """(earlier, later) rows by timestamp: fit predictors on the past, serve the future."""
    ordered = sorted(rows, key=lambda r: r.timestamp_s)
    cut = int(round(history_fraction * len(ordered)))
    if cut == 0 or cut == len(ordered):
        raise TraceFormatError(f"cannot split {len(ordered)} trace rows into history and evaluation parts")
    return ordered[:cut], ordered[cut:]


def mean_output_tokens(lengths: LengthSample) -> int:
    return max(1, int(round(float(np.mean(lengths.output_tokens)))))
