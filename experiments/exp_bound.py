"""How tight the capacity-aware lower bound is, before and after a change, and where its gap is.

Per zoo model (default input size) x hardware preset, and for resnet18 on ``isaac_reram_flat``
with ``buffer_bytes`` from 1 KiB to 16 MiB (powers of 2), all in one run:

- ``optimum_bytes``: the exact traffic optimum (``optimal_plan``, proven unless noted);
- ``baseline_bytes``: ``capacity_bound`` as a git revision had it (``--baseline-rev``,
  default: where this branch left ``main``), loaded from that revision's source;
- ``bound_bytes``: ``capacity_bound`` of this tree;
- ``hull_exact_bytes`` (a diagnostic, *not* a bound): this tree's bound with its capacity
  test replaced by the measured peak of the hull itself (a hull whose one-row replay
  overflows the buffer is judged impossible). No monotone capacity test can say
  "impossible" more often, up to the peak's non-monotonicity (a few %: a superset of an
  overflowing hull may fit), so this is about the most a better capacity test could give
  the bound's present structure (per-tensor terms plus one longest path); the rest of the
  gap lies in that structure.

The optimizer's A* bound is its own (per ideal); a *time-limited* traffic search also
certifies its plan against ``capacity_bound`` (computed first, inside the limit). Part
``optimizer``: the 100-block bottleneck ResNet ("resnet302", 1,015 ops) on ``isaac_ddr`` and
``isaac_hbm`` at a 60 s limit, with that certificate and without it (the bound replaced by 0:
the search as it was), same run: value, certified lower bound, gap, wall seconds.

Writes ``results/exp_bound.csv`` (zoo), ``exp_bound_2.csv`` (buffer sweep),
``exp_bound_3.csv`` (optimizer) and ``exp_bound.md``. Usage: ``python
experiments/exp_bound.py [--baseline-rev REV] [--models M ...] [--presets P ...]
[--no-optimizer]``.
"""

from __future__ import annotations

import argparse
import subprocess
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from exp_common import BYTES_PER_KIB, print_rows, write_outputs

from fusiontune.frontend.zoo import ZOO, build_zoo, zoo_models
from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits, graph_index
from fusiontune.planner.legality import check_group
from fusiontune.planner.plan import Group, Mode
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim import bounds
from fusiontune.sim.capacity import group_peak
from fusiontune.sim.groupmodel import GroupModel
from fusiontune.sim.hardware import HardwareConfig, load_hardware, preset_names

REPO = Path(__file__).resolve().parents[1]
SWEEP_MODEL = "resnet18"
SWEEP_PRESET = "isaac_reram_flat"
SWEEP_BYTES = tuple(BYTES_PER_KIB << k for k in range(15))  # 1 KiB .. 16 MiB
Bound = Callable[[Graph, HardwareConfig], int]


