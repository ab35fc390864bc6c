"""Plans of the flat model placed on the 168-core ISAAC (``isaac_168``, docs/cores.md).

Per model (resnet18, resnet50, mobilenet_v2 at their default input) and plan (``unfused``,
``greedy`` with the hardware, ``optimal``: the flat model's exact traffic optimum, which is
also the optimum of ``isaac_168``'s DRAM traffic since its totals are the flat chip's), one run:

- part 1, placement: DRAM bytes, NoC bytes, byte-hops, NoC energy, ``movement_bytes``, the
  largest per-core peak and how many groups overflow a 64 KB core;
- part 2, replication at ISAAC's crossbar budget (16,128): images/s (throughput mode) and
  latency-mode cycles without replication and with PIMCOMP-NN's ``balance`` and ``uniform``
  and the exact solver, the ratios exact / balance and exact / uniform, crossbars used, and
  the NoC byte-hops of the plan placed with the exact replication.

Writes ``results/exp_manycore.csv``, ``exp_manycore_2.csv`` and ``exp_manycore.md``. Usage:
``python experiments/exp_manycore.py [--models M ...] [--time-limit S]``.

``--noc`` (issue 21, NoC in the batch pipeline) instead measures, on ``isaac_reram`` and
``puma_138``, resnet18 and resnet50, the unfused and greedy plans with exact replication, in one
run: images/s of the model before (``simulate_replicated(..., noc=False)``: compute-only stage
times, ports, no links) and after (each stage's time includes its own network port time, the
exact solver minimises it, the pipeline waits for the busiest link), and how many stages are
network-bound: ``results/exp_manycore_noc.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from exp_common import print_rows, write_outputs

from fusiontune.frontend.zoo import build_zoo
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.plan import Plan, PlannerConfig
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.placement import place_plan
from fusiontune.sim.replication import (
    _result,
    balance_replication,
    exact_replication,
    images_per_s,
    latency_cycles,
    no_replication,
    plan_stages,
    simulate_replicated,
    stage_noc,
    uniform_replication,
)

MODELS = ("resnet18", "resnet50", "mobilenet_v2")
PRESET = "isaac_168"


def _plans(name: str, time_limit_s: float) -> list[tuple[str, Plan, str]]:
    graph = build_zoo(name)
    hw = load_hardware(PRESET)
    opt = optimal_plan(graph, hw, "traffic", time_limit_s=time_limit_s)
    proof = "proven" if opt.proven else f"gap {opt.gap:.3g}"
    return [
        ("unfused", unfused_plan(graph), ""),
        ("greedy", greedy_plan(graph, PlannerConfig(), hw), ""),
        ("optimal", opt.plan, proof),
    ]


def run(models: tuple[str, ...], time_limit_s: float) -> tuple[list[dict[str, Any]], ...]:
    hw = load_hardware(PRESET)
    placement_rows, replication_rows = [], []
    for name in models:
        graph = build_zoo(name)
        for label, plan, proof in _plans(name, time_limit_s):
            t0 = time.perf_counter()
            m = simulate(graph, plan, hw)
            placed = place_plan(graph, plan, hw)
            seconds = time.perf_counter() - t0
            over = sum(1 for g in placed.groups if g.violations)
            placement_rows.append(
                {
                    "model": name,
                    "plan": label,
                    "certificate": proof,
                    "groups": len(plan.groups),
                    "dram_bytes": m.traffic_bytes,
                    "noc_bytes": m.noc_bytes,
                    "noc_byte_hops": m.noc_byte_hops,
                    "noc_energy_uj": m.noc_energy_pj / 1e6,
                    "energy_uj": m.energy_pj / 1e6,
                    "movement_bytes": round(m.movement_bytes),
                    "core_peak_max_bytes": max(m.core_peak_buffer_bytes),
                    "groups_over_64k": over,
                    "simulate_s": round(seconds, 3),
                }
            )
            stages = plan_stages(graph, plan, hw)
            reps = {
                r.strategy: r
                for r in (
                    no_replication(stages, hw.n_crossbars),
                    balance_replication(stages, hw.n_crossbars),
                    uniform_replication(stages, hw.n_crossbars),
                    exact_replication(stages, hw.n_crossbars),
                )
            }
            exact = reps["exact"]
            placed_exact = place_plan(graph, plan, hw, exact.as_map(stages))
            row: dict[str, Any] = {"model": name, "plan": label, "stages": len(stages)}
            for key, r in reps.items():
                row[f"img_s_{key}"] = round(images_per_s(r, hw), 1)
            for key, r in reps.items():
                row[f"xbars_{key}"] = r.crossbars
            row["exact_vs_balance"] = round(
                images_per_s(exact, hw) / images_per_s(reps["balance"], hw), 3
            )
            row["exact_vs_uniform"] = round(
                images_per_s(exact, hw) / images_per_s(reps["uniform"], hw), 3
            )
            row["latency_cycles_none"] = round(latency_cycles(stages, reps["none"].copies))
            row["latency_cycles_exact"] = round(latency_cycles(stages, exact.copies))
            row["byte_hops_exact"] = placed_exact.noc_byte_hops
            row["exact_proven"] = exact.proven
            replication_rows.append(row)
    return placement_rows, replication_rows


NOC_PRESETS = ("isaac_reram", "puma_138")
NOC_MODELS = ("resnet18", "resnet50")


def _bound_by(tp: Any) -> str:
    terms = {
        "stage": tp.replication.bottleneck_cycles,
        "dram": tp.dram_cycles,
        "port": tp.port_cycles,
        "link": tp.link_cycles,
    }
    return max(terms, key=lambda k: terms[k])


def noc_run(models: tuple[str, ...], presets: tuple[str, ...]) -> list[dict[str, Any]]:
    """Images/s before and after the NoC enters the batch pipeline (module docstring)."""
    rows = []
    for preset in presets:
        hw = load_hardware(preset)
        for name in models:
            graph = build_zoo(name)
            plans = (
                ("unfused", unfused_plan(graph)),
                ("greedy", greedy_plan(graph, PlannerConfig(), hw)),
            )
            for label, plan in plans:
                t0 = time.perf_counter()
                _, before = simulate_replicated(graph, plan, hw, "exact", noc=False)
                t1 = time.perf_counter()
                _, after = simulate_replicated(graph, plan, hw, "exact", noc=True)
                t2 = time.perf_counter()
                stages = plan_stages(graph, plan, hw)
                net = stage_noc(graph, plan, hw, stages)
                blind = _result(
                    "exact", stages, before.replication.copies, hw.n_crossbars, False, net
                )
                rep = after.replication
                rows.append(
                    {
                        "chip": preset,
                        "model": name,
                        "plan": label,
                        "groups": len(plan.groups),
                        "stages": len(stages),
                        "img_s_before": round(before.images_per_s, 1),
                        "img_s_after": round(after.images_per_s, 1),
                        "after_vs_before": round(after.images_per_s / before.images_per_s, 4),
                        "bound_before": _bound_by(before),
                        "bound_after": _bound_by(after),
                        "stage_cycles_before": round(before.replication.bottleneck_cycles),
                        "blind_stage_cycles_with_noc": round(blind.bottleneck_cycles),
                        "stage_cycles_after": round(rep.bottleneck_cycles),
                        "port_cycles_after": round(after.port_cycles),
                        "link_cycles_after": round(after.link_cycles),
                        "noc_bound_stages_blind": blind.noc_bound_stages,
                        "noc_bound_stages_after": rep.noc_bound_stages,
                        "copies_before": sum(before.replication.copies),
                        "copies_after": sum(rep.copies),
                        "kept": "network-aware" if rep.proven else "network-blind",
                        "seconds_before": round(t1 - t0, 2),
                        "seconds_after": round(t2 - t1, 2),
                    }
                )
    return rows


NOC_NOTES = (
    "before: `simulate_replicated(..., noc=False)`, the model of the previous results: stage "
    "time c_i / r_i, exact replication on it, pipeline = max(slowest stage, DRAM time, busiest "
    "core port). after (the default): stage time max(c_i / r_i, n_i(r_i)), n_i = the busiest "
    "port of the stage's own transfers (input scatter, partial sums, output gather) at "
    "`noc_link_bytes_per_cycle`; exact replication minimises the slowest such stage (proven); "
    "pipeline = max(slowest stage, DRAM, busiest port, busiest link over the plan's per-image "
    "link bytes). When the network-blind exact copies give fewer pipeline cycles under the "
    "after model they are kept (`kept` network-blind; not proven for the stage term).",
    "blind_stage_cycles_with_noc / noc_bound_stages_blind: the before copies priced with the "
    "stages' network times (how many of their stages the network slows).",
    "Same run, same plans; the greedy plan is the hardware-aware greedy of each chip. 224x224.",
)

NOTES = (
    "Chip: `isaac_168` = `isaac_reram_flat` as 168 cores (96 crossbars, 64 KiB eDRAM each) on a "
    "7 x 6 concentrated mesh of 4 cores per router; NoC 0.081 pJ/bit/hop (Accelergy "
    "`isaac_router`). DRAM bytes and `energy_pj` are the flat model's; the NoC energy is beside "
    "them (docs/cores.md).",
    "`movement_bytes` = DRAM bytes + byte-hops x 0.081 / 3.9 (HBM2): one DRAM byte costs as "
    "much as about 48 byte-hops.",
    "Per-core peaks are the group model's peak split over the cores that read each tensor "
    "(`place_plan`, default `spread` packing: every LINEAR stage starts on a fresh core). "
    'Packed densely (`policy="dense"`) the stem and the first blocks shared core 0 and the '
    "one-group plans overflowed there (resnet18 75,040 B, resnet50 135,968 B); spread, no "
    "core is above 64 KiB. The exact optimizer does not yet see per-core buffers: its "
    "optimum is the flat model's and is checked here by `simulate`.",
    "Replication (throughput mode: images/s = 1 / slowest LINEAR stage; latency mode: slowest "
    "stage per group, summed): `balance` and `uniform` are PIMCOMP-NN's "
    "(`backend/WeightReplication.cpp`: FC layers never copied, balance stops at half the "
    "crossbars, uniform's factor divided by 1.2); `exact` is the proven least bottleneck "
    "(`sim/replication.py`). Stage time is fractional (c_i / r_i), the images/s an upper "
    "bound by at most one vector per copy.",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument(
        "--noc", action="store_true", help="NoC in the batch pipeline, before/after"
    )
    args = parser.parse_args()
    if args.noc:
        models = tuple(args.models) if args.models != list(MODELS) else NOC_MODELS
        rows = noc_run(models, NOC_PRESETS)
        print_rows("noc", rows)
        write_outputs(
            "manycore_noc",
            "NoC time in the batch pipeline: images/s before and after (exact replication)",
            [("isaac_reram and puma_138, 224x224", rows)],
            NOC_NOTES,
        )
        return
    placement, replication = run(tuple(args.models), args.time_limit)
    print_rows("placement", placement)
    print_rows("replication", replication)
    write_outputs(
        "manycore",
        "Flat-model plans on the 168-core ISAAC: placement, NoC bytes, replication",
        [("Placement on isaac_168", placement), ("Replication at 16,128 crossbars", replication)],
        NOTES,
    )


if __name__ == "__main__":
    main()
