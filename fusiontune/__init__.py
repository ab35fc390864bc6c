"""fusiontune: operator-fusion plans that move the least data on compute-in-memory hardware.

The public API is re-exported here; implementation modules are private and may move.
Names are imported lazily so that ``import fusiontune`` stays fast and does not start Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # errors
    "FusiontuneError": "fusiontune.errors",
    "ModelLoadError": "fusiontune.errors",
    "GraphLintError": "fusiontune.errors",
    "ShapeError": "fusiontune.errors",
    "IllegalPlanError": "fusiontune.errors",
    "ConfigError": "fusiontune.errors",
    "StorageError": "fusiontune.errors",
    "CapacityError": "fusiontune.errors",
    "ResourceLimitError": "fusiontune.errors",
    "memory_limit": "fusiontune.limits",
    "set_memory_limit": "fusiontune.limits",
    # IR
    "Tensor": "fusiontune.ir.graph",
    "Op": "fusiontune.ir.graph",
    "Graph": "fusiontune.ir.graph",
    "OpClass": "fusiontune.ir.opclass",
    "GraphBuilder": "fusiontune.ir.builder",
    # front ends (import)
    "load_model": "fusiontune.frontend.loader",
    "load_onnx": "fusiontune.frontend.onnx_import",
    "load_onnx_with_plan": "fusiontune.frontend.onnx_import",
    "zoo_models": "fusiontune.frontend.zoo",
    "reference_run": "fusiontune.reference",
    # export
    "to_onnx": "fusiontune.export.onnx_export",
    "export_plan": "fusiontune.export.plan_export",
    "plan_to_onnx": "fusiontune.export.plan_export",
    "ExportSummary": "fusiontune.export.plan_export",
    "plan_schedule": "fusiontune.export.schedule",
    # planner
    "Plan": "fusiontune.planner.plan",
    "Group": "fusiontune.planner.plan",
    "Mode": "fusiontune.planner.plan",
    "PlannerConfig": "fusiontune.planner.plan",
    "candidate_edges": "fusiontune.planner.candidates",
    "candidate_groups": "fusiontune.planner.candidates",
    "check_plan": "fusiontune.planner.legality",
    "enumerate_plans": "fusiontune.planner.enumerate",
    "count_plans": "fusiontune.planner.enumerate",
    "unfused_plan": "fusiontune.planner.baselines",
    "greedy_plan": "fusiontune.sim.greedy",
    "random_plan": "fusiontune.planner.baselines",
    "tvm_like_plan": "fusiontune.planner.baselines",
    "plan_from_edges": "fusiontune.planner.baselines",
    "explain": "fusiontune.planner.explain",
    # simulator
    "HardwareConfig": "fusiontune.sim.hardware",
    "load_hardware": "fusiontune.sim.hardware",
    "at_model_bits": "fusiontune.sim.model_bits",
    "model_bits": "fusiontune.sim.model_bits",
    "ModelBits": "fusiontune.sim.model_bits",
    "Metrics": "fusiontune.sim.cost",
    "simulate": "fusiontune.sim.cost",
    "execute": "fusiontune.sim.execute",
    "verify": "fusiontune.sim.verify",
    "lower_bound": "fusiontune.sim.cost",
    "capacity_bound": "fusiontune.sim.bounds",
    "attention_bounds": "fusiontune.sim.bounds",
    "fuse_attention": "fusiontune.planner.attention",
    "find_attention": "fusiontune.planner.attention",
    "chip_area_mm2": "fusiontune.sim.area",
    "area_breakdown": "fusiontune.sim.area",
    "place_plan": "fusiontune.sim.placement",
    "PlacedPlan": "fusiontune.sim.placement",
    "plan_stages": "fusiontune.sim.replication",
    "exact_replication": "fusiontune.sim.replication",
    "balance_replication": "fusiontune.sim.replication",
    "uniform_replication": "fusiontune.sim.replication",
    "simulate_replicated": "fusiontune.sim.replication",
    "plan_throughput": "fusiontune.sim.replication",
    # search
    "optimal_plan": "fusiontune.search.optimize",
    "OptimalPlan": "fusiontune.search.optimize",
    "search": "fusiontune.search.api",
    "SearchResult": "fusiontune.search.results",
    "load_results": "fusiontune.search.results",
    "read_parquet": "fusiontune.search.results",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fusiontune' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