def baseline_bound(rev: str) -> Bound:
    """``capacity_bound`` as revision ``rev`` of ``fusiontune/sim/bounds.py`` defines it."""
    source = subprocess.run(
        ["git", "show", f"{rev}:fusiontune/sim/bounds.py"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    module = types.ModuleType("baseline_bounds")
    exec(compile(source, f"{rev}:fusiontune/sim/bounds.py", "exec"), module.__dict__)
    fn: Bound = module.capacity_bound
    return fn


def default_rev() -> str:
    """The commit where this branch left ``main`` (``HEAD`` without a ``main`` branch)."""
    out = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip()[:12] if out.returncode == 0 else "HEAD"


def hull_exact_bound(graph: Graph, hw: HardwareConfig) -> int:
    """This tree's bound with the hull's measured peak as its capacity test (a diagnostic)."""
    judged = bounds._possible

    def possible(
        model: GroupModel, ix: object, members: int, opaque: int, cache: dict[int, bool]
    ) -> bool:
        hit = cache.get(members)
        if hit is not None:
            return hit
        ok = judged(model, ix, members, opaque, {})
        if ok:
            hull = members | graph_index(model.graph).between(members, tuple(bits(members)))
            names = tuple(model.st.graph_names[i] for i in bits(hull))
            if len(names) > 1 and not check_group(graph, names, Mode.STREAM):
                limit = hw.buffer_bytes // hw.act_bytes
                ok = group_peak(graph, Group(names, Mode.STREAM), limit).elems <= limit
        cache[members] = ok
        return ok

    bounds._possible = possible  # type: ignore[assignment]
    try:
        return bounds.capacity_bound(graph, hw)
    finally:
        bounds._possible = judged  # type: ignore[assignment]


def _ratio(value: int | None, bound: int) -> float | None:
    return None if value is None or not bound else round(value / bound, 4)


def case_row(graph: Graph, hw: HardwareConfig, baseline: Bound) -> dict[str, Any]:
    """Optimum, both bounds, the diagnostic and their ratios for one graph on one chip."""
    opt = optimal_plan(graph, hw, "traffic")
    value = None if opt.value is None else int(opt.value)
    before = baseline(graph, hw)
    start = time.perf_counter()
    after = bounds.capacity_bound(graph, hw)
    bound_s = time.perf_counter() - start
    exact = hull_exact_bound(graph, hw)
    return {
        "status": opt.status,
        "proven": opt.proven,
        "optimum_bytes": value,
        "baseline_bytes": before,
        "bound_bytes": after,
        "hull_exact_bytes": exact,
        "optimum_over_baseline": _ratio(value, before),
        "optimum_over_bound": _ratio(value, after),
        "optimum_over_hull_exact": _ratio(value, exact),
        "bound_s": round(bound_s, 3),
    }


def zoo_rows(baseline: Bound, models: Sequence[str], presets: Sequence[str]) -> list[dict]:
    rows = []
    for name in models:
        graph = build_zoo(name)
        for preset in presets:
            row = {"model": name, "input_size": ZOO[name].default_input_size, "preset": preset}
            row.update(case_row(graph, load_hardware(preset), baseline))
            print(row, flush=True)
            rows.append(row)
    return rows


def sweep_rows(baseline: Bound) -> list[dict[str, Any]]:
    graph, base = build_zoo(SWEEP_MODEL), load_hardware(SWEEP_PRESET)
    rows = []
    for size in SWEEP_BYTES:
        row: dict[str, Any] = {"buffer_bytes": size}
        row.update(case_row(graph, base.replace(buffer_bytes=size), baseline))
        print(row, flush=True)
        rows.append(row)
    return rows


OPTIMIZER_PRESETS = ("isaac_ddr", "isaac_hbm")
OPTIMIZER_LIMIT_S = 60.0


def optimizer_rows() -> list[dict[str, Any]]:
    """Time-limited resnet302 with and without the capacity certificate (same run)."""
    from bench_optimizer import DEEP_RESNET_BLOCKS, deep_resnet

    graph = deep_resnet(DEEP_RESNET_BLOCKS, "resnet302")
    rows = []
    for preset in OPTIMIZER_PRESETS:
        hw = load_hardware(preset)
        for certificate in (False, True):
            real = bounds.capacity_bound
            if not certificate:
                bounds.capacity_bound = lambda graph, hw=None: 0  # type: ignore[assignment]
            try:
                start = time.perf_counter()
                opt = optimal_plan(graph, hw, "traffic", OPTIMIZER_LIMIT_S)
                wall = time.perf_counter() - start
            finally:
                bounds.capacity_bound = real  # type: ignore[assignment]
            row = {
                "model": "resnet302",
                "preset": preset,
                "capacity_certificate": certificate,
                "status": opt.status,
                "value_bytes": None if opt.value is None else int(opt.value),
                "lower_bound_bytes": int(opt.lower_bound),
                "gap": round(opt.gap, 6),
                "wall_s": round(wall, 1),
            }
            print(row, flush=True)
            rows.append(row)
    return rows


def _worst(rows: Sequence[dict[str, Any]], key: str) -> str:
    values = [(r[key], r) for r in rows if r.get(key) is not None]
    if not values:
        return "n/a"
    value, row = max(values, key=lambda v: v[0])
    where = row.get("model", SWEEP_MODEL) + " " + str(row.get("preset", row.get("buffer_bytes")))
    return f"{value:.3f}x ({where})"


def notes(rev: str, zoo: list[dict[str, Any]], sweep: list[dict[str, Any]]) -> list[str]:
    changed = [r for r in zoo + sweep if r["bound_bytes"] != r["baseline_bytes"]]
    lower = [r for r in zoo + sweep if r["bound_bytes"] < r["baseline_bytes"]]
    return [
        f"baseline: capacity_bound at revision {rev}; bound: this tree's. Every row: "
        "baseline <= bound <= optimum (the experiment asserts it).",
        "What changed: (1) a merge the legality rules refuse for a hull (a nonlinearity "
        "or batch statistics between two of its LINEAR ops) rules out the merge, so their "
        "crossbars add up and a hull that overflows them cannot be one group (FC-Relu-FC, "
        "the FFN intermediate of bert_block, the VGG classifier head); (2) every OPAQUE "
        "singleton's re-reads beyond one read of each input (a fused attention's K and V "
        "once per Q tile) are charged, since every plan pays them.",
        f"the bound changed on {len(changed)} of {len(zoo) + len(sweep)} rows and is lower "
        f"than the baseline on {len(lower)}.",
        "worst optimum / bound, zoo: before "
        + _worst(zoo, "optimum_over_baseline")
        + ", after "
        + _worst(zoo, "optimum_over_bound")
        + "; with the hull's measured peak "
        "as the capacity test: " + _worst(zoo, "optimum_over_hull_exact") + ".",
        "worst optimum / bound, resnet18 buffer sweep: before "
        + _worst(sweep, "optimum_over_baseline")
        + ", after "
        + _worst(sweep, "optimum_over_bound")
        + "; hull-exact: "
        + _worst(sweep, "optimum_over_hull_exact")
        + ".",
        "hull_exact_bytes is a diagnostic, not a bound: the bound's structure with a perfect "
        "capacity test (module docstring). Where optimum / hull_exact stays large, no better "
        "capacity test closes the gap; the per-tensor and single-path structure does not see "
        "it.",
        "Optimizer: a time-limited traffic search now computes capacity_bound first (inside "
        "its limit) and certifies its plan against it; without a limit nothing changes (the "
        "proven runs above are untouched).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--presets", nargs="*", default=None)
    parser.add_argument("--no-optimizer", action="store_true")
    args = parser.parse_args()
    rev = args.baseline_rev or default_rev()
    baseline = baseline_bound(rev)
    zoo = zoo_rows(baseline, args.models or zoo_models(), args.presets or preset_names())
    sweep = sweep_rows(baseline)
    solver = [] if args.no_optimizer else optimizer_rows()
    for r in zoo + sweep:
        if r["optimum_bytes"] is not None:
            assert r["baseline_bytes"] <= r["bound_bytes"] <= r["optimum_bytes"], r
    print_rows("zoo", zoo)
    print_rows("buffer sweep", sweep)
    for path in write_outputs(
        "bound",
        "Capacity-aware lower bound: before and after, against the exact optimum",
        [
            ("Every zoo model x preset (default input sizes)", zoo),
            (f"{SWEEP_MODEL} on {SWEEP_PRESET}, buffer sweep", sweep),
            (
                f"Time-limited optimizer ({OPTIMIZER_LIMIT_S:g} s), with and without the "
                "capacity certificate",
                solver,
            ),
        ],
        notes(rev, zoo, sweep),
    ):
        print("wrote", path)


if __name__ == "__main__":
    main()
