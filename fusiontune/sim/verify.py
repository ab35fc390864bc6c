"""Verify a plan: fused execution against the op-by-op reference, and counted vs analytic bytes.

:func:`verify` runs :func:`fusiontune.sim.execute.execute` and
:func:`fusiontune.reference.reference_run` on the same seeded inputs and reports, per graph
output, the max absolute error and the max relative error ``max|a - b| / max|b|``. An output
passes when ``max|a - b| <= atol + rtol * max|b|``.

Default tolerances:

- ``numerics="float"``: ``rtol = 1e-4``, ``atol = 1e-6``. Folding BN into weights and merging
  matrices re-associates float32 sums; on the zoo that moves outputs by ~1e-6 relative, a
  hundred times below the threshold, while a wrong fold or merge moves them by ≥ 1e-2.
- ``numerics="cim"``: ``rtol = 5e-2``, ``atol = 1e-6``: 8-bit inputs and weights alone give
  ~1 % (one part in 127 per operand); the report exists to show the number, the threshold only
  flags a plan whose quantization broke it.

The execution runs inside the hardware's on-chip buffer one row a step (the least-buffer
schedule), so it also measures what each group holds. Two checks of the analytic model against
that measurement (DESIGN §6): the bytes the DMA counted must equal ``simulate(...)``'s activation
traffic, and each group's measured peak must satisfy ``measured <= model <= 1.25 x measured``
(``BUFFER_MODEL_SLACK``) for the model's ``buffer_needed_bytes``.

Ops without a fused kernel of their own (``SAME_AS_REFERENCE`` in the op registry) run the
reference kernel in both runs: for them the comparison checks the plan's data movement
(bands, halos, group boundaries), not a second implementation. The report lists them
(:attr:`VerifyReport.self_compared_ops`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from fusiontune.ir.graph import Graph
from fusiontune.limits import check_graph
from fusiontune.planner.plan import Plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.execute import Execution, execute, group_order
from fusiontune.sim.hardware import HardwareConfig

BUFFER_MODEL_SLACK = 1.25  # the model may over-predict a group's peak by at most 25 %
FLOAT_RTOL_DEFAULT = 1e-4  # float32 fused vs reference, relative to max|reference|
CIM_RTOL_DEFAULT = 5e-2  # CIM numerics: 8-bit quantization gives ~1e-2
ATOL_DEFAULT = 1e-6  # absolute floor for outputs that are (close to) all zero
REFERENCE_CACHE_MAX = 8  # (graph, seed) reference runs kept: verifying many plans of a graph
SELF_COMPARED_SHOWN = 6  # op types named in the summary's self-compared line

_REFERENCE: dict[tuple[str, int], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}


def _reference(graph: Graph, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Seeded inputs and the op-by-op reference outputs (cached per graph hash and seed)."""
    key = (graph.structural_hash, seed)
    hit = _REFERENCE.get(key)
    if hit is None:
        if len(_REFERENCE) >= REFERENCE_CACHE_MAX:
            _REFERENCE.pop(next(iter(_REFERENCE)))
        inputs = random_inputs(graph, seed)
        hit = _REFERENCE[key] = (inputs, reference_run(graph, inputs))
    return hit


