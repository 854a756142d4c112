"""``asrpt serving fit | plan | route-sim``: LLM serving on mixed accelerators.

``fit`` turns measured latency profiles into per-(model, accelerator, TP) time models;
``plan`` picks tensor-parallel degrees per machine type and checks the ranking against a
finer simulation; ``route-sim`` compares request routers on heterogeneous instances.
Errors of ours raise :class:`asrpt.exceptions.AsrptError` subclasses, which the entry
point prints as one line. Building the parser imports no numpy or scipy (``asrpt --help``
stays fast): the registries below are literal copies, checked against the real ones by a
test, and the handlers import what they need.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from pathlib import Path

from asrpt.cli.arg_types import output_file
from asrpt.cli.conventions import add_deprecated_alias, add_json_options, emit_json, require, table_stream
from asrpt.serving.errors import ClusterSpecError, ConfigError
from asrpt.serving.models import find_model, known_model_names

#: Copy of :data:`asrpt.serving.profiles.PROFILE_FORMATS`.
PROFILE_FORMATS: tuple[str, ...] = ("splitwise", "distserve", "vidur")
#: Copy of :data:`asrpt.serving.router.POLICY_NAMES`.
POLICY_NAMES: tuple[str, ...] = ("kv-aware", "round-robin", "weighted-round-robin", "least-outstanding", "least-latency")
#: Copy of :data:`asrpt.serving.experiment.OUTPUT_PREDICTORS`.
OUTPUT_PREDICTORS: tuple[str, ...] = ("bucket", "mean", "oracle")

CLUSTER_HELP = ("machine types: inline '<accelerator>x<gpus>[*<machines>]' joined by '+', e.g. a100x8+h100x8, "
                "or a .toml file with [[machines]] accelerator/gpus/count and an optional [engine] table")


def add_serving_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``serving fit|plan|route-sim`` under ``subparsers``; returns the ``serving`` parser."""
    serving = subparsers.add_parser(
        "serving", help="LLM serving on heterogeneous accelerators",
        description="LLM serving on heterogeneous accelerators: fit latency models to profiles (fit), choose "
                    "tensor-parallel degrees per machine type (plan), compare request routers (route-sim).")
    commands = serving.add_subparsers(dest="serving_command", metavar="COMMAND", required=True)

    fit = commands.add_parser(
        "fit", help="fit prefill/decode latency models to measured profiles",
        description="Non-negative least squares with relative weights; held-out error by grouped k-fold "
                    "cross-validation (each measured point held out once), reported per fit and per file.")
    fit.add_argument("--profile", required=True, action="append", type=Path, metavar="FILE",
                     help="profile file (repeat for several files of one format)")
    fit.add_argument("--profile-format", dest="profile_format", choices=PROFILE_FORMATS, default=None,
                     help="profile format (required)")
    add_deprecated_alias(fit, "--format", dest="profile_format", new_option="--profile-format", metavar="FORMAT")
    add_json_options(fit, what="the fits (give --json-out or --json)")
    fit.add_argument("--model", help="model name, for files that do not carry it (distserve: default opt-13b)")
    fit.add_argument("--hardware", help="accelerator name, for files that do not carry it (distserve: a100-80gb)")
    fit.add_argument("--tp", type=int, help="tensor-parallel degree, for distserve files (default 1)")
    fit.add_argument("--folds", type=int, default=4, help="cross-validation folds (default 4: a quarter held out)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the fold assignment (default 0)")
    fit.set_defaults(func=run_fit)

    plan = commands.add_parser(
        "plan", help="choose tensor-parallel degrees per machine type",
        description="Rank every memory-feasible TP degree of each machine type by (u/t) x tokens/time from a "
                    "continuous-batching estimate on sampled Azure request lengths, then check the order "
                    "against the request-level simulation of the whole machine.")
    plan.add_argument("--model", required=True, help=f"model name (known: {', '.join(known_model_names())})")
    plan.add_argument("--cluster", required=True, help=CLUSTER_HELP)
    plan.add_argument("--fit", required=True, type=Path, metavar="FIT_JSON", help="output of `serving fit`")
    plan.add_argument("--trace", required=True, type=Path, metavar="AZURE_CSV", help="Azure LLM inference trace CSV")
    add_json_options(plan, what="the plan (give --json-out or --json)")
    plan.add_argument("--sample-requests", type=int,
                      help="requests in the estimate's sample (default: 10 x the batch slots of the largest instance, 200-5000)")
    plan.add_argument("--seed", type=int, default=0, help="seed of the estimate's sample (default 0)")
    plan.add_argument("--check-seeds", default="1,2,3", help="seeds of the ranking check (default 1,2,3)")
    plan.add_argument("--no-check", action="store_true", help="skip the ranking check (it simulates every candidate)")
    plan.set_defaults(func=run_plan)

    route = commands.add_parser(
        "route-sim", help="compare request routers in a request-level simulation",
        description="Serve Azure trace requests (Poisson arrivals) on heterogeneous instances under each policy "
                    "and report output-token throughput and TTFT/TPOT percentiles per request rate.")
    route.add_argument("--trace", required=True, type=Path, metavar="AZURE_CSV", help="Azure LLM inference trace CSV")
    route.add_argument("--fit", required=True, type=Path, metavar="FIT_JSON", help="output of `serving fit`")
    route.add_argument("--model", help="model to serve (default: the fitted model with the most accelerator types)")
    route.add_argument("--instances", help="e.g. a100-80gb:tp2x2,h100-80gb:tp2 (default: one instance per fitted "
                                           "accelerator type at its smallest feasible fitted TP degree)")
    route.add_argument("--policy", action="append", metavar="NAME",
                       help=f"{', '.join(POLICY_NAMES)} (repeat; default all)")
    route.add_argument("--rates", help="comma-separated req/s, 'inf' = all at once (default: 0.25, 0.5, 0.75, 1, 1.5 "
                                       "x the estimated capacity, and inf)")
    route.add_argument("--requests", type=int, default=1000, help="requests per seed (default 1000)")
    route.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    route.add_argument("--theta", type=float, default=2.0, help="KV pressure exponent of kv-aware (default 2)")
    route.add_argument("--output-predictor", choices=OUTPUT_PREDICTORS, default="bucket",
                       help="router's output-length guess: mean by prompt-length bucket (default), global mean, "
                            "or the true length (an upper bound)")
    add_json_options(route, what="the results")
    route.add_argument("--table", type=output_file, metavar="OUT_MD", help="also write the table to this file")
    route.add_argument("--plot", type=output_file, metavar="OUT_PNG", help="plot throughput and TTFT p99 against rate")
    route.set_defaults(func=run_route_sim)

    from asrpt.cli.serving_router_commands import add_router_parser  # `serving router`: the live HTTP proxy
    add_router_parser(commands)
    return serving


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{what} is empty")
    return values


