"""Scheduling policies by name: A-SRPT and the baselines it is measured against."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from asrpt.core.dispatch import DispatchOptions
from asrpt.core.policies.asrpt import ASRPTOptions, ASRPTPolicy
from asrpt.core.policies.base import Policy
from asrpt.core.policies.preemption import PreemptiveASRPTPolicy
from asrpt.core.policies.baselines import (
    FifoPolicy,
    MultifactorPolicy,
    OrderedPolicy,
    QssfPolicy,
    SjfOraclePolicy,
    SpwfPolicy,
    TiresiasPolicy,
)
from asrpt.core.speed import SpeedTable


def _asrpt(speed: SpeedTable, options: ASRPTOptions) -> Policy:
    return ASRPTPolicy(speed, options, name="asrpt")


def _asrpt_strict(speed: SpeedTable, options: ASRPTOptions) -> Policy:
    strict = replace(options, dispatch=replace(options.dispatch, mode="strict"))
    return ASRPTPolicy(speed, strict, name="asrpt-strict")


def _asrpt_oracle(speed: SpeedTable, options: ASRPTOptions) -> Policy:
    return ASRPTPolicy(speed, replace(options, use_true_iterations=True), name="asrpt-oracle")


POLICIES: dict[str, Callable[[SpeedTable, ASRPTOptions], Policy]] = {
    "asrpt": _asrpt,
    "asrpt-preempt": lambda speed, options: PreemptiveASRPTPolicy(speed, options),
    "asrpt-strict": _asrpt_strict,
    "asrpt-oracle": _asrpt_oracle,
    "fifo": lambda speed, _o: FifoPolicy(speed),
    "sjf-oracle": lambda speed, _o: SjfOraclePolicy(speed),
    "spwf": lambda speed, _o: SpwfPolicy(speed),
    "qssf": lambda speed, _o: QssfPolicy(speed),
    "tiresias": lambda speed, _o: TiresiasPolicy(speed),
    "multifactor": lambda speed, _o: MultifactorPolicy(speed),
}


def make_policy(name: str, speed: SpeedTable, options: ASRPTOptions | None = None, *,
                baseline_comm_heavy_hold: bool = False) -> Policy:
    """The policy called ``name``; A-SRPT variants take ``options`` (defaults otherwise).

    ``baseline_comm_heavy_hold`` gives a baseline A-SRPT's communication-heavy hold (the
    ratio and tau of ``options.dispatch``; its own mode stays): the same placement options
    for every policy. Off by default, because Slurm never holds a job back for a better
    placement, and with allocation shapes only a spread (``--gpus``) job can be split at all.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None
    opts = options if options is not None else ASRPTOptions()
    policy = factory(speed, opts)
    if baseline_comm_heavy_hold and isinstance(policy, OrderedPolicy):
        policy.options = replace(policy.options, comm_heavy_ratio=opts.dispatch.comm_heavy_ratio,
                                 comm_heavy_tau=opts.dispatch.comm_heavy_tau)
    return policy


__all__ = ["POLICIES", "ASRPTOptions", "ASRPTPolicy", "DispatchOptions", "Policy", "make_policy"]
