"""LLM serving on heterogeneous accelerators (second seed, arXiv 2504.15303).

Fitted prefill/decode latency models per (model, accelerator, TP degree), a deployment
optimiser that picks tensor-parallel degrees per machine type, and a request router
(w = T * exp(theta * kv_usage)) evaluated in a request-level simulation.

The same router in front of real engines (:mod:`asrpt.serving.http_router`, stdlib only):
an OpenAI-compatible proxy that scrapes each engine's Prometheus ``/metrics``
(``vllm:kv_cache_usage_perc``, running and waiting requests) every second::

    vllm serve meta-llama/Llama-2-7b-hf --port 8001     # on one GPU type
    vllm serve meta-llama/Llama-2-7b-hf --port 8002     # on another
    asrpt serving router --backend http://gpu1:8001 --backend http://gpu2:8002 \\
        --listen 0.0.0.0:8080 [--policy kv-aware --theta 2]
    # optional: T from a latency fit instead of queue lengths
    #   --fit fit.json --backend-fit http://gpu1:8001=llama2-7b/a100-80gb/tp1 ...

Clients use ``http://ROUTER:8080/v1`` as their OpenAI base URL; ``/metrics`` and
``/healthz`` are the router's own.
"""
