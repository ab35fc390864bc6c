"""``fusiontune simulate``: analytic traffic, energy and cycles of one plan of a model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fusiontune.cli._common import (
    add_model_arguments,
    add_model_bits_argument,
    load_graph,
    model_bits_hardware,
)
from fusiontune.errors import ConfigError

BASELINE_PLANS = ("unfused", "tvm_like", "greedy", "optimal")
MAX_OPS_SHOWN = 3  # ops listed per group in the text table
PERCENT = 100.0
PJ_PER_UJ = 1e6
ENERGY_PARTS = (("DRAM", "dram_pj"), ("buffer", "buffer_pj"), ("cells", "cell_pj"),
                ("ADC", "adc_pj"), ("DAC", "dac_pj"), ("digital", "digital_pj"),
                ("programming", "weight_program_pj"))  # fmt: skip
"""Energy breakdown printed after the total: label, Metrics field."""


def register(sub: Any) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser(
        "simulate",
        help="traffic, energy and cycles of a fusion plan on a CIM chip",
        description="Simulate one fusion plan of a model on a CIM hardware config (analytic "
        "model): totals, the per-group table, and the savings against the unfused plan and "
        "the compulsory lower bound. --verify also executes the plan and checks it.",
    )
    add_model_arguments(p)
    p.add_argument("--plan", default="greedy",
                   metavar="unfused|tvm_like|greedy|optimal|PLAN.json",
                   help="a baseline plan, the proven-optimal traffic plan on --hw, or a plan "
                   "JSON file (default greedy: maximal fusion that fits --hw)")  # fmt: skip
    p.add_argument("--hw", "--hardware", dest="hw", default=None, metavar="PRESET|FILE",
                   help="hardware preset name or YAML file (default isaac_reram_flat)")  # fmt: skip
    p.add_argument("--verify", action="store_true",
                   help="execute the plan; compare outputs and byte counts")  # fmt: skip
    p.add_argument("--numerics", choices=("float", "cim"), default="float",
                   help="numerics of --verify (default float)")  # fmt: skip
    add_model_bits_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load model, plan and hardware; print the report. Returns the exit code."""
    from fusiontune.planner.baselines import unfused_plan
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.hardware import load_hardware

    graph = load_graph(args)
    hw = model_bits_hardware(graph, load_hardware(args.hw), args.model_bits)
    plan = _load_plan(graph, args.plan, hw)
    metrics = simulate(graph, plan, hw)
    unfused = simulate(graph, unfused_plan(graph), hw)
    report = _report(graph.name, args.plan, hw.name, plan.hash, metrics, unfused)
    from fusiontune.sim.bounds import attention_bounds

    attention = attention_bounds(graph, hw)  # per fused attention (P5): its IO bound
    if attention:
        report["attention"] = attention
    verified = None
    if args.verify:
        from fusiontune.sim.verify import verify

        verified = verify(graph, plan, hw=hw, numerics=args.numerics)
        report["verify"] = {
            "passed": verified.passed,
            "numerics": args.numerics,
            "max_rel_err": verified.max_rel_err,
            "counted_act_bytes": verified.counted_act_bytes,
            "analytic_act_bytes": verified.analytic_act_bytes,
            "measured_peak_buffer_bytes": verified.measured_peak_bytes,
            "model_peak_buffer_bytes": max(verified.model_peak_bytes, default=0),
            "buffer_ok": verified.buffer_ok,
            "self_compared_ops": list(verified.self_compared_ops),
        }
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(_text(report, metrics))
        if verified is not None:
            print(verified.summary())
    return 0 if verified is None or verified.passed else 1


def _load_plan(graph: Any, spec: str, hw: Any) -> Any:
    from fusiontune.planner.baselines import tvm_like_plan, unfused_plan
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.greedy import greedy_plan

    if spec == "unfused":
        return unfused_plan(graph)
    if spec == "greedy":
        return greedy_plan(graph, hw=hw)
    if spec == "tvm_like":
        return tvm_like_plan(graph)
    if spec == "optimal":
        from fusiontune.search.optimize import optimal_plan

        result = optimal_plan(graph, hw)
        if result.plan is None:
            raise ConfigError(
                f"--plan optimal: no plan of '{graph.name}' fits hardware '{hw.name}' "
                "(every partition has a group over the buffer or the crossbars)"
            )
        return result.plan
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(
            f"--plan '{spec}': not a file; use unfused, tvm_like, greedy, optimal or a plan "
            "JSON file"
        )
    from fusiontune.errors import IllegalPlanError
    from fusiontune.fileio import read_text

    text = read_text(path, IllegalPlanError, "plan file")
    try:
        return Plan.from_json(text, graph, source=spec)
    except IllegalPlanError as exc:
        if _fused_attention(graph):  # a plan made before attention was fused by default
            raise IllegalPlanError(
                f"{exc} (each attention of '{graph.name}' is fused, the default; a plan made "
                "of the unfused graph loads with --no-fuse-attention)"
            ) from None
        raise


def _fused_attention(graph: Any) -> bool:
    from fusiontune.ops import AttentionRole, attention_role

    return any(attention_role(op) is AttentionRole.FUSED for op in graph.ops)


