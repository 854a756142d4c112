"""Request-level discrete-event simulation of heterogeneous serving instances.

Each instance is an engine in the style of vLLM (v0 scheduler, no chunked prefill): an
iteration is either a prefill of waiting requests (FIFO, up to the prompt-token budget
and the sequence limit, if their KV blocks fit with a 1 % watermark) or one decode step of
every running request. Prefill goes first when something can be admitted. KV memory is
counted in blocks; when a decode step needs blocks that are not free, the most recently
admitted request is preempted and later recomputed (its prompt and generated tokens are
prefilled again). Iteration times come from the instance's fitted latency model. The
router sees each instance as an engine's metrics would show it (:class:`InstanceView`).

A request that no instance could ever hold (prompt + output above its KV capacity) is
rejected at arrival and reported; every other request completes exactly once.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from asrpt.serving.cost import RequestCostModel
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.latency_model import InstanceLatency
from asrpt.serving.router import InstanceView, RoutedRequest, Router
from asrpt.serving.workload import Request


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSpec:
    name: str
    hardware: str
    tp: int
    latency: InstanceLatency
    kv_capacity_tokens: int

    def cost_model(self, engine: EngineConfig) -> RequestCostModel:
        return RequestCostModel(latency=self.latency, kv_capacity_tokens=self.kv_capacity_tokens,
                                max_num_seqs=engine.max_num_seqs)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOutcome:
    request_id: int
    instance: int
    arrival_s: float
    first_token_s: float
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    preemptions: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for one-token outputs."""
        if self.output_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    outcomes: tuple[RequestOutcome, ...]
    rejected: tuple[int, ...]
    instance_names: tuple[str, ...]

    def window_throughput_tok_s(self, low: float = 10.0, high: float = 90.0) -> float:
        """Output tokens/s between the ``low`` and ``high`` percentiles of completion
        times: the run without its start-up and its final drain, whose share of a finite
        run grows with the instances' batch slots. Tokens of a request are spread evenly
        over its decode time."""
        finish = np.array([o.finish_s for o in self.outcomes])
        if len(finish) < 2:
            return self.summary_throughput()
        start, end = np.percentile(finish, [low, high])
        if end <= start:
            return self.summary_throughput()
        first = np.array([o.first_token_s for o in self.outcomes])
        rest = np.array([o.output_tokens - 1 for o in self.outcomes], dtype=float)
        span = finish - first
        overlap = np.clip(np.minimum(finish, end) - np.maximum(first, start), 0.0, None)
        spread = np.where(span > 0, rest * overlap / np.where(span > 0, span, 1.0), 0.0)
        tokens = spread.sum() + np.count_nonzero((first >= start) & (first <= end))
        return float(tokens / (end - start))

    def summary_throughput(self) -> float:
        start = min(o.arrival_s for o in self.outcomes)
        end = max(o.finish_s for o in self.outcomes)
        return float(sum(o.output_tokens for o in self.outcomes) / max(end - start, 1e-9))

    def summary(self) -> dict:
        """Output-token throughput over the run (first arrival to last completion), and
        TTFT / TPOT percentiles in seconds."""
        if not self.outcomes:
            return {"throughput_tok_s": 0.0, "completed": 0, "rejected": len(self.rejected)}
        start = min(o.arrival_s for o in self.outcomes)
        end = max(o.finish_s for o in self.outcomes)
        span = max(end - start, 1e-9)
        ttft = np.array([o.ttft_s for o in self.outcomes])
        tpot = np.array([o.tpot_s for o in self.outcomes if o.tpot_s is not None] or [0.0])
        share = np.bincount([o.instance for o in self.outcomes], minlength=len(self.instance_names))
        return {
            "throughput_tok_s": float(sum(o.output_tokens for o in self.outcomes) / span),
            "request_throughput_per_s": float(len(self.outcomes) / span),
            "ttft_p50_s": float(np.percentile(ttft, 50)),
            "ttft_p99_s": float(np.percentile(ttft, 99)),
            "tpot_p50_s": float(np.percentile(tpot, 50)),
            "tpot_p99_s": float(np.percentile(tpot, 99)),
            "window_throughput_tok_s": self.window_throughput_tok_s(),
            "makespan_s": float(span),
            "completed": len(self.outcomes),
            "rejected": len(self.rejected),
            "preemptions": int(sum(o.preemptions for o in self.outcomes)),
            "requests_per_instance": {name: int(n) for name, n in zip(self.instance_names, share)},
        }


