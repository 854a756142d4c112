"""Readers that turn measured latency profiles into prefill and decode samples.

Three public sources measure different things, and each reader says how it maps them onto
the one shape the fitter uses (one prefill batch: requests, prompt tokens, sum of squared
prompt lengths, time; one decode step: requests, cached tokens, time):

* ``splitwise``: splitwise-sim ``perf_model.csv``, one row per measured (batch, prompt,
  output) point with the prefill time of the batch and the mean decode-step time.
* ``vidur``: Vidur ``mlp.csv``, per-layer times of the token-level operators (GEMMs,
  norms, activation) against the number of tokens, optionally plus the TP all-reduce from
  Vidur's ``all_reduce.csv``. Attention is not in these files, so the attention terms of
  the fit are not identified from them.
* ``distserve``: DistServe ``vllm-*.exp`` runs, per-request client timestamps of a real
  vLLM server. Prefill batches and decode windows are reconstructed from the timeline.

A bad row fails with :class:`ProfileFormatError` naming the file and line.
"""

from __future__ import annotations

import ast
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from asrpt.serving.errors import ProfileFormatError
from asrpt.serving.hardware import canonical_accelerator_name
from asrpt.serving.models import canonical_model_name, find_model, known_model_names

#: Formats ``read_profile`` understands.
PROFILE_FORMATS: tuple[str, ...] = ("splitwise", "distserve", "vidur")


@dataclass(frozen=True, slots=True, order=True)
class ProfileKey:
    """What one latency fit is for: a model on an accelerator type at one TP degree."""

    model: str
    hardware: str
    tp: int

    @property
    def label(self) -> str:
        return f"{self.model}/{self.hardware}/tp{self.tp}"

    @classmethod
    def parse(cls, label: str) -> "ProfileKey":
        parts = label.rsplit("/", 2)
        if len(parts) != 3 or not parts[2].startswith("tp") or not parts[2][2:].isdigit():
            raise ValueError(f"not a fit key <model>/<hardware>/tp<t>: {label!r}")
        return cls(model=parts[0], hardware=parts[1], tp=int(parts[2][2:]))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillSample:
    """One measured prefill batch."""

    key: ProfileKey
    batch_size: float
    #: Sum of the prompt lengths in the batch.
    prompt_tokens: float
    #: Sum of the squared prompt lengths (drives attention cost).
    squared_prompt_tokens: float
    time_ms: float
    #: Rows with the same group are repetitions of one point; a held-out split keeps
    #: them together so a test row never has a twin in training.
    group: str
    #: ``file:line`` of the evidence.
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeSample:
    """One decode step (or the mean over several steps of one request)."""

    key: ProfileKey
    batch_size: float
    #: Tokens in the KV cache of the whole batch (mean over the steps).
    cached_tokens: float
    time_ms: float
    #: Prefill iterations per step that stalled this decode (timeline sources only).
    interleaved_prefills: float = 0.0
    #: Prompt tokens per step of those stalling prefills.
    interleaved_prefill_tokens: float = 0.0
    group: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    path: str
    format: str
    prefill: tuple[PrefillSample, ...]
    decode: tuple[DecodeSample, ...]
    #: What the reader left out and why (counts by reason).
    skipped: dict[str, int] = field(default_factory=dict)

    def keys(self) -> list[ProfileKey]:
        return sorted({s.key for s in self.prefill} | {s.key for s in self.decode})


def read_profile(path: str | Path, fmt: str, *, model: str | None = None,
                 hardware: str | None = None, tp: int | None = None) -> Profile:
    """Read ``path`` in format ``fmt``; ``model``/``hardware``/``tp`` override what the
    file (or its location) says, for files that do not carry them."""
    path = Path(path)
    if fmt == "splitwise":
        return read_splitwise(path, model=model, hardware=hardware)
    if fmt == "vidur":
        return read_vidur(path, model=model, hardware=hardware)
    if fmt == "distserve":
        return read_distserve(path, model=model or "opt-13b", hardware=hardware or "a100-80gb", tp=tp or 1)
    raise ProfileFormatError(f"unknown profile format {fmt!r}; known: {', '.join(PROFILE_FORMATS)}")


# --------------------------------------------------------------------------- helpers

def _open_csv(path: Path, required: Sequence[str]) -> tuple[csv.DictReader, object]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise ProfileFormatError(f"{path}: cannot read: {error.strerror or error}") from error
    reader = csv.DictReader(handle)
    header = reader.fieldnames or []
    missing = [name for name in required if name not in header]
    if missing:
        handle.close()
        raise ProfileFormatError(f"{path}:1: missing column(s) {', '.join(missing)}")
    return reader, handle


