"""The main job's headline (``summary.json`` ``chip`` and ``search_moved``; printed by
``fusiontune search``): what the best plan, trial 0 and the baselines move and how fast they
run on the chip, the bounds no plan passes, and whether the search improved on trial 0 — with
the measured reason when it did not.

Columns (:data:`CHIP_COLUMNS`, every one a field of a trial record): DRAM bytes
(``traffic_bytes``), NoC byte-hops, the group model's energy and the network's (reported beside
it), ``movement_bytes``, and the batch pipeline with the search's replication (images/s, cycles
per image, latency, weight copies).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fusiontune.search.problem import Problem
from fusiontune.search.records import TrialRecord
from fusiontune.search.space import ADDITIVE_OBJECTIVES

if TYPE_CHECKING:
    from fusiontune.sim.hardware import HardwareConfig

CHIP_COLUMNS = (
    "traffic_bytes",
    "noc_byte_hops",
    "energy_pj",
    "noc_energy_pj",
    "movement_bytes",
    "images_per_s",
    "pipeline_cycles",
    "latency_cycles",
    "replication_copies",
)
"""What each headline row shows (``traffic_bytes`` is DRAM bytes, docs/cores.md)."""

CHIP_ROWS = ("best", "trial_0", "greedy", "unfused", "oracle")
"""Rows of the headline, in print order (the exact oracle's plan when it ran)."""

SAME_REL = 1e-9
"""Two objective values closer than this (relative) are the same (float sums of a plan)."""


def chip_rows(
    best: TrialRecord, trial_0: TrialRecord | None, base: Mapping[str, TrialRecord]
) -> dict[str, dict[str, Any]]:
    """The headline rows: :data:`CHIP_COLUMNS` of the best trial, trial 0 (when it is not the
    best) and the baselines (``trial``: the row's trial number, -1 for a baseline)."""
    records: dict[str, TrialRecord | None] = {"best": best}
    if trial_0 is not None and trial_0.trial != best.trial:
        records["trial_0"] = trial_0
    records.update({name: base.get(name) for name in CHIP_ROWS[2:]})
    rows = {}
    for name, r in records.items():
        if r is None or r.state != "COMPLETE":
            continue
        rows[name] = {"trial": r.trial, **{c: r.metrics.get(c) for c in CHIP_COLUMNS}}
    return rows


def throughput_bound(problem: Problem, hw: HardwareConfig, dram_bytes: int) -> dict[str, Any]:
    """The most images/s any plan reaches on ``hw`` in the batch pipeline, when it is proven.

    Every plan without a ``merge`` group has the same LINEAR stages (the graph's LINEAR ops:
    fusion does not change their matrices or vectors), so the exact replication of those
    stages (proven, :func:`~fusiontune.sim.replication.exact_replication`) is the least
    slowest stage of every such plan under any replication; no plan moves fewer DRAM bytes
    than ``dram_bytes`` (a lower bound). The network ports depend on the plan and its copies
    and are left out, so the bound is valid but not tight when a port is the bottleneck.
    With merge candidates (a merged matrix is another stage) or weights loaded per inference,
    no bound is claimed (``proven`` False, with the reason).
    """
    from fusiontune.planner.baselines import unfused_plan
    from fusiontune.sim.replication import exact_replication, plan_stages, throughput_of

    if problem.merge_keys:
        return {"proven": False, "reason": "merge groups change the stages"}
    if not hw.weights_resident:
        return {"proven": False, "reason": "weights are loaded per inference: no batch pipeline"}
    stages = plan_stages(problem.graph, unfused_plan(problem.graph), hw)
    best = throughput_of(stages, exact_replication(stages, hw.n_crossbars), hw, dram_bytes)
    return {
        "proven": True,
        "images_per_s": best.images_per_s,
        "pipeline_cycles": best.pipeline_cycles,
        "stage_cycles": best.replication.bottleneck_cycles,
        "dram_cycles": best.dram_cycles,
    }


def chip_bounds(
    problem: Problem, hw: HardwareConfig, lower_bounds: Mapping[str, Any]
) -> dict[str, Any]:
    """The bounds row: the least DRAM bytes (the larger of the compulsory and capacity
    bounds) and the most images/s (:func:`throughput_bound`) of any plan on ``hw``."""
    dram = max(
        int(lower_bounds.get("compulsory_bytes", 0)), int(lower_bounds.get("capacity_bytes", 0))
    )
    return {"traffic_bytes": dram, "throughput": throughput_bound(problem, hw, dram)}


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SAME_REL, abs_tol=0.0)


