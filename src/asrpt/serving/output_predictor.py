"""Guess a request's output length from its prompt length, for the router.

The engine does not know how many tokens a request will generate; the router's workload
T_r^s needs a number. In the Azure conversation trace the mean output depends strongly on
the prompt length (about 80 tokens for 230-400-token prompts, 410 for 1000-1160, 54 above
2000), so one global mean sends the requests that look cheap, and are not, to the slow
instance. The predictor is the mean output within prompt-length quantile buckets, fitted
on past requests (the simulations fit it on the first half of the trace and serve the
second half).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True, slots=True)
class BucketMeanPredictor:
    #: Upper prompt-length edges of all buckets but the last.
    edges: tuple[float, ...]
    #: Mean output tokens per bucket (len(edges) + 1 values).
    means: tuple[int, ...]

    @classmethod
    def fit(cls, prompt_tokens: Sequence[int], output_tokens: Sequence[int], *, buckets: int = 8) -> "BucketMeanPredictor":
        prompts = np.asarray(prompt_tokens, dtype=float)
        outputs = np.asarray(output_tokens, dtype=float)
        if len(prompts) == 0:
            raise ValueError("cannot fit an output-length predictor on no requests")
        edges = np.unique(np.quantile(prompts, np.linspace(0, 1, buckets + 1)[1:-1]))
        index = np.searchsorted(edges, prompts, side="left")
        overall = float(outputs.mean())
        means = [float(outputs[index == b].mean()) if np.any(index == b) else overall for b in range(len(edges) + 1)]
        return cls(tuple(float(e) for e in edges), tuple(max(1, int(round(m))) for m in means))

    @classmethod
    def constant(cls, output_tokens: int) -> "BucketMeanPredictor":
        return cls((), (max(1, int(output_tokens)),))

    def predict(self, prompt_tokens: int) -> int:
        return self.means[int(np.searchsorted(self.edges, prompt_tokens, side="left"))]
