"""T_r^s: what one request costs an instance, from that instance's fitted latency model.

The router's workload (w = T * exp(theta * kv_usage)) and the weighted round-robin
weights both need a per-request time on each instance that reflects batching: decode steps
are shared by the whole batch, so a request's share of a step is the step time divided by
the batch. The "ideal batch" is the largest batch of requests like this one that the KV
cache and the engine's sequence limit allow. Prefill is not divided: it is compute-bound
and grows with the tokens batched.
"""

from __future__ import annotations

from dataclasses import dataclass

from asrpt.serving.latency_model import InstanceLatency


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCostModel:
    latency: InstanceLatency
    kv_capacity_tokens: int
    max_num_seqs: int

    def ideal_batch(self, prompt_tokens: int, output_tokens: int) -> int:
        return max(1, min(self.max_num_seqs, self.kv_capacity_tokens // max(1, prompt_tokens + output_tokens)))

    def prefill_s(self, prompt_tokens: int) -> float:
        return self.latency.prefill.time_ms(1, prompt_tokens, prompt_tokens * prompt_tokens) / 1000.0

    def decode_token_s(self, prompt_tokens: int, output_tokens: int) -> float:
        """This request's share of one decode step at the ideal batch."""
        batch = self.ideal_batch(prompt_tokens, output_tokens)
        cached = batch * (prompt_tokens + output_tokens / 2.0)
        return self.latency.decode.time_ms(batch, cached) / batch / 1000.0

    def request_time_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.prefill_s(prompt_tokens) + output_tokens * self.decode_token_s(prompt_tokens, output_tokens)