def _saving(value: float, reference: float) -> float:
    return PERCENT * (1.0 - value / reference) if reference else 0.0


def _report(
    model: str, plan_name: str, hw_name: str, plan_hash: str, m: Any, unfused: Any
) -> dict[str, Any]:
    from fusiontune.sim.cost import data_moved

    totals = m.as_dict()
    return {
        "model": model,
        "plan": plan_name,
        "plan_hash": plan_hash,
        "hardware": hw_name,
        "totals": totals,
        "unfused": {k: unfused.as_dict()[k] for k in ("traffic_bytes", "energy_pj", "cycles")},
        "savings_vs_unfused_pct": {
            k: _saving(totals[k], getattr(unfused, k))
            for k in ("traffic_bytes", "act_traffic_bytes", "energy_pj", "cycles")
        },
        "traffic_over_lower_bound": (
            m.traffic_bytes / m.lower_bound_bytes if m.lower_bound_bytes else None
        ),
        "data_moved": data_moved(totals),
        "groups": m.group_rows(),
    }


def _versus(pct: float, amount: str) -> str:
    """A change against the unfused plan, spelled out: ``91.1 % saved (15,983,104 B)`` or
    ``4.0 % more (1.200 uJ)``; never a bare signed percentage."""
    return f"{pct:.1f} % saved ({amount})" if pct >= 0 else f"{-pct:.1f} % more ({amount})"


def _weights_line(moved: dict[str, Any], t: dict[str, Any]) -> str:
    """Weight bytes beside activation bytes: what dominates an LLM's traffic."""
    weights, acts = moved["weight_bytes"], moved["activation_bytes"]
    if not weights:
        return f"weights      {0:>16,} B  (resident in the crossbars); activations {acts:,} B"
    how = f"programmed {t['weight_load_bytes']:,} B"
    if t.get("weight_reload_bytes"):
        how += f" + re-loaded by tiles {t['weight_reload_bytes']:,} B (streamed)"
    return (
        f"weights      {weights:>16,} B  ({how}) = {PERCENT * moved['weight_share']:.1f} % of "
        f"traffic; activations {acts:,} B"
    )


def _text(report: dict[str, Any], m: Any) -> str:
    t = report["totals"]
    s = report["savings_vs_unfused_pct"]
    u = report["unfused"]
    parts = ", ".join(f"{label} {t[k] / PJ_PER_UJ:.3f} uJ" for label, k in ENERGY_PARTS)
    lines = [
        f"model {report['model']}  plan {report['plan']} ({report['plan_hash']}, "
        f"{t['n_groups']} groups)  hardware {report['hardware']} ({t['hw_hash']})",
        f"traffic      {t['traffic_bytes']:>16,} B  (activations read {t['act_read_bytes']:,} B, "
        f"written {t['act_write_bytes']:,} B, weights {t['weight_load_bytes']:,} B"
        + (f", re-read by tiles {t['reload_bytes']:,} B)" if t["reload_bytes"] else ")"),
        _weights_line(report["data_moved"], t),
        f"lower bound  {t['lower_bound_bytes']:>16,} B  (traffic is "
        f"{report['traffic_over_lower_bound']:.3f}x the bound)",
        f"energy       {t['energy_pj'] / PJ_PER_UJ:>16,.3f} uJ ({parts})",
        f"cycles       {t['cycles']:>16,} cycles (compute {t['compute_cycles']:,} cycles, memory "
        f"{t['memory_cycles']:,} cycles)",
        f"on chip      buffer {t['buffer_needed_bytes']:,} B, crossbars {t['crossbars_needed']:,}"
        f"  feasible: {'yes' if t['feasible'] else 'NO'}",
        "vs unfused   traffic "
        + _versus(s["traffic_bytes"], f"{abs(u['traffic_bytes'] - t['traffic_bytes']):,} B")
        + ", energy "
        + _versus(s["energy_pj"], f"{abs(u['energy_pj'] - t['energy_pj']) / PJ_PER_UJ:,.3f} uJ")
        + ", cycles "
        + _versus(s["cycles"], f"{abs(u['cycles'] - t['cycles']):,} cycles"),
    ]
    for v in m.violations:
        lines.append(f"  violation: {v}")
    for a in report.get("attention", []):
        lines.append(
            f"attention    {a['op']}: {a['fused_bytes']:,} B (flash tile {a['tile']}), IO bound "
            f"{a['bound_bytes']:,} B (compulsory {a['compulsory_bytes']:,} B): "
            f"{a['fused_over_bound']:.3f}x the bound"
        )
    lines.append("")
    header = f"{'#':>4} {'mode':<7} {'ops':<44} {'traffic B':>12} {'energy uJ':>11} {'cycles':>12}"
    lines.append(header)
    for i, g in enumerate(m.groups):
        shown = ", ".join(g.ops[:MAX_OPS_SHOWN]) + (" ..." if len(g.ops) > MAX_OPS_SHOWN else "")
        flag = "" if g.feasible else "  INFEASIBLE"
        lines.append(
            f"{i:>4} {g.mode:<7} {shown[:44]:<44} {g.traffic_bytes:>12,} "
            f"{g.energy_pj / PJ_PER_UJ:>11.3f} {g.cycles:>12,}{flag}"
        )
    return "\n".join(lines)
