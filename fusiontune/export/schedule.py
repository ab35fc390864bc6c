"""A plan as a schedule a cycle-level simulator can read (JSON, and a CSV flattening).

One entry per group in execution order (:func:`~fusiontune.sim.execute.group_order`): its
ops and the kernels they compile to (:func:`~fusiontune.sim.execute.compile_group`: folds and
merges), the tensors it reads and writes with their bytes and the groups on the other side,
what it holds on chip at its peak (:func:`~fusiontune.sim.needs.line_buffers`), its weight
matrices with their crossbar tiles, and the analytic traffic, cycles and energy
(:func:`~fusiontune.sim.cost.group_cost`). Every field is documented in
``docs/export.md``; :data:`SCHEDULE_VERSION` changes when a field changes meaning.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import FusiontuneError
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Plan
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.matrices import crossbar_tiles

if TYPE_CHECKING:
    from fusiontune.sim.tiling import Tiling

SCHEDULE_FORMAT = "fusiontune-schedule"
SCHEDULE_VERSION = 3  # 3: tiled singletons (`tiling`)
CSV_SUFFIX = ".csv"
LIST_SEP = ";"  # between the items of a list in a CSV cell

HW_FIELDS = (
    "name", "act_bits", "weight_bits", "cell_bits", "dac_bits", "adc_bits", "crossbar_rows",
    "crossbar_cols", "n_crossbars", "buffer_bytes", "clock_ghz", "weights_resident",
)  # fmt: skip
TRAFFIC_FIELDS = (
    "act_read_bytes", "act_write_bytes", "weight_load_bytes", "reload_bytes", "traffic_bytes",
)  # fmt: skip
CYCLE_FIELDS = ("compute_cycles", "memory_cycles", "cycles")
ENERGY_FIELDS = (
    "dram_pj", "buffer_pj", "cell_pj", "adc_pj", "dac_pj", "digital_pj", "weight_program_pj",
    "energy_pj",
)  # fmt: skip
CSV_COLUMNS = (
    "index", "name", "mode", "pattern", "n_ops", "ops", "kernels", "depends_on", "reads",
    "act_read_bytes", "writes", "act_write_bytes", "line_buffers", "tiling", "stream_bytes",
    "whole_bytes", "accumulator_bytes", "buffer_needed_bytes", "weights", "crossbars",
    "weight_load_bytes", "reload_bytes", "traffic_bytes", "macs", "compute_cycles",
    "memory_cycles", "cycles", "energy_pj", "feasible",
)  # fmt: skip


def plan_schedule(graph: Graph, plan: Plan, hw: HardwareConfig | None = None) -> dict[str, Any]:
    """The schedule of ``plan`` on ``hw`` as a JSON-ready dict (fields: ``docs/export.md``).

    Raises:
        IllegalPlanError: the plan is not a legal plan of ``graph``.
    """
    from fusiontune.planner.legality import check_plan
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.execute import group_order

    check_plan(graph, plan, source=f"plan of '{graph.name}'")
    hw = hw or HardwareConfig()
    order = group_order(graph, plan)
    position = {index: k for k, index in enumerate(order)}
    group_of = plan.group_of()
    producer_group = {t: position[group_of[op.name]] for op in graph.ops for t in op.outputs if t}
    metrics = simulate(graph, plan, hw)
    groups = [
        _group_entry(graph, plan.groups[index], k, hw, producer_group, group_of, position)
        for k, index in enumerate(order)
    ]
    hw_dict = hw.to_dict()
    return {
        "format": SCHEDULE_FORMAT,
        "version": SCHEDULE_VERSION,
        "model": graph.name,
        "graph_hash": graph.structural_hash,
        "plan_hash": plan.hash,
        "hardware": {
            **{k: hw_dict[k] for k in HW_FIELDS},
            "hash": hw.hash,
            "act_bytes": hw.act_bytes,
            "weight_slices": hw.weight_slices,
            "input_slices": hw.input_slices,
        },
        "inputs": [_tensor(graph, t, hw) for t in graph.inputs],
        "outputs": [_tensor(graph, t, hw) for t in graph.outputs],
        "totals": {
            **{k: getattr(metrics, k) for k in (*TRAFFIC_FIELDS, *CYCLE_FIELDS, *ENERGY_FIELDS)},
            "macs": metrics.macs,
            "buffer_needed_bytes": metrics.buffer_needed_bytes,
            "crossbars_needed": metrics.crossbars_needed,
            "feasible": metrics.feasible,
            "lower_bound_bytes": metrics.lower_bound_bytes,
        },
        "groups": groups,
    }


def _tensor(graph: Graph, name: str, hw: HardwareConfig) -> dict[str, Any]:
    t = graph.tensors[name]
    return {"tensor": name, "shape": list(t.shape), "bytes": t.numel * hw.act_bytes}


def _group_entry(
    graph: Graph,
    group: Group,
    k: int,
    hw: HardwareConfig,
    producer_group: dict[str, int],
    group_of: dict[str, int],
    position: dict[int, int],
) -> dict[str, Any]:
    from fusiontune.planner.candidates import group_pattern
    from fusiontune.sim.cost import group_cost
    from fusiontune.sim.execute import compile_group, external_inputs, stored_tensors
    from fusiontune.sim.needs import group_needs, line_buffers
    from fusiontune.sim.tiling import singleton_tiling

    cost = group_cost(graph, group, hw)
    needs = group_needs(graph, group)
    ab = hw.act_bytes
    tiling = singleton_tiling(graph, group, hw)
    tiled = tiling is not None and tiling.feasible
    reads = []
    for t in external_inputs(graph, group):
        entry = _tensor(graph, t, hw)
        entry["from_group"] = producer_group.get(t)  # None: a graph input
        reads.append(entry)
    writes = []
    for t in stored_tensors(graph, group):
        entry = _tensor(graph, t, hw)
        readers = {position[group_of[c]] for c in graph.consumer_map.get(t, ())} - {k}
        entry["to_groups"] = sorted(readers)
        entry["graph_output"] = t in graph.outputs
        writes.append(entry)
    kernels = []
    for node in compile_group(graph, group):
        source = node.op if node.linear is None else node.linear.source_op
        assert source is not None
        p = node.linear
        kind = "op" if p is None or (node.op is not None and len(node.folded) <= 1) else p.kind
        kernels.append(
            {
                "name": node.name,
                "kind": kind,
                "op_type": source.op_type,
                "ops": [*(node.folded or (node.name,)), *(op.name for op in node.epilogue)],
                "banded": node.banded,
            }
        )
    weights = []
    for m in needs.matrices:
        tiles = crossbar_tiles(m, hw)
        weights.append(
            {
                "ops": list(m.ops),
                "rows": m.rows,
                "cols": m.cols,
                "count": m.count,
                "vectors": m.vectors,
                "weight_bytes": hw.weight_bytes(m.n_weights),
                "row_tiles": tiles.row_tiles,
                "col_tiles": tiles.col_tiles,
                "groups_per_tile": tiles.groups_per_tile,
                "crossbars": tiles.crossbars,
            }
        )
    depends = sorted({r["from_group"] for r in reads if r["from_group"] is not None})
    return {
        "index": k,
        "name": f"group{k}",
        "mode": group.mode.value,
        "pattern": group_pattern(graph, group),
        "ops": [
            {"name": op.name, "op_type": op.op_type, "class": op.op_class.value}
            for op in graph.subgraph_ops(group.ops)
        ],
        "kernels": kernels,
        "depends_on": depends,
        "reads": reads,
        "writes": writes,
        "line_buffers": []
        if tiled
        else [
            {"tensor": b.tensor, "rows": b.rows, "bytes": b.elems * ab}
            for b in line_buffers(graph, group)
        ],
        "tiling": _tiling_entry(tiling, ab),
        "buffer": {  # a tiled singleton's tiles stream through the buffer: its peak
            "stream_bytes": cost.buffer_needed_bytes if tiled else needs.stream_elems * ab,
            "whole_bytes": 0 if tiled else needs.whole_elems * ab,
            "accumulator_bytes": 0 if tiled else needs.accumulator_elems * ab,
            "needed_bytes": cost.buffer_needed_bytes,
        },
        "weights": weights,
        "crossbars": cost.crossbars_needed,
        "traffic": {f: getattr(cost, f) for f in TRAFFIC_FIELDS},
        "macs": cost.macs,
        "cycles": {f: getattr(cost, f) for f in CYCLE_FIELDS},
        "energy_pj": {f: getattr(cost, f) for f in ENERGY_FIELDS},
        "feasible": cost.feasible,
        "violations": list(cost.violations),
    }


def _tiling_entry(tiling: Tiling | None, act_bytes: int) -> dict[str, Any] | None:
    """How a group of one op runs tiled through DRAM (``None``: it runs by rows)."""
    if tiling is None:
        return None
    chunks = tiling.chunks
    return {
        "scheme": tiling.scheme.value if tiling.scheme is not None else None,
        "tile": list(tiling.tile),
        "chunks": None
        if chunks is None
        else {"order": list(chunks.order), "j": chunks.j, "t": chunks.t},
        "read_bytes": tiling.read_elems * act_bytes,
        "write_bytes": tiling.write_elems * act_bytes,
        "peak_bytes": tiling.peak_elems * act_bytes,
        "reason": tiling.reason,
    }


def schedule_rows(schedule: dict[str, Any]) -> list[dict[str, Any]]:
    """The CSV flattening: one row per group (columns :data:`CSV_COLUMNS`)."""

    def join(items: list[str]) -> str:
        return LIST_SEP.join(items)

    rows = []
    for g in schedule["groups"]:
        rows.append(
            {
                "index": g["index"],
                "name": g["name"],
                "mode": g["mode"],
                "pattern": g["pattern"],
                "n_ops": len(g["ops"]),
                "ops": join([o["name"] for o in g["ops"]]),
                "kernels": join([f"{k['op_type']}:{'+'.join(k['ops'])}" for k in g["kernels"]]),
                "depends_on": join([str(d) for d in g["depends_on"]]),
                "reads": join([f"{r['tensor']}:{r['bytes']}" for r in g["reads"]]),
                "act_read_bytes": g["traffic"]["act_read_bytes"],
                "writes": join([f"{w['tensor']}:{w['bytes']}" for w in g["writes"]]),
                "act_write_bytes": g["traffic"]["act_write_bytes"],
                "line_buffers": join([f"{b['tensor']}:{b['bytes']}" for b in g["line_buffers"]]),
                "tiling": (g["tiling"] or {}).get("scheme") or "",
                "stream_bytes": g["buffer"]["stream_bytes"],
                "whole_bytes": g["buffer"]["whole_bytes"],
                "accumulator_bytes": g["buffer"]["accumulator_bytes"],
                "buffer_needed_bytes": g["buffer"]["needed_bytes"],
                "weights": join(
                    [
                        f"{'+'.join(w['ops'])}:{w['rows']}x{w['cols']}x{w['count']}:"
                        f"{w['row_tiles']}x{w['col_tiles']}"
                        for w in g["weights"]
                    ]
                ),
                "crossbars": g["crossbars"],
                "weight_load_bytes": g["traffic"]["weight_load_bytes"],
                "reload_bytes": g["traffic"]["reload_bytes"],
                "traffic_bytes": g["traffic"]["traffic_bytes"],
                "macs": g["macs"],
                "compute_cycles": g["cycles"]["compute_cycles"],
                "memory_cycles": g["cycles"]["memory_cycles"],
                "cycles": g["cycles"]["cycles"],
                "energy_pj": g["energy_pj"]["energy_pj"],
                "feasible": g["feasible"],
            }
        )
    return rows


def write_schedule(schedule: dict[str, Any], path: str | Path) -> tuple[Path, Path]:
    """Write the JSON at ``path`` and the CSV next to it (same stem, ``.csv``).

    Raises:
        FusiontuneError: a file cannot be written.
    """
    json_path = Path(path)
    csv_path = json_path.with_suffix(CSV_SUFFIX)
    if csv_path == json_path:
        csv_path = json_path.with_name(json_path.name + CSV_SUFFIX)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(schedule_rows(schedule))
    for target, data in (
        (json_path, json.dumps(schedule, indent=1) + "\n"),
        (csv_path, text.getvalue()),
    ):
        try:
            target.write_text(data)
        except OSError as exc:
            raise FusiontuneError(f"export: cannot write '{target}': {exc.strerror}") from None
    return json_path, csv_path