def _rates(text: str) -> list[float]:
    rates = []
    for part in text.split(","):
        part = part.strip().lower()
        try:
            rate = math.inf if part in ("inf", "infinity") else float(part)
        except ValueError:
            raise ConfigError(f"--rates: not a number or 'inf': {part!r}") from None
        if not rate > 0:
            raise ConfigError(f"--rates: rates must be > 0, got {part!r}")
        rates.append(rate)
    return rates


def _write_json(path: Path, document: dict) -> None:
    try:
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot write {path}: {error.strerror or error}") from error


def run_fit(args: argparse.Namespace) -> int:
    from asrpt.serving.fitting import FitSettings, fit_profiles
    from asrpt.serving.profiles import read_profile

    if args.folds < 1:
        raise ConfigError(f"--folds must be >= 1, got {args.folds}")
    _require_json_destination(args)
    profile_format = require(args, "profile_format", "--profile-format")
    if profile_format not in PROFILE_FORMATS:
        raise ConfigError(f"--profile-format {profile_format!r}: choose from {', '.join(PROFILE_FORMATS)}")
    profiles = [read_profile(path, profile_format, model=args.model, hardware=args.hardware, tp=args.tp)
                for path in args.profile]
    document = fit_profiles(profiles, FitSettings(folds=args.folds, seed=args.seed))
    emit_json(args, document)
    with contextlib.redirect_stdout(table_stream(args)):
        _print_fit_table(document)
    return 0


def _require_json_destination(args: argparse.Namespace) -> None:
    if args.json_out is None and not args.json:
        raise ConfigError("give --json-out PATH (or --json to print the JSON on stdout)")


