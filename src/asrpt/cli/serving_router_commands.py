"""``asrpt serving router``: the KV-aware router as an OpenAI-compatible HTTP proxy in front
of running engines (vLLM), reading their Prometheus metrics. Registered by
:func:`asrpt.cli.serving_commands.add_serving_parser`; building the parser imports nothing
heavy, the handler imports :mod:`asrpt.serving.http_router`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from asrpt.serving.errors import ConfigError

#: Copy of :data:`asrpt.serving.router.POLICY_NAMES`.
POLICY_NAMES: tuple[str, ...] = ("kv-aware", "round-robin", "weighted-round-robin", "least-outstanding", "least-latency")


def add_router_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    router = commands.add_parser(
        "router", help="OpenAI-compatible HTTP router in front of running engines (vLLM)",
        description="Proxy /v1/completions, /v1/chat/completions and /v1/models to engine servers, choosing "
                    "each request's backend from the engines' Prometheus metrics (KV-cache usage, running and "
                    "waiting requests) scraped every --scrape-interval-s. kv-aware minimises "
                    "w = T * exp(theta * kv_usage); T comes from the latency fit with --fit/--backend-fit, "
                    "otherwise from queue lengths. The router's own metrics are at /metrics, health at /healthz.")
    router.add_argument("--backend", required=True, action="append", metavar="URL",
                        help="engine base URL, e.g. http://10.0.0.5:8000 (repeat for each engine)")
    router.add_argument("--fit", type=Path, metavar="FIT_JSON", help="output of `serving fit`, for T in seconds")
    router.add_argument("--backend-fit", action="append", default=[], metavar="URL=KEY",
                        help="fit key of a backend, e.g. http://10.0.0.5:8000=llama2-70b/a100-80gb/tp2 "
                             "(with --fit: one per backend)")
    router.add_argument("--policy", default="kv-aware", metavar="NAME",
                        help=f"{', '.join(POLICY_NAMES)} (default kv-aware)")
    router.add_argument("--theta", type=float, default=2.0, help="KV pressure exponent of kv-aware (default 2)")
    router.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                        help="address to serve on (default 127.0.0.1:8080)")
    router.add_argument("--scrape-interval-s", type=float, default=1.0, metavar="S",
                        help="seconds between scrapes of each backend's /metrics (default 1)")
    router.add_argument("--default-output-tokens", type=int, default=256, metavar="N",
                        help="predicted output of a request without max_tokens (default 256)")
    router.set_defaults(func=run_router)
    return router


def _backend_fits(pairs: list[str]) -> dict[str, str]:
    fits = {}
    for pair in pairs:
        url, sep, key = pair.rpartition("=")
        if not sep or not url or not key:
            raise ConfigError(f"--backend-fit {pair!r}: expected URL=KEY, e.g. http://10.0.0.5:8000=llama2-70b/a100-80gb/tp2")
        fits[url] = key
    return fits


def run_router(args: argparse.Namespace) -> int:
    if args.policy not in POLICY_NAMES:
        raise ConfigError(f"unknown policy {args.policy!r}; known: {', '.join(POLICY_NAMES)}")
    from asrpt.serving.http_router import HttpRouter, normalise_backend_url, parse_listen

    listen = parse_listen(args.listen)
    backends = [normalise_backend_url(url) for url in args.backend]
    fits = None
    if args.fit:
        from asrpt.serving.fitset import FitSet

        fits = FitSet.load(args.fit)
    router = HttpRouter(backends, policy=args.policy, theta=args.theta, listen=listen,
                        scrape_interval_s=args.scrape_interval_s, fits=fits, backend_fits=_backend_fits(args.backend_fit),
                        default_output_tokens=args.default_output_tokens)
    router.bind()
    print(f"asrpt router ({args.policy}) on {router.url} -> {', '.join(backends)}", file=sys.stderr, flush=True)
    try:
        signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        router.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
