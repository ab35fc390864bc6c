"""The TVM-like baseline: what a general compiler fuses, and what fusiontune adds."""

from __future__ import annotations

import pytest

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.opclass import OpClass
from fusiontune.planner.baselines import greedy_plan, tvm_like_plan, unfused_plan
from fusiontune.planner.legality import check_plan
from fusiontune.sim.cost import simulate

SMALL = {"vgg16": 32, "resnet18": 32, "mobilenet_v2": 32, "bert_encoder": 8, "lenet5": 32}


@pytest.mark.parametrize("model", [*SMALL, "mlp_relu", "mlp_linear"])
def test_tvm_like_is_legal_and_never_fuses_bn_pool_or_matmul_pairs(model: str) -> None:
    graph = build_zoo(model, input_size=SMALL.get(model))
    plan = tvm_like_plan(graph)
    check_plan(graph, plan)
    for group in plan.groups:
        ops = [graph.op(name) for name in group.ops]
        if len(ops) == 1:
            continue
        assert sum(op.op_class is OpClass.LINEAR for op in ops) <= 1
        assert not any(op.op_class is OpClass.WINDOW for op in ops)
        bns = [op for op in ops if op.op_type == "BatchNormalization"]
        # a BatchNorm may lead its group (it keeps its ReLU), never follow a conv into one
        assert all(op.name == group.ops[0] for op in bns)
    # fusiontune's greedy fusion moves no more data than the general compiler's
    assert simulate(graph, greedy_plan(graph)).traffic_bytes <= simulate(graph, plan).traffic_bytes


def test_resnet18_group_count() -> None:
    # 69 ops. stem: conv | bn+relu | maxpool = 3 groups. A BasicBlock without downsample:
    # conv1 | bn1+relu1 | conv2 | bn2+add+relu2 = 4 groups (5 such blocks = 20); with
    # downsample: conv1 | bn1+relu1 | conv2 | down.conv | down.bn | bn2+add+relu2 = 6 groups
    # (the Add joins one producer only; 3 blocks = 18). Head: pool | flatten | fc = 3.
    # 3 + 20 + 18 + 3 = 44.
    graph = build_zoo("resnet18", input_size=32)
    assert len(tvm_like_plan(graph).groups) == 44
    assert len(unfused_plan(graph).groups) == 69