def search_moved(
    problem: Problem,
    records: Sequence[TrialRecord],
    best: TrialRecord,
    oracle_info: Mapping[str, Any],
    bounds: Mapping[str, Any],
) -> dict[str, Any]:
    """Did the search improve on trial 0? ``best_over_trial_0`` per objective value; when it
    did not, ``reason`` says why with the numbers: trial 0 equals a proven optimum or bound,
    or (no bound reached) that no trial found a lower value and how far trial 0 is from the
    bound that is known."""
    trial_0 = next((r for r in records if r.trial == 0), None)
    out: dict[str, Any] = {"n_trials": len(records)}
    if trial_0 is None or trial_0.state != "COMPLETE" or not trial_0.values:
        out.update(moved=best.trial != 0, reason="trial 0 did not complete")
        return out
    ratios = [b / a if a else 1.0 for a, b in zip(trial_0.values, best.values)]
    out["best_over_trial_0"] = ratios
    feasible_0 = trial_0.feasible and all(v <= 0 for v in trial_0.constraints.values())
    moved = best.trial != trial_0.trial and (
        not feasible_0 or not all(_same(a, b) for a, b in zip(trial_0.values, best.values))
    )
    out["moved"] = moved
    if moved:
        return out
    out["reason"] = _why_not(problem, trial_0, oracle_info, bounds, records)
    return out


def _why_not(
    problem: Problem,
    trial_0: TrialRecord,
    oracle_info: Mapping[str, Any],
    bounds: Mapping[str, Any],
    records: Sequence[TrialRecord],
) -> str:
    """Why no trial beat trial 0, from the measured numbers."""
    n_trials = len(records)
    objective = problem.space.objective
    value = trial_0.values[0]
    if problem.space.n_objectives > 1:
        return f"no trial of {n_trials} dominates trial 0 on its first objective"
    dram = bounds.get("traffic_bytes")
    if objective == "traffic" and dram and _same(value, float(dram)):
        return f"trial 0 equals the proven lower bound ({int(value):,} DRAM bytes)"
    optimum = oracle_info.get("optimum")
    if (
        objective in ADDITIVE_OBJECTIVES
        and not problem.space.knobs
        and oracle_info.get("oracle_proven")
        and optimum is not None
        and _same(value, float(optimum))
    ):
        return f"trial 0 equals the proven optimum ({objective} {value:.6g}, exact oracle)"
    tp = bounds.get("throughput") or {}
    if objective == "throughput" and tp.get("proven") and _same(value, tp["pipeline_cycles"]):
        port = trial_0.metrics.get("port_cycles", 0.0)
        return (
            f"trial 0 equals the proven bound of every plan: {value:.6g} cycles per image "
            f"({tp['images_per_s']:.6g} images/s); fusion does not change the LINEAR stages "
            f"(no merge candidates), exact replication is proven, and neither the DRAM time "
            f"({tp['dram_cycles']:.6g} cycles) nor trial 0's busiest network port "
            f"({port:.6g} cycles) exceeds the slowest stage"
        )
    if objective == "movement" and dram:
        return _why_not_movement(problem, trial_0, records, value, int(dram))
    return f"no trial of {n_trials} found a lower {objective} than trial 0 ({value:.6g})"


def _why_not_movement(
    problem: Problem,
    trial_0: TrialRecord,
    records: Sequence[TrialRecord],
    value: float,
    dram: int,
) -> str:
    """Movement: not proven (no lower bound on NoC byte-hops); the measured trade of the trial
    that moved the fewest NoC byte-hops: the DRAM bytes it added, at their energy ratio."""
    hw = problem.base_hw
    text = (
        f"no trial of {len(records)} moved less than trial 0 ({value:.6g} B); not proven (the "
        f"only lower bound is the DRAM bound, {dram:,} B; trial 0 moves "
        f"{trial_0.metrics.get('traffic_bytes', 0):,} DRAM bytes)"
    )
    hops_0 = trial_0.metrics.get("noc_byte_hops", 0)
    done = [r for r in records if r.state == "COMPLETE" and "noc_byte_hops" in r.metrics]
    fewest = min(done, key=lambda r: (r.metrics["noc_byte_hops"], r.trial), default=None)
    if fewest is None or fewest.metrics["noc_byte_hops"] >= hops_0 or not hw.noc_pj_per_bit_hop:
        return text
    saved = hops_0 - fewest.metrics["noc_byte_hops"]
    extra = fewest.metrics.get("traffic_bytes", 0) - trial_0.metrics.get("traffic_bytes", 0)
    ratio = hw.dram_pj_per_bit / hw.noc_pj_per_bit_hop
    return (
        f"{text}; the trial with the fewest NoC byte-hops (trial {fewest.trial}) saves "
        f"{saved:,} byte-hops but moves {extra:,} more DRAM bytes, each worth {ratio:.3g} "
        "byte-hops of energy"
    )


__all__ = [
    "CHIP_COLUMNS",
    "CHIP_ROWS",
    "chip_bounds",
    "chip_rows",
    "search_moved",
    "throughput_bound",
]