@dataclass(frozen=True)
class OutputError:
    """Error of one graph output.

    Attributes:
        name: graph output name.
        max_abs_err: ``max|executed - reference|``.
        max_rel_err: ``max_abs_err / max|reference|`` (``inf`` when the reference is all zero
            and the error is not).
        ok: ``max_abs_err <= atol + rtol * max|reference|``.
    """

    name: str
    max_abs_err: float
    max_rel_err: float
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify`.

    Attributes:
        graph: graph name.
        plan_hash: the plan's hash.
        numerics: ``"float"`` or ``"cim"``.
        rtol: relative tolerance used.
        atol: absolute tolerance used.
        errors: one :class:`OutputError` per graph output.
        counted_act_bytes: activation bytes counted while executing.
        analytic_act_bytes: ``simulate(...)``'s activation bytes.
        traffic_ok: the two byte counts are equal.
        execution: the :class:`Execution` (outputs and per-group bytes).
        model_peak_bytes: per group, in execution order, the model's ``buffer_needed_bytes``
            (on a chip with ``cores > 1``: per core, the placement's peak).
        buffer_ok: every group's (many cores: every core's) measured peak is at most the
            model's, and the model's at most ``BUFFER_MODEL_SLACK`` times the measured one.
        self_compared_types: ``(op type, count)`` of the self-compared ops, most first.
    """

    graph: str
    plan_hash: str
    numerics: str
    rtol: float
    atol: float
    errors: tuple[OutputError, ...]
    counted_act_bytes: int
    analytic_act_bytes: int
    traffic_ok: bool
    execution: Execution
    self_compared_types: tuple[tuple[str, int], ...] = ()
    model_peak_bytes: tuple[int, ...] = ()
    buffer_ok: bool = True

    @property
    def measured_peak_bytes(self) -> int:
        """The most bytes any group (many cores: any core) held on chip (measured)."""
        return max(self.execution.core_peak_buffer_bytes, default=self.execution.peak_buffer_bytes)

    @property
    def outputs_ok(self) -> bool:
        return all(e.ok for e in self.errors)

    @property
    def passed(self) -> bool:
        """Outputs within tolerance, counted bytes equal and measured peaks within the model."""
        return self.outputs_ok and self.traffic_ok and self.buffer_ok

    @property
    def max_rel_err(self) -> float:
        return max((e.max_rel_err for e in self.errors), default=0.0)

    @property
    def self_compared_ops(self) -> tuple[str, ...]:
        """Ops that ran on their reference kernel: compared only with themselves."""
        return self.execution.reference_kernel_ops

    @property
    def self_compared_line(self) -> str:
        """The self-compared ops in one line, counted by op type."""
        n = len(self.self_compared_ops)
        if not n:
            return "self-compared: none (every op ran a fused kernel or folded weights)"
        shown = self.self_compared_types[:SELF_COMPARED_SHOWN]
        listed = ", ".join(f"{t} x{k}" for t, k in shown)
        rest = len(self.self_compared_types) - len(shown)
        more = f", {rest} more types" if rest else ""
        return f"self-compared: {n} op(s) ran their reference kernel in both runs ({listed}{more})"

    def summary(self) -> str:
        """One line per output and one for traffic, for the CLI."""
        lines = [
            f"verify {self.graph} plan {self.plan_hash} ({self.numerics}, rtol {self.rtol:g}, "
            f"atol {self.atol:g}): {'PASS' if self.passed else 'FAIL'}"
        ]
        for e in self.errors:
            lines.append(
                f"  {e.name}: max abs err {e.max_abs_err:.3g}, max rel err {e.max_rel_err:.3g}"
                f" {'ok' if e.ok else 'FAIL'}"
            )
        lines.append(
            f"  activation traffic: counted {self.counted_act_bytes} B, analytic "
            f"{self.analytic_act_bytes} B {'equal' if self.traffic_ok else 'DIFFER'}"
        )
        model = max(self.model_peak_bytes, default=0)
        lines.append(
            f"  on-chip buffer: measured peak {self.measured_peak_bytes:,} B, model "
            f"{model:,} B {'within' if self.buffer_ok else 'OUTSIDE'} [measured, "
            f"{BUFFER_MODEL_SLACK:g}x measured] per "
            f"{'core' if self.execution.core_peak_buffer_bytes else 'group'}"
        )
        lines.append(f"  {self.self_compared_line}")
        return "\n".join(lines)


def output_error(
    name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> OutputError:
    """Compare one output (float64 arithmetic)."""
    got64 = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    if got64.shape != want64.shape:
        return OutputError(name, float("inf"), float("inf"), False)
    diff = np.abs(got64 - want64)
    max_abs = float(diff.max()) if diff.size else 0.0
    if not np.all(np.isfinite(got64)):
        max_abs = float("inf")
    peak = float(np.abs(want64).max()) if want64.size else 0.0
    rel = max_abs / peak if peak > 0 else (0.0 if max_abs == 0 else float("inf"))
    return OutputError(name, max_abs, rel, bool(max_abs <= atol + rtol * peak))


def analytic_act_bytes(graph: Graph, plan: Plan, hw: HardwareConfig | None = None) -> int:
    """Activation bytes (reads + writes) of ``plan`` from the analytic cost model."""
    metrics = simulate(graph, plan, hw)
    return int(metrics.act_read_bytes) + int(metrics.act_write_bytes)


def verify(
    graph: Graph,
    plan: Plan,
    hw: HardwareConfig | None = None,
    numerics: str = "float",
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    check: bool = True,
    band_rows: int | None = 1,
) -> VerifyReport:
    """Execute ``plan`` and compare it with the op-by-op reference on seeded inputs.

    Args:
        graph: the model.
        plan: the plan to verify.
        hw: hardware (act_bits for bytes; bit widths for CIM); DESIGN §7 defaults if None.
        numerics: ``"float"`` or ``"cim"``.
        seed: seed of ``random_inputs``.
        rtol: relative tolerance (module docstring gives the defaults).
        atol: absolute tolerance (default ``1e-6``).
        check: run the planner's legality check before executing; ``False`` runs illegal
            plans, which is how the lecture's traps are shown to fail.
        band_rows: rows per step of the execution (1: the least-buffer schedule the model
            predicts; ``None``: as many as the buffer allows, faster, and the buffer check
            then only bounds the peak by the buffer).

    Raises:
        CapacityError: a group of the plan does not fit the hardware's buffer.
    """
    if rtol is None:
        rtol = CIM_RTOL_DEFAULT if numerics == "cim" else FLOAT_RTOL_DEFAULT
    if atol is None:
        atol = ATOL_DEFAULT
    check_graph(graph, "verifying it (the reference run and the execution)")
    inputs, want = _reference(graph, seed)
    run = execute(graph, plan, inputs, numerics=numerics, hw=hw, check=check, band_rows=band_rows)
    errors = tuple(output_error(t, run.outputs[t], want[t], rtol, atol) for t in graph.outputs)
    analytic = analytic_act_bytes(graph, plan, hw)
    chip = hw or HardwareConfig()
    if chip.cores > 1:  # one buffer per core: each core's peak against the placement's
        model = simulate(graph, plan, chip).core_peak_buffer_bytes
        measured = run.core_peak_buffer_bytes
    else:
        model = model_peaks(graph, plan, hw)
        measured = run.group_peak_buffer_bytes
    if band_rows == 1:
        buffer_ok = all(m <= p <= BUFFER_MODEL_SLACK * m for m, p in zip(measured, model))
    else:
        buffer_ok = max(measured, default=0) <= chip.core_buffer_bytes
    return VerifyReport(
        graph=graph.name,
        plan_hash=plan.hash,
        numerics=numerics,
        rtol=rtol,
        atol=atol,
        errors=errors,
        counted_act_bytes=run.act_traffic_bytes,
        analytic_act_bytes=analytic,
        traffic_ok=run.act_traffic_bytes == analytic,
        execution=run,
        self_compared_types=tuple(
            Counter(graph.op(n).op_type for n in run.reference_kernel_ops).most_common()
        ),
        model_peak_bytes=model,
        buffer_ok=buffer_ok,
    )


def model_peaks(graph: Graph, plan: Plan, hw: HardwareConfig | None = None) -> tuple[int, ...]:
    """The model's ``buffer_needed_bytes`` of each group, in execution order."""
    return tuple(
        group_cost(graph, plan.groups[i], hw).buffer_needed_bytes for i in group_order(graph, plan)
    )
