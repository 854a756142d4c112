"""LLM serving on heterogeneous accelerators (second seed, arXiv 2504.15303).

Fitted prefill/decode latency models per (model, accelerator, TP degree), a deployment
optimiser that picks tensor-parallel degrees per machine type, and a request router
(w = T * exp(theta * kv_usage)) evaluated in a request-level simulation.
"""
