"""Execute a plan: every group runs as one fused kernel; only boundary tensors are stored.

Pipeline of one group (:func:`~fusiontune.sim.structure.compile_group` makes the nodes,
then :class:`~fusiontune.sim.runner.GroupRunner` runs them):

1. **merge** (mode ``merge``, DESIGN §4 P3): the chain from the group's first LINEAR op to
   its last becomes one matrix ``W = W1·W2``, ``b = b1·W2 + b2``; AFFINE ops in between fold
   in. The merge takes every op in the chain at its linear face: a batch-statistics BN with
   its running statistics, an ELEMWISE op as the identity. That is exactly the mistake the
   planner refuses (rules 2 and 3); only ``check=False`` reaches it, and ``verify`` shows it.
2. **fold**: an AFFINE op whose input is a LINEAR output read by nothing else folds into that
   op's weights and bias (Conv→BN: ``W' = W·γ/√(σ²+ε)``, ``b' = (b−μ)·γ/√(σ²+ε) + β``).
3. **run**: ops whose output is NCHW and row-local (Conv, Max/AveragePool, AFFINE, ELEMWISE,
   BINARY, and the upsampling ConvTranspose and Resize by their row spans) run by bands of
   output rows through line buffers: a band pulls the rows it needs (with halos) from its
   producers, which compute only rows they have not computed yet and drop rows no consumer
   needs any more. Conv+Pool (P2) and ``stream`` groups (P4) therefore
   never hold a full intermediate. Other ops (Gemm chains, STATS two-pass ops, global pools,
   layout) run on whole local arrays. Nothing inside a group touches the store.

The :class:`_Store` is the only way tensors cross groups; its byte counters follow
DEVELOPERS.md "Activation traffic" and must equal ``simulate(...)``'s activation traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fusiontune.errors import CapacityError, FusiontuneError, IllegalPlanError, closest
from fusiontune.ir.graph import Graph
from fusiontune.limits import check_graph
from fusiontune.ops import has_fused_kernel
from fusiontune.ops.linear import MatmulFn, matmul_float
from fusiontune.planner.legality import check_plan
from fusiontune.planner.plan import Group, Plan
from fusiontune.sim.cim import CimNumerics, cim_matmul_fn
from fusiontune.sim.cores_run import ManyCore
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.runner import Dram, GroupRunner, GroupStats
from fusiontune.sim.structure import (  # re-exported: the executor's compiled groups
    Node,
    compile_group,
    external_inputs,
    group_order,
    group_structure,
    stored_tensors,
)
from fusiontune.sim.tiled_run import run_tiled
from fusiontune.sim.tiling import acc_units, singleton_tiling

__all__ = [
    "BAND_ELEMS_TARGET",
    "NUMERICS",
    "Execution",
    "ExecutionInputError",
    "Node",
    "compile_group",
    "execute",
    "external_inputs",
    "group_order",
    "group_structure",
    "stored_tensors",
]

BAND_ELEMS_TARGET = 65536  # elements per band of each tensor (halved until a group fits the buffer)
NUMERICS = ("float", "cim")


class ExecutionInputError(FusiontuneError):
    """Inputs given to :func:`execute` do not match the graph's inputs."""


