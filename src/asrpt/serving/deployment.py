"""Deployment optimiser: the tensor-parallel degree for each machine type, and a check of
whether its cheap ranking agrees with a finer simulation.

For a machine with u accelerators, every t dividing u that passes the memory check
(:mod:`memory`) gives u/t instances. A candidate's score is the corrected formula
``(u / t) * tokens / time``, with tokens / time from the continuous-batching estimate of
one instance (:mod:`estimate`) on a sample of real request lengths. (Algorithm 1 as
printed returns ``t * tokens / time``, which favours large t; the paper's derivation
needs u/t.) The objective is a sum over machines, so each machine type is optimised on
its own.

The ranking claim (the estimate is inaccurate but orders candidates correctly) is checked
against the request-level simulation of all u/t instances of the machine under Poisson
arrivals above capacity, on fresh request samples and seeds, measured between the 10th and
90th percentile of completions. The estimate's sample must be many times the batch slots
of the largest instance, or the first prefill and the final drain dominate and the
estimate ranks large KV caches too low (with 200 requests, Llama-2-70B TP2 ranks above
TP4 on A100 and H100 although the simulation says the opposite). Both sides use the same
fitted latency model, so this tests the estimator's simplifications (no arrivals, no
preemption, no token budget, one instance), not the latency model against a real engine.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from asrpt.serving.cluster import Cluster, MachineType
from asrpt.serving.engine_config import EngineConfig
from asrpt.serving.errors import FitUnavailable
from asrpt.serving.estimate import batch_slots, continuous_batching, sample_size_for, static_batching
from asrpt.serving.fitset import FitSet
from asrpt.serving.hardware import get_accelerator
from asrpt.serving.memory import check_feasible
from asrpt.serving.models import ModelSpec
from asrpt.serving.request_sim import InstanceSpec, simulate
from asrpt.serving.router import LeastOutstandingRouter
from asrpt.serving.workload import LengthSample, build_requests, mean_output_tokens, poisson_arrivals_s, sample_lengths


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    tp: int
    instances_per_machine: int
    feasible: bool
    #: Why the candidate cannot run (memory, heads, no fit); None when it can.
    reason: str | None
    kv_capacity_tokens: int
    #: "fitted" or "pooled" (TP degree predicted from the others); None if no fit.
    latency_source: str | None = None
    instance_tok_s: float | None = None
    #: The ranking score: (u / t) * tokens / time.
    machine_tok_s: float | None = None
    #: The same with the static-batching estimate, for comparison.
    static_machine_tok_s: float | None = None

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True, kw_only=True)
class MachinePlan:
    machine: MachineType
    #: Feasible candidates best first, then the infeasible ones.
    candidates: tuple[Candidate, ...]

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates and self.candidates[0].feasible else None

    def ranked(self) -> list[Candidate]:
        return [c for c in self.candidates if c.feasible]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentPlan:
    model: ModelSpec
    cluster: Cluster
    machines: tuple[MachinePlan, ...]
    sample: LengthSample = field(repr=False)

    @property
    def estimated_cluster_tok_s(self) -> float:
        return sum(p.best.machine_tok_s * p.machine.count for p in self.machines if p.best and p.best.machine_tok_s)

    def as_dict(self) -> dict:
        return {
            "model": self.model.name,
            "cluster": self.cluster.label,
            "machines": [
                {
                    "machine": p.machine.label, "accelerator": p.machine.accelerator, "gpus": p.machine.gpus,
                    "count": p.machine.count,
                    "best_tp": p.best.tp if p.best else None,
                    "instances_per_machine": p.best.instances_per_machine if p.best else 0,
                    "candidates": [c.as_dict() for c in p.candidates],
                }
                for p in self.machines
            ],
            "estimated_cluster_tok_s": self.estimated_cluster_tok_s,
            "sample_requests": len(self.sample),
        }


def candidate_degrees(gpus: int) -> list[int]:
    return [t for t in range(1, gpus + 1) if gpus % t == 0]


def evaluate_candidate(model: ModelSpec, machine: MachineType, tp: int, fits: FitSet, sample: LengthSample,
                       engine: EngineConfig) -> Candidate:
    feasibility = check_feasible(model, get_accelerator(machine.accelerator), tp, engine, gpus_per_machine=machine.gpus)
    instances = machine.gpus // tp
    if not feasibility.feasible:
        return Candidate(tp=tp, instances_per_machine=instances, feasible=False, reason=feasibility.reason,
                         kv_capacity_tokens=feasibility.kv_capacity_tokens)
    try:
        lookup = fits.lookup(model.name, machine.accelerator, tp)
    except FitUnavailable as error:
        return Candidate(tp=tp, instances_per_machine=instances, feasible=False, reason=str(error),
                         kv_capacity_tokens=feasibility.kv_capacity_tokens)
    capacity = feasibility.kv_capacity_tokens
    per_instance = continuous_batching(lookup.latency, capacity, sample, engine).tokens_per_s
    static = static_batching(lookup.latency, capacity, sample, engine).tokens_per_s
    return Candidate(tp=tp, instances_per_machine=instances, feasible=True, reason=None, kv_capacity_tokens=capacity,
                     latency_source=lookup.source, instance_tok_s=per_instance,
                     machine_tok_s=instances * per_instance, static_machine_tok_s=instances * static)


def estimate_sample_size(model: ModelSpec, cluster: Cluster, population: LengthSample) -> int:
    """Requests for the estimate: ten times the batch slots of the largest feasible
    instance in the cluster (see :func:`estimate.sample_size_for`)."""
    mean_tokens = float(np.mean(np.add(population.prompt_tokens, population.output_tokens)))
    slots = [batch_slots(f.kv_capacity_tokens, mean_tokens, cluster.engine)
             for machine in cluster.machines for tp in candidate_degrees(machine.gpus)
             for f in [check_feasible(model, get_accelerator(machine.accelerator), tp, cluster.engine,
                                      gpus_per_machine=machine.gpus)] if f.feasible]
    return sample_size_for(max(slots, default=1.0))


def plan_deployment(model: ModelSpec, cluster: Cluster, fits: FitSet, sample: LengthSample) -> DeploymentPlan:
    """Rank every candidate degree of every machine type by the estimated throughput."""
    plans = []
    for machine in cluster.machines:
        candidates = [evaluate_candidate(model, machine, tp, fits, sample, cluster.engine)
                      for tp in candidate_degrees(machine.gpus)]
        candidates.sort(key=lambda c: (not c.feasible, -(c.machine_tok_s or 0.0), c.tp))
        plans.append(MachinePlan(machine=machine, candidates=tuple(candidates)))
    return DeploymentPlan(model=model, cluster=cluster, machines=tuple(plans), sample=sample)


# --------------------------------------------------------------------------- ranking check

def kendall_tau(first: Sequence[int], second: Sequence[int]) -> float:
    """Rank agreement of two orders of the same items: 1 identical, -1 reversed."""
    position = {item: i for i, item in enumerate(second)}
    pairs = list(itertools.combinations(first, 2))
    if not pairs:
        return 1.0
    concordant = sum(1 if position[a] < position[b] else -1 for a, b in pairs)
    return concordant / len(pairs)


def adjacent_inversions(estimated: Sequence[int], reference: Sequence[int]) -> list[list[int]]:
    """Neighbouring pairs of the estimated order that the reference order reverses."""
    position = {item: i for i, item in enumerate(reference)}
    return [[a, b] for a, b in zip(estimated, estimated[1:]) if position[a] > position[b]]


def simulate_machine(model: ModelSpec, machine: MachineType, candidate: Candidate, fits: FitSet,
                     lengths: LengthSample, rate_per_s: float, seed: int, engine: EngineConfig) -> float:
    """Output tokens/s of all u/t instances of one machine in the request simulation,
    between the 10th and 90th percentile of completions (saturated, without the drain)."""
    latency = fits.latency(model.name, machine.accelerator, candidate.tp)
    instances = [InstanceSpec(name=f"{machine.accelerator}:tp{candidate.tp}#{i}", hardware=machine.accelerator,
                              tp=candidate.tp, latency=latency, kv_capacity_tokens=candidate.kv_capacity_tokens)
                 for i in range(candidate.instances_per_machine)]
    mean_output = mean_output_tokens(lengths)  # identical instances: the guess does not change routing much
    requests = build_requests(lengths, poisson_arrivals_s(len(lengths), rate_per_s, seed), lambda _: mean_output)
    result = simulate(requests, instances, LeastOutstandingRouter(), engine=engine, max_model_len=model.max_model_len)
    return result.window_throughput_tok_s()


def check_ranking(plan: DeploymentPlan, fits: FitSet, population: LengthSample, *, seeds: Sequence[int] = (1, 2, 3),
                  load_factor: float = 2.0, requests_per_slot: float = 4.0, min_requests: int = 300,
                  max_requests: int = 5000) -> list[dict]:
    """For every machine type with two or more feasible degrees: the estimated order, the
    simulated order per seed, Kendall's tau, whether the top choice agrees, and which
    neighbouring pairs the simulation reverses.

    Arrivals come at ``load_factor`` times the largest estimated capacity (every candidate
    saturated), and each seed draws enough requests to fill every batch slot about
    ``requests_per_slot`` times.
    """
    engine = plan.cluster.engine
    mean_tokens = float(np.mean(np.add(population.prompt_tokens, population.output_tokens)))
    mean_output = float(np.mean(population.output_tokens))
    reports = []
    for machine_plan in plan.machines:
        ranked = machine_plan.ranked()
        if len(ranked) < 2:
            continue
        machine = machine_plan.machine
        rate = load_factor * max(c.machine_tok_s or 0.0 for c in ranked) / mean_output
        slots = max(c.instances_per_machine * batch_slots(c.kv_capacity_tokens, mean_tokens, engine) for c in ranked)
        count = int(min(max_requests, max(min_requests, requests_per_slot * slots)))
        simulated: dict[int, dict[int, float]] = {}
        for seed in seeds:
            lengths = sample_lengths(population, count, seed)
            simulated[seed] = {c.tp: simulate_machine(plan.model, machine, c, fits, lengths, rate, seed, engine) for c in ranked}
        estimated_order = [c.tp for c in ranked]
        static_order = [c.tp for c in sorted(ranked, key=lambda c: -(c.static_machine_tok_s or 0.0))]
        mean_sim = {c.tp: float(np.mean([simulated[s][c.tp] for s in seeds])) for c in ranked}
        simulated_order = sorted(mean_sim, key=lambda t: -mean_sim[t])
        orders_by_seed = {s: sorted(simulated[s], key=lambda t: -simulated[s][t]) for s in seeds}
        report = {
            "machine": machine.label,
            "requests_per_seed": count,
            "arrival_rate_per_s": rate,
            "estimated_order": estimated_order,
            "static_estimate_order": static_order,
            "simulated_order": simulated_order,
            "simulated_order_by_seed": {str(s): o for s, o in orders_by_seed.items()},
            "estimated_machine_tok_s": {f"tp{c.tp}": c.machine_tok_s for c in ranked},
            "static_machine_tok_s": {f"tp{c.tp}": c.static_machine_tok_s for c in ranked},
            "simulated_machine_tok_s": {f"tp{t}": mean_sim[t] for t in estimated_order},
            "simulated_machine_tok_s_std": {f"tp{c.tp}": float(np.std([simulated[s][c.tp] for s in seeds])) for c in ranked},
        }
        for name, order in (("estimate", estimated_order), ("static_estimate", static_order)):
            taus = [kendall_tau(order, orders_by_seed[s]) for s in seeds]
            report[f"{name}_kendall_tau_mean"] = float(np.mean(taus))
            report[f"{name}_top_agrees_fraction"] = float(np.mean([order[0] == orders_by_seed[s][0] for s in seeds]))
            report[f"{name}_adjacent_inversions"] = adjacent_inversions(order, simulated_order)
            report[f"{name}_order_agrees"] = order == simulated_order
        reports.append(report)
    return reports