def _number(row: dict, column: str, where: str, *, positive: bool = False) -> float:
    raw = row.get(column)
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ProfileFormatError(f"{where}: column {column} is not a number: {raw!r}") from None
    if not math.isfinite(value) or (positive and value <= 0) or value < 0:
        raise ProfileFormatError(f"{where}: column {column} must be {'> 0' if positive else '>= 0'}, got {raw!r}")
    return value


# --------------------------------------------------------------------------- splitwise

_SPLITWISE_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size",
                      "prompt_time", "token_time", "tensor_parallel")


def read_splitwise(path: Path, *, model: str | None = None, hardware: str | None = None) -> Profile:
    """splitwise-sim ``perf_model.csv``: prompt_time is the batch's prefill (ms),
    token_time the mean decode step (ms) over ``token_size`` steps, so the mean cached
    tokens per step is ``batch * (prompt + token_size / 2)``."""
    reader, handle = _open_csv(path, _SPLITWISE_COLUMNS)
    prefill: list[PrefillSample] = []
    decode: list[DecodeSample] = []
    with handle:  # type: ignore[attr-defined]
        for row in reader:
            where = f"{path}:{reader.line_num}"
            tp = _number(row, "tensor_parallel", where, positive=True)
            if tp != int(tp):
                raise ProfileFormatError(f"{where}: tensor_parallel must be an integer, got {row['tensor_parallel']!r}")
            key = ProfileKey(model=canonical_model_name(model or row["model"]),
                             hardware=canonical_accelerator_name(hardware or row["hardware"]), tp=int(tp))
            batch = _number(row, "batch_size", where, positive=True)
            prompt = _number(row, "prompt_size", where, positive=True)
            steps = _number(row, "token_size", where, positive=True)
            # The output length does not change a prefill, so every row with the same
            # prompt and batch repeats one prefill measurement.
            group = f"{key.label}|p{prompt:g}|b{batch:g}"
            prefill.append(PrefillSample(
                key=key, batch_size=batch, prompt_tokens=batch * prompt, squared_prompt_tokens=batch * prompt**2,
                time_ms=_number(row, "prompt_time", where, positive=True), group=group, source=where))
            decode.append(DecodeSample(
                key=key, batch_size=batch, cached_tokens=batch * (prompt + steps / 2.0),
                time_ms=_number(row, "token_time", where, positive=True), group=f"{group}|o{steps:g}", source=where))
    if not prefill:
        raise ProfileFormatError(f"{path}: no data rows")
    return Profile(path=str(path), format="splitwise", prefill=tuple(prefill), decode=tuple(decode))


# --------------------------------------------------------------------------- vidur

#: Per-layer token-level operators in Vidur's mlp.csv (``emb`` runs once per model).
_VIDUR_LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                    "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
#: Vidur's SKU directory names -> our accelerator names.
_VIDUR_SKUS = {"a100": "a100-80gb", "h100": "h100-80gb", "a40": "a40-48gb"}
#: Decode batches never exceed the engine's sequence limit, so larger token counts
#: say nothing about decode steps.
VIDUR_MAX_DECODE_BATCH = 512


