"""`asrpt predict evaluate`: how well the iteration predictor does on a real trace."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from asrpt.core.prediction import UNSEEN_POLICIES  # light: no scikit-learn for `asrpt --help`
from asrpt.cli.conventions import add_json_options, add_trace_format, emit_json, table_stream
from asrpt.exceptions import AsrptError

#: Trace formats ``--format`` accepts.
TRACE_FORMATS: tuple[str, ...] = ("pai",)


def add_predict_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``predict evaluate`` under ``subparsers``; returns the ``predict`` parser."""
    predict = subparsers.add_parser("predict", help="the iteration predictor")
    commands = predict.add_subparsers(dest="predict_command", metavar="COMMAND", required=True)

    ev = commands.add_parser(
        "evaluate",
        help="train on the start of a trace, report errors on the rest",
        description=(
            "Sort the trace by submit time, fit the random forest on the first part (jobs "
            "finished by the split), predict the rest, and compare median absolute percentage "
            "error and mean absolute log error with history baselines, split into recurring "
            "and first-seen jobs."
        ),
    )
    ev.add_argument("--trace", required=True, type=Path, metavar="CSV", help="trace file")
    add_trace_format(ev, TRACE_FORMATS, default="pai")
    add_json_options(ev, what="the report")
    ev.add_argument(
        "--train-fraction",
        type=float,
        default=0.8,
        metavar="F",
        help="share of jobs, by submit time, in the training period (default: 0.8)",
    )
    ev.add_argument(
        "--unseen-policy",
        choices=UNSEEN_POLICIES,
        default="fallback",
        help="prediction for jobs without group history (default: fallback)",
    )
    ev.add_argument(
        "--retrain-every",
        type=int,
        default=500,
        metavar="N",
        help="replay the test period in submit order, refitting every N jobs on what has "
        "finished by then (default: 500; 0 = one fit at the split)",
    )
    ev.add_argument("--seed", type=int, default=0, help="random seed of the forest (default: 0)")
    ev.set_defaults(func=run_predict_evaluate)
    return predict


def run_predict_evaluate(args: argparse.Namespace) -> int:
    from asrpt.predict.evaluate import evaluate, format_table, read_pai_trace
    from asrpt.cli.progress import Progress
    from asrpt.predict.predictor import IterationPredictor

    try:
        rows = read_pai_trace(args.trace)
        report = evaluate(
            rows,
            train_fraction=args.train_fraction,
            predictor=IterationPredictor(random_state=args.seed, unseen_policy=args.unseen_policy),
            retrain_every=args.retrain_every or None,
            progress=(bar := Progress("predict evaluate")).update,
        )
        bar.close()
    except (AsrptError, ValueError) as error:
        print(f"asrpt predict evaluate: {error}", file=sys.stderr)
        return 1
    report = {"trace": str(args.trace), "format": args.fmt, **report}
    report["unseen_policy"] = args.unseen_policy
    print(format_table(report), file=table_stream(args))
    try:
        emit_json(args, report)
    except AsrptError as error:
        print(f"asrpt predict evaluate: {error}", file=sys.stderr)
        return 1
    return 0