@dataclass(frozen=True)
class Execution:
    """What running a plan produced, moved and held.

    Attributes:
        outputs: graph output name -> array.
        dram_read_bytes: bytes the DMA fetched from DRAM, all groups (graph inputs included).
        dram_write_bytes: bytes the DMA wrote to DRAM, all groups (graph outputs included).
        group_read_bytes: per group (plan order), bytes fetched.
        group_write_bytes: per group (plan order), bytes written.
        group_peak_buffer_bytes: per group, in execution order, the most bytes on chip at once.
        group_band_rows: per group, in execution order, the rows per band it ran with
            (0: a singleton that ran tiled through DRAM, ``sim/tiling.py``).
        numerics: ``"float"`` or ``"cim"``.
        peak_band_rows: for each tensor on chip, the most rows (along its row axis) held at
            once; below the tensor's height when it never existed whole.
        reference_kernel_ops: ops that ran on their own reference kernel (no distinct fused
            kernel, not folded or merged into weights): compared with the reference, they
            are compared with themselves.
        noc_bytes: on a many-core chip (``hw.cores > 1``, ``docs/cores.md``), bytes the
            kernels sent between cores (0 on one core).
        noc_byte_hops: those bytes times their hops.
        noc_cycles: per group, the bytes its busiest link carried (each transfer routed XY)
            over ``noc_link_bytes_per_cycle``, rounded up, summed over the groups.
        core_peak_buffer_bytes: on a many-core chip, each core's peak over the groups
            (empty on one core).
    """

    outputs: dict[str, np.ndarray]
    dram_read_bytes: int
    dram_write_bytes: int
    group_read_bytes: tuple[int, ...]
    group_write_bytes: tuple[int, ...]
    group_peak_buffer_bytes: tuple[int, ...] = ()
    group_band_rows: tuple[int, ...] = ()
    numerics: str = "float"
    peak_band_rows: dict[str, int] = field(default_factory=dict)
    reference_kernel_ops: tuple[str, ...] = ()
    noc_bytes: int = 0
    noc_byte_hops: int = 0
    noc_cycles: int = 0
    core_peak_buffer_bytes: tuple[int, ...] = ()

    @property
    def peak_buffer_bytes(self) -> int:
        """The most bytes any group held on chip at once."""
        return max(self.group_peak_buffer_bytes, default=0)

    @property
    def act_read_bytes(self) -> int:
        """Activation bytes read (every DRAM read of the executor is an activation)."""
        return self.dram_read_bytes

    @property
    def act_write_bytes(self) -> int:
        """Activation bytes written."""
        return self.dram_write_bytes

    @property
    def act_traffic_bytes(self) -> int:
        """Reads plus writes."""
        return self.dram_read_bytes + self.dram_write_bytes


# ---- the public entry point ------------------------------------------------------------------
def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name in graph.inputs:
        if name not in inputs:
            raise ExecutionInputError(
                f"graph '{graph.name}' input '{name}' is missing "
                f"(given: {', '.join(inputs) or 'none'})"
            )
        value = np.asarray(inputs[name], dtype=graph.tensors[name].dtype)  # int64 ids stay ids
        expect = graph.tensors[name].shape
        if value.shape != expect:
            raise ExecutionInputError(
                f"graph '{graph.name}' input '{name}' has shape {value.shape}, expected {expect}"
            )
        out[name] = value
    return out


def _check_partition(graph: Graph, plan: Plan) -> None:
    seen: set[str] = set()
    for g in plan.groups:
        for name in g.ops:
            if name not in graph.op_by_name:
                raise IllegalPlanError(
                    f"plan names op '{name}', which is not in graph '{graph.name}'"
                )
            if name in seen:
                raise IllegalPlanError(f"plan puts op '{name}' in two groups")
            seen.add(name)
    missing = [op.name for op in graph.ops if op.name not in seen]
    if missing:
        shown = ", ".join(missing[:5])
        raise IllegalPlanError(f"plan leaves {len(missing)} op(s) in no group: {shown}")