class _Sequence:
    __slots__ = ("request", "prompt", "output", "predicted", "generated", "blocks", "first_token_s", "preemptions",
                 "prefill_s", "decode_share_s")

    def __init__(self, request: Request, cost: RequestCostModel) -> None:
        self.request = request
        self.prompt = request.prompt_tokens
        self.output = request.output_tokens
        self.predicted = request.predicted_output_tokens
        self.generated = 0
        self.blocks = 0
        self.first_token_s: float | None = None
        self.preemptions = 0
        self.prefill_s = cost.prefill_s(request.prompt_tokens)
        self.decode_share_s = cost.decode_token_s(request.prompt_tokens, request.predicted_output_tokens)

    def remaining_s(self) -> float:
        """Router's estimate of the time still needed (predicted, not true, output)."""
        left = max(1, self.predicted - self.generated)
        return (self.prefill_s if self.blocks == 0 else 0.0) + left * self.decode_share_s


class _Engine:
    def __init__(self, index: int, spec: InstanceSpec, engine: EngineConfig, prefill_budget_tokens: int) -> None:
        self.index = index
        self.spec = spec
        self.cost = spec.cost_model(engine)
        self.block_tokens = engine.block_size_tokens
        self.max_num_seqs = engine.max_num_seqs
        self.prefill_budget = prefill_budget_tokens
        self.total_blocks = spec.kv_capacity_tokens // engine.block_size_tokens
        self.free_blocks = self.total_blocks
        self.watermark_blocks = max(1, int(0.01 * self.total_blocks))
        self.waiting: deque[_Sequence] = deque()
        self.running: list[_Sequence] = []
        self.busy = False
        self._iteration: tuple[str, list[_Sequence]] | None = None
        # Kept incrementally: the waiting queue can hold thousands under overload.
        self._waiting_remaining_s = 0.0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def can_ever_hold(self, request: Request) -> bool:
        return self.blocks_for(request.prompt_tokens + request.output_tokens) <= self.total_blocks

    def drain_s(self) -> float:
        return self._waiting_remaining_s + sum(s.remaining_s() for s in self.running)

    def view(self) -> InstanceView:
        return InstanceView(
            index=self.index, cost=self.cost, kv_capacity_tokens=self.total_blocks * self.block_tokens,
            kv_used_tokens=(self.total_blocks - self.free_blocks) * self.block_tokens,
            outstanding=len(self.waiting) + len(self.running),
            drain=self.drain_s,
        )

    def _push_waiting(self, sequence: _Sequence, *, front: bool = False) -> None:
        (self.waiting.appendleft if front else self.waiting.append)(sequence)
        self._waiting_remaining_s += sequence.remaining_s()

    def _pop_waiting(self) -> _Sequence:
        sequence = self.waiting.popleft()
        self._waiting_remaining_s -= sequence.remaining_s()
        if not self.waiting:  # no drift from float sums
            self._waiting_remaining_s = 0.0
        return sequence

    def enqueue(self, sequence: _Sequence) -> None:
        self._push_waiting(sequence)

    # ---------------------------------------------------------------- iterations

    def start(self, now_s: float) -> float | None:
        """Begin the next iteration; its end time, or None when there is nothing to do."""
        batch = self._admit()
        if batch:
            prompt = [s.prompt + s.generated for s in batch]
            self._iteration = ("prefill", batch)
            duration_ms = self.spec.latency.prefill.time_ms(len(batch), sum(prompt), sum(p * p for p in prompt))
        elif self.running:
            self._grow_or_preempt()
            self._iteration = ("decode", self.running)
            cached = sum(s.prompt + s.generated for s in self.running)
            duration_ms = self.spec.latency.decode.time_ms(len(self.running), cached)
        else:
            self.busy = False
            return None
        self.busy = True
        return now_s + max(duration_ms, 1e-6) / 1000.0

    def _admit(self) -> list[_Sequence]:
        batch: list[_Sequence] = []
        budget = self.prefill_budget
        while self.waiting and len(self.running) + len(batch) < self.max_num_seqs:
            sequence = self.waiting[0]
            tokens = sequence.prompt + sequence.generated
            if batch and tokens > budget:
                break
            need = self.blocks_for(tokens + 1)
            reserve = self.watermark_blocks if (self.running or batch) else 0  # an idle engine takes anything that fits
            if need > self.free_blocks - reserve:
                break
            self._pop_waiting()
            self.free_blocks -= need
            sequence.blocks = need
            batch.append(sequence)
            budget -= tokens
        return batch

    def _grow_or_preempt(self) -> None:
        """Give every running sequence room for the token this step adds (one block at
        most, since a sequence grows by one token), preempting the latest admitted while
        the free blocks do not suffice."""
        capacity = self.block_tokens
        while True:
            need = sum(1 for s in self.running if s.prompt + s.generated + 1 > s.blocks * capacity)
            if need <= self.free_blocks or len(self.running) == 1:
                break
            victim = self.running.pop()  # latest admitted loses its cache and is recomputed
            self.free_blocks += victim.blocks
            victim.blocks = 0
            victim.preemptions += 1
            self._push_waiting(victim, front=True)
        for sequence in self.running:
            if sequence.prompt + sequence.generated + 1 > sequence.blocks * capacity:
                sequence.blocks += 1
                self.free_blocks -= 1

    def complete(self, now_s: float) -> list[_Sequence]:
        """End the current iteration at ``now_s``; returns the sequences that finished."""
        assert self._iteration is not None
        kind, batch = self._iteration
        self._iteration = None
        for sequence in batch:
            sequence.generated += 1
            if sequence.first_token_s is None:
                sequence.first_token_s = now_s
        if kind == "prefill":
            finished = [s for s in batch if s.generated >= s.output]
            self.running.extend(s for s in batch if s.generated < s.output)
        else:
            finished = [s for s in self.running if s.generated >= s.output]
            if finished:
                self.running = [s for s in self.running if s.generated < s.output]
        for sequence in finished:
            self.free_blocks += sequence.blocks
            sequence.blocks = 0
        return finished