class AllReduceTable:
    """Vidur's measured all-reduce time against message size, within one node."""

    def __init__(self, points: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        self._points = points

    @classmethod
    def read(cls, path: Path) -> "AllReduceTable":
        reader, handle = _open_csv(path, ("time_stats.all_reduce.mean", "num_workers", "size", "devices_per_node"))
        raw: dict[int, list[tuple[float, float]]] = {}
        with handle:  # type: ignore[attr-defined]
            for row in reader:
                where = f"{path}:{reader.line_num}"
                workers = int(_number(row, "num_workers", where, positive=True))
                if int(_number(row, "devices_per_node", where, positive=True)) != workers:
                    continue  # spans nodes; a TP group stays inside one machine
                raw.setdefault(workers, []).append(
                    (_number(row, "size", where, positive=True), _number(row, "time_stats.all_reduce.mean", where)))
        points = {}
        for workers, pairs in raw.items():
            pairs.sort()
            points[workers] = (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
        return cls(points)

    def time_ms(self, size_bytes: float, workers: int) -> float:
        if workers <= 1:
            return 0.0
        if workers not in self._points:
            raise ProfileFormatError(f"no single-node all-reduce measurements for {workers} workers")
        sizes, times = self._points[workers]
        if size_bytes >= sizes[-1]:  # extrapolate at the largest measured bandwidth
            return float(times[-1] * size_bytes / sizes[-1])
        return float(np.interp(size_bytes, sizes, times))


def _vidur_allreduce_path(mlp_path: Path, sku: str) -> Path | None:
    # Vidur's layout: .../compute/<sku>/<model>/mlp.csv and .../network/<sku>_dgx/all_reduce.csv
    try:
        root = mlp_path.resolve().parents[3]
    except IndexError:
        return None
    candidate = root / "network" / f"{sku}_dgx" / "all_reduce.csv"
    return candidate if candidate.is_file() else None


def read_vidur(path: Path, *, model: str | None = None, hardware: str | None = None,
               allreduce: Path | None | bool = True) -> Profile:
    """Vidur ``compute/<sku>/<model>/mlp.csv``.

    Each row (num_tokens, TP) gives one forward pass of the token-level operators:
    ``layers * (sum of per-layer op means + 2 all-reduces) + embedding``. It is read as a
    prefill of one request with ``num_tokens`` prompt tokens and, for up to
    ``VIDUR_MAX_DECODE_BATCH`` tokens, as a decode step of ``num_tokens`` requests.
    Attention is absent, so squared prompt tokens and cached tokens are left at zero (their
    coefficients are not identified). ``allreduce``: True finds Vidur's
    ``network/<sku>_dgx/all_reduce.csv`` next to the compute tree if present, a path uses
    that file, False leaves communication out.
    """
    sku = path.parent.parent.name.lower()
    model_name = model or path.parent.name
    spec = find_model(model_name)
    if spec is None:
        raise ProfileFormatError(
            f"{path}: model {model_name!r} (from the directory name) is not in the model table, "
            f"so its layer count is unknown; pass a known model ({', '.join(known_model_names())})")
    hw = canonical_accelerator_name(hardware or _VIDUR_SKUS.get(sku, sku))
    table: AllReduceTable | None = None
    if allreduce is True:
        found = _vidur_allreduce_path(path, sku)
        table = AllReduceTable.read(found) if found else None
    elif isinstance(allreduce, Path):
        table = AllReduceTable.read(allreduce)
    columns = [f"time_stats.{op}.mean" for op in ("emb", *_VIDUR_LAYER_OPS)]
    reader, handle = _open_csv(path, (*columns, "num_tokens", "num_tensor_parallel_workers", "n_head", "n_embd"))
    prefill: list[PrefillSample] = []
    decode: list[DecodeSample] = []
    with handle:  # type: ignore[attr-defined]
        for row in reader:
            where = f"{path}:{reader.line_num}"
            tokens = _number(row, "num_tokens", where, positive=True)
            tp = int(_number(row, "num_tensor_parallel_workers", where, positive=True))
            heads = int(_number(row, "n_head", where, positive=True))
            if heads != spec.heads:
                raise ProfileFormatError(f"{where}: n_head {heads} does not match {spec.name} ({spec.heads} heads)")
            layer_ms = sum(_number(row, f"time_stats.{op}.mean", where) for op in _VIDUR_LAYER_OPS)
            if table is not None and tp > 1:
                message_bytes = tokens * _number(row, "n_embd", where, positive=True) * 2  # fp16 activations
                layer_ms += 2 * table.time_ms(message_bytes, tp)
            time_ms = spec.layers * layer_ms + _number(row, "time_stats.emb.mean", where)
            key = ProfileKey(model=spec.name, hardware=hw, tp=tp)
            group = f"{key.label}|n{tokens:g}"
            prefill.append(PrefillSample(key=key, batch_size=1.0, prompt_tokens=tokens, squared_prompt_tokens=0.0,
                                         time_ms=time_ms, group=group, source=where))
            if tokens <= VIDUR_MAX_DECODE_BATCH:
                decode.append(DecodeSample(key=key, batch_size=tokens, cached_tokens=0.0, time_ms=time_ms,
                                           group=group, source=where))
    if not prefill:
        raise ProfileFormatError(f"{path}: no data rows")
    return Profile(path=str(path), format="vidur", prefill=tuple(prefill), decode=tuple(decode))


# --------------------------------------------------------------------------- distserve

_EXP_KEYS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time")
#: Requests whose first tokens arrive within this many seconds came from one prefill batch.
_SAME_BATCH_S = 1e-3


def _read_exp_requests(path: Path) -> list[dict]:
    try:
        first_line = path.read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError) as error:
        raise ProfileFormatError(f"{path}:1: cannot read the request list: {error}") from error
    try:
        requests = ast.literal_eval(first_line)  # a Python literal, single-quoted, not JSON
    except (ValueError, SyntaxError) as error:
        raise ProfileFormatError(f"{path}:1: not a Python list literal of requests: {error}") from error
    if not isinstance(requests, list) or not requests:
        raise ProfileFormatError(f"{path}:1: expected a non-empty list of request dicts")
    for index, item in enumerate(requests):
        where = f"{path}:1: request {index}"
        if not isinstance(item, dict):
            raise ProfileFormatError(f"{where}: not a dict")
        for name in _EXP_KEYS:
            _number(item, name, where)
        if item["output_len"] < 1 or item["prompt_len"] < 1:
            raise ProfileFormatError(f"{where}: prompt_len and output_len must be >= 1")
        if not item["issue_time"] <= item["first_token_time"] <= item["complete_time"]:
            raise ProfileFormatError(f"{where}: times out of order (issue <= first token <= complete)")
    return requests


def _prefill_batches(requests: list[dict]) -> list[list[int]]:
    order = sorted(range(len(requests)), key=lambda i: requests[i]["first_token_time"])
    batches: list[list[int]] = []
    for i in order:
        if batches and requests[i]["first_token_time"] - requests[batches[-1][0]]["first_token_time"] <= _SAME_BATCH_S:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def read_distserve(path: Path, *, model: str = "opt-13b", hardware: str = "a100-80gb", tp: int = 1) -> Profile:
    """DistServe ``vllm-<N>-<rate>.exp``: a real vLLM run, timestamps seen by the client.

    Prefill: requests whose first tokens arrive together formed one batch; its time is
    first token minus the last member's issue time, so it includes client/API overhead and
    the wait for the engine's current step (the intercept absorbs both). Batches that had
    to wait for another prefill to finish are skipped.

    Decode: each request with two or more output tokens gives its mean step time
    ``(complete - first_token) / (output_len - 1)``; the mean batch and cached tokens over
    its window come from how long every other request overlapped it, and prefills that
    finished inside the window are counted per step (vLLM runs them in place of decode
    steps, so they stall it).
    """
    requests = _read_exp_requests(path)
    key = ProfileKey(model=canonical_model_name(model), hardware=canonical_accelerator_name(hardware), tp=tp)
    where = f"{path}:1"
    batches = _prefill_batches(requests)
    skipped = {"prefill batch blocked by another prefill": 0, "single-token output (no decode)": 0}
    prefill: list[PrefillSample] = []
    batch_ends = [requests[b[0]]["first_token_time"] for b in batches]
    for number, members in enumerate(batches):
        last_issue = max(requests[i]["issue_time"] for i in members)
        end = batch_ends[number]
        if any(last_issue < other < end - _SAME_BATCH_S for other in batch_ends):
            skipped["prefill batch blocked by another prefill"] += 1
            continue
        lengths = [float(requests[i]["prompt_len"]) for i in members]
        prefill.append(PrefillSample(
            key=key, batch_size=float(len(members)), prompt_tokens=sum(lengths),
            squared_prompt_tokens=sum(x * x for x in lengths), time_ms=(end - last_issue) * 1000.0,
            group=f"{path.name}|batch{number}", source=f"{where} (requests {','.join(map(str, members))})"))
    decode: list[DecodeSample] = []
    for i, request in enumerate(requests):
        steps = request["output_len"] - 1
        start, stop = request["first_token_time"], request["complete_time"]
        window_s = stop - start
        if steps < 1 or window_s <= 0:
            skipped["single-token output (no decode)"] += 1
            continue
        batch = 1.0
        cached = request["prompt_len"] + request["output_len"] / 2.0
        for j, other in enumerate(requests):
            if j == i or other["output_len"] < 2:
                continue
            lo, hi = max(start, other["first_token_time"]), min(stop, other["complete_time"])
            if hi <= lo:
                continue
            share = (hi - lo) / window_s
            span = other["complete_time"] - other["first_token_time"]
            generated_mid = 1 + ((lo + hi) / 2 - other["first_token_time"]) / span * (other["output_len"] - 1)
            batch += share
            cached += share * (other["prompt_len"] + generated_mid)
        stalls = [b for b, end in zip(batches, batch_ends) if start < end < stop and i not in b]
        decode.append(DecodeSample(
            key=key, batch_size=batch, cached_tokens=cached, time_ms=window_s * 1000.0 / steps,
            interleaved_prefills=len(stalls) / steps,
            interleaved_prefill_tokens=sum(requests[m]["prompt_len"] for b in stalls for m in b) / steps,
            group=f"{path.name}|request{i}", source=f"{where} (request {i})"))
    return Profile(path=str(path), format="distserve", prefill=tuple(prefill), decode=tuple(decode),
                   skipped={k: v for k, v in skipped.items() if v})