def execute(
    graph: Graph,
    plan: Plan,
    inputs: Mapping[str, np.ndarray],
    numerics: str = "float",
    hw: HardwareConfig | None = None,
    check: bool = True,
    band_rows: int | None = None,
) -> Execution:
    """Run ``plan`` on ``inputs`` inside a ``hw.buffer_bytes`` on-chip buffer.

    Every group runs as one fused kernel (:mod:`fusiontune.sim.runner`): rows stream through
    the buffer, the DMA counts every byte fetched and written, and the peak occupancy of each
    group is measured.

    Args:
        graph: the model.
        plan: a partition of its ops into groups (topological order of groups).
        inputs: graph input name -> array of the declared shape (cast to its declared dtype:
            float32 activations, int64 token ids stay integers).
        numerics: ``"float"`` (float32) or ``"cim"`` (crossbar quantization, ``sim/cim.py``).
        hw: the hardware (act_bits for byte counts, bit widths for CIM); the DESIGN §7
            default :class:`HardwareConfig` when ``None``.
        check: run the planner's ``check_plan`` first. ``False`` executes any partition,
            legal or not (how the lecture's traps are shown).
        band_rows: rows of every tensor produced or fetched per step. ``None``: about
            ``BAND_ELEMS_TARGET`` elements per step (at least a row), halved until the group
            fits the buffer; ``1`` is the least-buffer schedule the analytic model predicts.

    Raises:
        IllegalPlanError: the plan is illegal (with ``check``) or cannot be executed.
        CapacityError: a group does not fit ``hw.buffer_bytes`` even one row at a time (or
            at the given ``band_rows``).
        ExecutionInputError: an input is missing or has the wrong shape.
        ResourceLimitError: the graph's tensors need more than the memory limit.
    """
    if numerics not in NUMERICS:
        raise FusiontuneError(
            f"numerics '{numerics}' is not one of {', '.join(NUMERICS)}"
            f"{closest(numerics, NUMERICS)}"
        )
    _check_partition(graph, plan)
    if check:
        check_plan(graph, plan)
    check_graph(graph, "executing it")
    hw = hw or HardwareConfig()
    if band_rows is not None and (isinstance(band_rows, bool) or not isinstance(band_rows, int)
                                  or band_rows < 1):  # fmt: skip
        raise FusiontuneError(f"band_rows must be an integer >= 1 or None, got {band_rows!r}")
    matmul: MatmulFn = matmul_float
    if numerics == "cim":
        matmul = cim_matmul_fn(CimNumerics.from_hw(hw))
    dram = Dram(graph, hw.act_bytes, plan.n_groups)
    dram.values.update(_check_inputs(graph, inputs))
    peak_rows: dict[str, int] = {}
    self_compared: list[str] = []
    peaks: list[int] = []
    bands: list[int] = []
    chip = ManyCore(graph, plan, hw, BAND_ELEMS_TARGET) if hw.cores > 1 else None
    for index in group_order(graph, plan):
        group = plan.groups[index]
        nodes = compile_group(graph, group)
        self_compared += [name for n in nodes for name in _self_compared(n)]
        stored = stored_tensors(graph, group)
        if chip is not None:  # one buffer per core (sim/cores_run.py)
            stats = chip.run(index, group, nodes, stored, dram, band_rows, matmul)
        else:
            stats = _run_group(graph, index, group, nodes, stored, dram, hw, band_rows, matmul)
        peaks.append(stats.peak_bytes)
        bands.append(stats.band_rows)
        peak_rows.update(stats.peak_rows)
    outputs = {t: dram.values[t] for t in graph.outputs}
    return Execution(
        outputs=outputs,
        dram_read_bytes=sum(dram.read_bytes),
        dram_write_bytes=sum(dram.write_bytes),
        group_read_bytes=tuple(dram.read_bytes),
        group_write_bytes=tuple(dram.write_bytes),
        group_peak_buffer_bytes=tuple(peaks),
        group_band_rows=tuple(bands),
        numerics=numerics,
        peak_band_rows=peak_rows,
        reference_kernel_ops=tuple(sorted(self_compared, key=graph.op_index.__getitem__)),
        **(chip.measured() if chip is not None else {}),
    )


def _run_group(
    graph: Graph,
    index: int,
    group: Group,
    nodes: list[Node],
    stored: list[str],
    dram: Dram,
    hw: HardwareConfig,
    band_rows: int | None,
    matmul: MatmulFn,
) -> GroupStats:
    """Run one group; without a given band height, halve the bands until the group fits.

    A group of one op whose one-row schedule overflows the buffer runs tiled through DRAM
    (:mod:`fusiontune.sim.tiling`); ``band_rows`` does not apply to it.
    """
    label = (
        f"[{group.ops[0]}]"
        if len(group.ops) == 1
        else (f"[{group.ops[0]} .. {group.ops[-1]}] ({len(group.ops)} ops)")
    )
    tiling = singleton_tiling(graph, group, hw)
    if tiling is not None:  # one op that does not fit one row at a time: tiled through DRAM
        if not tiling.feasible:
            raise CapacityError(f"group {label}: {tiling.reason}")
        (node,) = nodes
        return run_tiled(graph, index, label, node, tiling, stored, dram, hw.buffer_bytes,
                         matmul, acc_units(hw))  # fmt: skip
    elems = BAND_ELEMS_TARGET
    while True:
        runner = GroupRunner(graph, index, label, nodes, stored, dram, hw.buffer_bytes,
                             band_rows, matmul, band_elems=elems)  # fmt: skip
        try:
            return runner.run()
        except CapacityError:
            if band_rows is not None or elems <= 1:
                raise
            dram.forget_group(index)
            elems //= 2


def _self_compared(node: Node) -> list[str]:
    """Ops of the node run by their own reference kernel (no fused kernel, not in weights)."""
    out = [op.name for op in node.epilogue if not has_fused_kernel(op)]
    if node.linear is None and node.op is not None and not has_fused_kernel(node.op):
        out.insert(0, node.name)
    return out
