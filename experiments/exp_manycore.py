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
    balance_replication,
    exact_replication,
    images_per_s,
    latency_cycles,
    no_replication,
    plan_stages,
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
    args = parser.parse_args()
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