def _print_fit_table(document: dict) -> None:
    print("| fit | prefill held-out MdAPE | decode held-out MdAPE |")
    print("|---|---|---|")
    for label, entry in document["fits"].items():
        cells = [f"{entry[p]['heldout_median_ape'] * 100:.1f} %" if entry.get(p, {}).get("heldout_median_ape") is not None
                 else "n/a" for p in ("prefill", "decode")]
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    for path, entry in document["files"].items():
        cells = [f"{entry[f'{p}_heldout_median_ape'] * 100:.1f} %" if entry[f"{p}_heldout_median_ape"] is not None
                 else "n/a" for p in ("prefill", "decode")]
        print(f"file {path}: prefill {cells[0]}, decode {cells[1]}")


def run_plan(args: argparse.Namespace) -> int:
    from asrpt.serving.cluster import parse_cluster
    from asrpt.serving.deployment import check_ranking, estimate_sample_size, plan_deployment
    from asrpt.serving.fitset import FitSet
    from asrpt.serving.models import get_model
    from asrpt.serving.report import plan_table, ranking_lines
    from asrpt.serving.workload import read_azure_trace, sample_lengths, usable_lengths

    _require_json_destination(args)
    model = get_model(args.model)
    cluster = parse_cluster(args.cluster)
    fits = FitSet.load(args.fit)
    population = usable_lengths(read_azure_trace(args.trace), model.max_model_len)
    size = args.sample_requests or estimate_sample_size(model, cluster, population)
    if size < 1:
        raise ConfigError(f"--sample-requests must be >= 1, got {size}")
    sample = sample_lengths(population, size, args.seed)
    plan = plan_deployment(model, cluster, fits, sample)
    document = plan.as_dict()
    document.update({"trace": str(args.trace), "sample_seed": args.seed,
                     "dropped_long_prompts": population.dropped_long_prompts,
                     "engine": {name: getattr(cluster.engine, name) for name in cluster.engine.__dataclass_fields__}})
    print(plan_table(document), file=table_stream(args))
    if not args.no_check:
        document["ranking_check"] = check_ranking(plan, fits, population, seeds=_ints(args.check_seeds, "--check-seeds"))
        print(ranking_lines(document["ranking_check"]), file=table_stream(args))
    emit_json(args, document)
    return 0


def run_route_sim(args: argparse.Namespace) -> int:
    from asrpt.serving.cluster import build_instances, default_instances, parse_instances
    from asrpt.serving.engine_config import EngineConfig
    from asrpt.serving.experiment import RouteExperiment, default_rates, run_route_experiment
    from asrpt.serving.fitset import FitSet
    from asrpt.serving.models import get_model
    from asrpt.serving.report import plot_route_report, route_table
    from asrpt.serving.workload import read_azure_trace

    fits = FitSet.load(args.fit)
    if args.model:
        model = get_model(args.model)
    else:
        candidates = [m for m in fits.models() if find_model(m)]
        if not candidates:
            raise ConfigError(f"no fitted model is in the model table ({', '.join(fits.models())}); pass --model")
        model = get_model(max(candidates, key=lambda m: (len(fits.hardware_for(m)), m)))
    policies = tuple(args.policy or POLICY_NAMES)
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        raise ConfigError(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICY_NAMES)}")
    engine = EngineConfig()
    entries = parse_instances(args.instances) if args.instances else default_instances(model, fits, engine)
    instances = tuple(build_instances(model, entries, fits, engine))
    if not instances:
        raise ClusterSpecError("no instances")
    if args.requests < 1:
        raise ConfigError(f"--requests must be >= 1, got {args.requests}")
    experiment = RouteExperiment(model=model, instances=instances, policies=policies, requests=args.requests,
                                 seeds=_ints(args.seeds, "--seeds"), theta=args.theta,
                                 output_predictor=args.output_predictor, engine=engine)
    rows = read_azure_trace(args.trace)
    rates = _rates(args.rates) if args.rates else default_rates(experiment, rows)
    from asrpt.cli.progress import Progress

    bar = Progress("serving route-sim", unit="runs")
    report = run_route_experiment(experiment, rows, rates, progress=bar.update)
    bar.close()
    report["trace"] = str(args.trace)
    table = route_table(report)
    print(f"{model.name} on {', '.join(i.name for i in instances)}; {args.requests} requests x seeds {list(experiment.seeds)}",
          file=table_stream(args))
    print(table, file=table_stream(args))
    if args.table:
        try:
            args.table.write_text(table + "\n", encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot write {args.table}: {error.strerror or error}") from error
    if args.plot:
        plot_route_report(report, args.plot)
    emit_json(args, report)
    return 0
