"""The executor measures; the analytic model is checked against the measurement.

Every group runs inside a bounded on-chip buffer (``sim/runner.py``): the DMA counts the bytes
it fetches and writes, the buffer measures its peak. The analytic model must agree: counted
bytes equal ``simulate``'s activation traffic exactly, and each group's measured peak (one
row a step, the schedule the model predicts) satisfies ``measured <= model <= 1.25 x measured``.
These tests can fail: a runner that writes intermediates out, a buffer below a group's need,
or a capacity model that under- or over-predicts all turn them red.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import dag_graphs

from fusiontune.errors import CapacityError
from fusiontune.frontend.zoo import build_zoo, zoo_models
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import random_plan, unfused_plan
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim import execute as execute_module
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.execute import Execution, execute, group_order
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import HardwareConfig, load_hardware

SLACK = 1.25  # the model may over-predict a group's peak by at most 25 % (issue contract)
RTOL = 1e-4  # fused float32 vs the reference (sim/verify.py)
SMALL = {"lenet5": None, "bert_encoder": 16, "mlp_relu": None, "mlp_linear": None,
         "mlp_bottleneck": None, "mlp_wide": None, "resnet18_train": 64}  # fmt: skip
HW = HardwareConfig()  # 10.5 MiB: every group of these small graphs fits


def _size(model: str) -> int | None:
    return SMALL.get(model, 32)


def check_measurement(graph: Graph, plan: Plan, run: Execution, hw: HardwareConfig) -> None:
    """The model's traffic and buffer against what the execution measured (band 1)."""
    m = simulate(graph, plan, hw)
    assert run.dram_read_bytes == m.act_read_bytes
    assert run.dram_write_bytes == m.act_write_bytes
    order = group_order(graph, plan)
    for k, i in enumerate(order):
        model = group_cost(graph, plan.groups[i], hw).buffer_needed_bytes
        measured = run.group_peak_buffer_bytes[k]
        assert measured <= model <= SLACK * measured, (plan.groups[i].ops, measured, model)
        assert run.group_read_bytes[i] == group_cost(graph, plan.groups[i], hw).act_read_bytes


def _plans(graph: Graph, rng: np.random.Generator) -> list[Plan]:
    plans = [unfused_plan(graph), greedy_plan(graph, hw=HW), optimal_plan(graph, HW).plan]
    return [p for p in plans if p is not None] + [random_plan(graph, rng) for _ in range(3)]


@pytest.mark.parametrize("model", zoo_models())
def test_counted_bytes_and_peaks_match_the_model(model: str) -> None:
    graph = build_zoo(model, input_size=_size(model))
    inputs = random_inputs(graph)
    want = reference_run(graph, inputs)
    rng = np.random.default_rng(0)
    for plan in _plans(graph, rng):
        run = execute(graph, plan, inputs, hw=HW, band_rows=1)
        check_measurement(graph, plan, run, HW)
        for t in graph.outputs:
            scale = float(np.abs(want[t]).max()) or 1.0
            assert float(np.abs(run.outputs[t] - want[t]).max()) <= RTOL * scale + 1e-6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_graphs(max_ops=7), st.integers(0, 2**16))
def test_random_dags_and_plans_measure_what_the_model_says(graph: Graph, seed: int) -> None:
    plan = random_plan(graph, np.random.default_rng(seed))
    run = execute(graph, plan, random_inputs(graph), hw=HW, band_rows=1)
    check_measurement(graph, plan, run, HW)


@pytest.mark.parametrize(("model", "size"), [("resnet18", 224), ("mobilenet_v2", 128)])
def test_whole_network_pipelines_stream_every_branch_within_the_model(
    model: str, size: int
) -> None:
    graph = build_zoo(model, input_size=size)
    hw = load_hardware("isaac_reram_flat")
    result = optimal_plan(graph, hw)
    assert result.plan is not None and result.plan.n_groups == 1  # one group, every branch
    run = execute(graph, result.plan, random_inputs(graph), hw=hw, band_rows=1)
    check_measurement(graph, result.plan, run, hw)
    whole = sum(int(np.prod(graph.tensors[t].shape)) for t in run.peak_band_rows)
    assert run.peak_buffer_bytes < whole / 20  # no intermediate is held whole
    tall = {t: graph.tensors[t].shape[2] for t in run.peak_band_rows
            if len(graph.tensors[t].shape) == 4 and graph.tensors[t].shape[2] >= 8}  # fmt: skip
    assert all(run.peak_band_rows[t] < h for t, h in tall.items())


def test_a_runner_that_writes_intermediates_out_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = build_zoo("resnet18", input_size=32)
    plan = greedy_plan(graph, hw=HW)
    inputs = random_inputs(graph)
    check_measurement(graph, plan, execute(graph, plan, inputs, hw=HW, band_rows=1), HW)

    def every_tensor(graph: Graph, group: Group) -> list[str]:  # op by op: all go to DRAM
        return [t for op in graph.subgraph_ops(group.ops) for t in op.outputs if t]

    monkeypatch.setattr(execute_module, "stored_tensors", every_tensor)
    run = execute(graph, plan, inputs, hw=HW, band_rows=1)
    with pytest.raises(AssertionError):
        check_measurement(graph, plan, run, HW)
    assert run.dram_write_bytes > simulate(graph, plan, HW).act_write_bytes


def test_a_buffer_below_the_need_raises_and_at_the_need_runs() -> None:
    graph = build_zoo("resnet18", input_size=32)
    plan = Plan.of(graph, [Group(tuple(op.name for op in graph.ops), Mode.STREAM)])
    need = simulate(graph, plan, HW).buffer_needed_bytes
    inputs = random_inputs(graph)
    run = execute(graph, plan, inputs, hw=HW.replace(buffer_bytes=need), band_rows=1)
    assert run.peak_buffer_bytes == need
    with pytest.raises(CapacityError, match=r"group \[stem.conv .. fc\] \(69 ops\).*buffer_bytes"):
        execute(graph, plan, inputs, hw=HW.replace(buffer_bytes=need - 1), band_rows=1)
    # with larger bands the executor halves them until the group fits, same results
    auto = execute(graph, plan, inputs, hw=HW.replace(buffer_bytes=need))
    assert auto.dram_read_bytes == run.dram_read_bytes
    np.testing.assert_allclose(auto.outputs["fc"], run.outputs["fc"], rtol=1e-5, atol=1e-6)


def test_larger_bands_hold_more_but_never_more_than_the_buffer() -> None:
    graph = build_zoo("mobilenet_v2", input_size=64)
    plan = greedy_plan(graph, hw=HW)
    inputs = random_inputs(graph)
    one = execute(graph, plan, inputs, hw=HW, band_rows=1)
    big = execute(graph, plan, inputs, hw=HW)
    assert big.peak_buffer_bytes >= one.peak_buffer_bytes
    assert big.peak_buffer_bytes <= HW.buffer_bytes
    assert (big.dram_read_bytes, big.dram_write_bytes) == (one.dram_read_bytes,
                                                           one.dram_write_bytes)  # fmt: skip
