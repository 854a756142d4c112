"""Cheap throughput estimates of one instance, for ranking deployment candidates.

Both take a sample of request lengths, all present at time 0, and the instance's fitted
latency model, and return generated tokens per second. A finite sample starts with one
big prefill and ends with a tail in which the last batch drains with ever fewer requests;
both are a larger share of the run for instances with more batch slots, which biases the
figure against large KV caches unless the sample is many times the batch
(:func:`sample_size_for` sizes it so).

* ``continuous``: iteration-level continuous batching. Requests are admitted FIFO while
  the sequence limit and the KV cache allow, reserving prompt + output up front so
  nothing is ever preempted; each admission round is one prefill; between admissions the
  batch decodes until its next request finishes (the steps are summed in closed form).
* ``static``: the paper's estimate (Algorithm 1 as described): the same batches, but a
  batch runs to its longest request before the next one starts.

Neither models arrivals, preemption, the prefill token budget or several instances; the
request-level simulation does, and :mod:`deployment` compares the orders they give.
"""

from __future__ import annotations

from dataclasses import dataclass

from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.latency_model import InstanceLatency
from asrpt.serving.workload import LengthSample

ESTIMATORS: tuple[str, ...] = ("continuous", "static")


@dataclass(frozen=True, slots=True)
class Estimate:
    tokens: int
    time_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time_s if self.time_s > 0 else 0.0


def _prefill_ms(latency: InstanceLatency, prompts: list[int]) -> float:
    return latency.prefill.time_ms(len(prompts), sum(prompts), sum(p * p for p in prompts))


def continuous_batching(latency: InstanceLatency, kv_capacity_tokens: int, lengths: LengthSample,
                        engine: EngineConfig) -> Estimate:
    pending = list(zip(lengths.prompt_tokens, lengths.output_tokens))
    next_index = 0
    running: list[list[int]] = []  # [remaining decode steps, cached tokens, reserved tokens]
    reserved = 0
    time_ms = 0.0
    while next_index < len(pending) or running:
        admitted = []
        while (next_index < len(pending) and len(running) + len(admitted) < engine.max_num_seqs
               and reserved + sum(pending[next_index]) <= kv_capacity_tokens):
            prompt, output = pending[next_index]
            admitted.append((prompt, output))
            reserved += prompt + output
            next_index += 1
        if not admitted and not running:  # a request larger than the whole cache
            raise ValueError(f"request of {sum(pending[next_index])} tokens exceeds the KV capacity {kv_capacity_tokens}")
        if admitted:
            time_ms += _prefill_ms(latency, [p for p, _ in admitted])
            for prompt, output in admitted:
                if output > 1:
                    running.append([output - 1, prompt + 1, prompt + output])
                else:
                    reserved -= prompt + output
        if running:
            steps = min(r[0] for r in running)
            time_ms += latency.decode.steps_time_ms(len(running), sum(r[1] for r in running), steps)
            for r in running:
                r[0] -= steps
                r[1] += steps
            reserved -= sum(r[2] for r in running if r[0] == 0)
            running = [r for r in running if r[0] > 0]
    return Estimate(tokens=sum(lengths.output_tokens), time_s=time_ms / 1000.0)


def static_batching(latency: InstanceLatency, kv_capacity_tokens: int, lengths: LengthSample,
                    engine: EngineConfig) -> Estimate:
    pending = list(zip(lengths.prompt_tokens, lengths.output_tokens))
    time_ms = 0.0
    index = 0
    while index < len(pending):
        batch: list[tuple[int, int]] = []
        reserved = 0
        while index < len(pending) and len(batch) < engine.max_num_seqs and reserved + sum(pending[index]) <= kv_capacity_tokens:
            batch.append(pending[index])
            reserved += sum(pending[index])
            index += 1
        if not batch:
            raise ValueError(f"request of {sum(pending[index])} tokens exceeds the KV capacity {kv_capacity_tokens}")
        time_ms += _prefill_ms(latency, [p for p, _ in batch])
        remaining = sorted(((o - 1, p + 1) for p, o in batch if o > 1), reverse=True)
        done_steps = 0
        while remaining:
            steps = remaining[-1][0] - done_steps
            cached = sum(c + done_steps for _, c in remaining)
            time_ms += latency.decode.steps_time_ms(len(remaining), cached, steps)
            done_steps += steps
            remaining = [r for r in remaining if r[0] > done_steps]
    return Estimate(tokens=sum(lengths.output_tokens), time_s=time_ms / 1000.0)


def estimate(kind: str, latency: InstanceLatency, kv_capacity_tokens: int, lengths: LengthSample,
             engine: EngineConfig) -> Estimate:
    if kind == "continuous":
        return continuous_batching(latency, kv_capacity_tokens, lengths, engine)
    if kind == "static":
        return static_batching(latency, kv_capacity_tokens, lengths, engine)
    raise ValueError(f"unknown estimator {kind!r}; known: {', '.join(ESTIMATORS)}")


def batch_slots(kv_capacity_tokens: int, mean_request_tokens: float, engine: EngineConfig) -> float:
    """How many average requests one instance runs at once."""
    return min(engine.max_num_seqs, kv_capacity_tokens / mean_request_tokens)


def sample_size_for(slots: float, *, per_slot: float = 10.0, minimum: int = 200, maximum: int = 5000) -> int:
    """Requests for an estimate whose start and tail are small next to the rest: about
    ``per_slot`` times the batch slots of the largest candidate."""
    return int(min(maximum, max(minimum, per_slot * slots)))