def simulate(requests: Sequence[Request], instances: Sequence[InstanceSpec], router: Router, *,
             engine: EngineConfig = EngineConfig(), max_model_len: int = 4096) -> SimulationResult:
    """Run ``requests`` (any order; served by arrival time) through ``instances``."""
    budget = engine.prefill_token_budget(max_model_len)
    engines = [_Engine(i, spec, engine, budget) for i, spec in enumerate(instances)]
    arrivals = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    events: list[tuple[float, int, int]] = []  # (end of iteration, tie-break, engine)
    counter = 0
    outcomes: list[RequestOutcome] = []
    rejected: list[int] = []
    position = 0

    def launch(engine_: _Engine, now_s: float) -> None:
        nonlocal counter
        end = engine_.start(now_s)
        if end is not None:
            heapq.heappush(events, (end, counter, engine_.index))
            counter += 1

    while position < len(arrivals) or events:
        next_arrival = arrivals[position].arrival_s if position < len(arrivals) else math.inf
        if next_arrival <= (events[0][0] if events else math.inf):
            request = arrivals[position]
            position += 1
            eligible = [e for e in engines if e.can_ever_hold(request)]
            if not eligible:
                rejected.append(request.request_id)
                continue
            views = [e.view() for e in eligible]
            choice = eligible[router.choose(RoutedRequest(request.prompt_tokens, request.predicted_output_tokens), views)]
            choice.enqueue(_Sequence(request, choice.cost))
            if not choice.busy:
                launch(choice, request.arrival_s)
            continue
        now_s, _, index = heapq.heappop(events)
        engine_ = engines[index]
        for sequence in engine_.complete(now_s):
            outcomes.append(RequestOutcome(
                request_id=sequence.request.request_id, instance=index, arrival_s=sequence.request.arrival_s,
                first_token_s=sequence.first_token_s or now_s, finish_s=now_s,
                prompt_tokens=sequence.prompt, output_tokens=sequence.output,
                preemptions=sequence.preemptions))
        launch(engine_, now_s)
    outcomes.sort(key=lambda o: o.request_id)
    return SimulationResult(outcomes=tuple(outcomes), rejected=tuple(sorted(rejected)),
                            instance_names=tuple(spec.name for spec in instances))
