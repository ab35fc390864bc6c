"""Structure of the planner's results on zoo models, with the counts derived by hand."""

from __future__ import annotations

import json

import pytest

from fusiontune.cli.main import main
from fusiontune.frontend.zoo import build_zoo
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.candidates import PlannerConfig, group_pattern, merge_candidates
from fusiontune.planner.enumerate import count_plans, enumerate_plans
from fusiontune.planner.legality import check_plan
from fusiontune.planner.plan import Mode, Plan
from fusiontune.sim.greedy import greedy_plan

CNN_SIDE = 32  # small input: the structure (and so every count below) does not depend on it
P1_P2 = PlannerConfig(patterns=frozenset({"P1", "P2"}))
CAP12 = PlannerConfig(max_group_size=12)  # the former default cap, now an optional knob


def _sizes(plan: Plan) -> list[int]:
    return [len(g.ops) for g in plan.groups]


def test_vgg16_groups() -> None:
    g = build_zoo("vgg16", input_size=CNN_SIDE)
    # 13 conv + 13 relu + 5 maxpool + flatten + 3 gemm + 2 relu = 37 ops
    assert unfused_plan(g).n_groups == 37
    # greedy phase 1 (at most one LINEAR per group) builds one group per layer:
    # c1r1 | c2r2p1 | c3r3 | c4r4p2 | c5r5 | c6r6 | c7r7p3 | c8r8 | c9r9 | c10r10p4 |
    # c11r11 | c12r12 | c13r13p5flatten | fc1r | fc2r | fc3           -> 16 groups
    # (flatten -> fc1 would hold two LINEARs; pools join their conv as P2)
    layers = greedy_plan(g, P1_P2)
    assert _sizes(layers) == [2, 3, 2, 3, 2, 2, 3, 2, 2, 3, 2, 2, 4, 2, 2, 1]
    # phase 2: no merge (a ReLU sits between every pair of LINEARs, rule 2).
    # phase 3 with a user cap of 12 ops streams whole layers in edge order:
    # 2+3+2+3+2 = 12 | 2+3+2+2+3 = 12 | 2+2+4+2+2 = 12 | fc3 alone (13 > 12) -> 4 groups
    plan = greedy_plan(g, CAP12)
    assert _sizes(plan) == [12, 12, 12, 1]
    assert [grp.mode for grp in plan.groups] == [Mode.STREAM] * 3 + [Mode.SINGLE]
    assert group_pattern(g, plan.groups[0]) == "P1+P2+P4"
    check_plan(g, plan)
    # with no cap (the default) nothing but legality bounds a group: one stream of 37 ops
    whole = greedy_plan(g)
    assert _sizes(whole) == [37]
    assert whole.groups[0].mode is Mode.STREAM
    check_plan(g, whole)


def test_resnet18_groups() -> None:
    g = build_zoo("resnet18", input_size=CNN_SIDE)
    # stem conv,bn,relu,maxpool (4) + 8 basic blocks x 7 (conv,bn,relu,conv,bn,add,relu)
    # + 3 downsample conv,bn (6) + avgpool, flatten, fc (3) = 69 ops
    assert unfused_plan(g).n_groups == 69
    # one LINEAR per group (P1+P2): stem+maxpool (1); per block conv1,bn1,relu1 (A) and
    # conv2,bn2,add,relu (B) (2 x 8 = 16); downsample conv,bn (3); the last block's B also
    # takes avgpool (P2) and flatten (P1); fc alone (1)                    -> 21 groups
    layers = greedy_plan(g, P1_P2)
    assert layers.n_groups == 21
    assert _sizes(layers)[:3] == [4, 3, 4]
    assert _sizes(layers)[-2:] == [6, 1]
    # stream (P4), layers joined in edge order up to 12 ops (S=stem 4, A=3, B=4, D=2):
    # S+A(1.0)+B(1.0) = 11 | A+B(1.1)+A(2.0)+D(2.0) = 12 | B(2.0)+A+B(2.1) = 11 |
    # A+B+D(3.0)+A(3.1) = 12 | B(3.1)+A+D(4.0) = 9 | B(4.0)+A(4.1) = 7 | B6(4.1)+fc = 7
    plan = greedy_plan(g, CAP12)
    assert _sizes(plan) == [11, 12, 11, 12, 9, 7, 7]
    assert all(grp.mode is Mode.STREAM for grp in plan.groups)
    check_plan(g, plan)
    assert _sizes(greedy_plan(g)) == [69]  # uncapped: the whole network streams


def test_greedy_with_hardware_keeps_every_group_feasible() -> None:
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.hardware import load_hardware

    g = build_zoo("resnet18", input_size=CNN_SIDE)
    isaac = load_hardware("isaac_reram_flat")
    alone = simulate(g, unfused_plan(g), isaac).buffer_needed_bytes  # the largest single op
    tight = isaac.replace(buffer_bytes=2 * alone)
    plan = greedy_plan(g, hw=tight)
    m = simulate(g, plan, tight)
    assert all(grp.feasible for grp in m.groups)
    assert 1 < plan.n_groups < 69
    # without the hardware the greedy plan is one group that does not fit this buffer
    assert not simulate(g, greedy_plan(g), tight).feasible


@pytest.mark.parametrize(
    ("model", "n_ops", "greedy_modes", "plans"),
    [
        # fc1 relu fc2 relu fc3: layers fc1r | fc2r | fc3, no merge (rule 2), one stream;
        # plans = compositions of a 5-chain = 2^4 = 16, every multi-FC group streams only
        ("mlp_relu", 5, [Mode.STREAM], 16),
        # fc1 bn1 fc2 fc3: phase 1 fc1+bn1, phase 2 merges fc2 then fc3 (784x10 = 7,840
        # weights merged vs 268,800 separate -> merge); plans: 8 compositions, x2 where the
        # group can merge: [4] 2, [1,3] 1 (bn1 would be a prologue), [3,1] 2, [2,2] 2,
        # [1,1,2] 2, [1,2,1] 1, [2,1,1] 1, [1,1,1,1] 1 -> 12
        ("mlp_linear", 4, [Mode.MERGE], 12),
        # fc1 fc2 with a narrow middle: merging grows the weights 8x -> stream; 1 + 2 plans
        ("mlp_bottleneck", 2, [Mode.STREAM], 3),
        # fc1 fc2 with a wide middle: merging shrinks the weights 272x -> merge
        ("mlp_wide", 2, [Mode.MERGE], 3),
    ],
)
def test_mlp_groups(model: str, n_ops: int, greedy_modes: list[Mode], plans: int) -> None:
    g = build_zoo(model)
    assert unfused_plan(g).n_groups == n_ops
    greedy = greedy_plan(g)
    assert [grp.mode for grp in greedy.groups] == greedy_modes
    assert greedy.n_groups == 1
    assert count_plans(g) == plans == len(list(enumerate_plans(g)))


def test_mlp_relu_without_stream_keeps_layers() -> None:
    g = build_zoo("mlp_relu")
    no_stream = PlannerConfig(patterns=frozenset({"P1", "P2", "P3"}))
    assert _sizes(greedy_plan(g, no_stream)) == [2, 2, 1]
    assert merge_candidates(g) == ()
    assert merge_candidates(build_zoo("mlp_linear")) == ("fc1", "fc2")


@pytest.mark.parametrize("model", ["lenet5", "mobilenet_v2", "bert_encoder", "resnet18_train"])
def test_every_zoo_model_plans(model: str) -> None:
    kwargs = {"input_size": CNN_SIDE} if model in ("mobilenet_v2", "resnet18_train") else {}
    g = build_zoo(model, **kwargs)
    plan = greedy_plan(g)
    check_plan(g, plan)
    assert 1 <= plan.n_groups < len(g.ops)
    assert count_plans(g) > 1
    for p in enumerate_plans(g, limit=20):
        check_plan(g, p)


def test_resnet18_train_never_merges_batch_stats() -> None:
    g = build_zoo("resnet18_train", input_size=CNN_SIDE)
    assert merge_candidates(g) == ()
    assert not any(grp.mode is Mode.MERGE for grp in greedy_plan(g).groups)


# ---- CLI --------------------------------------------------------------------------------------
def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["plans", *argv, "--json"]) == 0
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_cli_plans_json_and_count(capsys: pytest.CaptureFixture[str]) -> None:
    report = _cli_json(capsys, "mlp_linear", "--limit", "3", "--explain")
    assert report["plans"] == 12
    assert report["unfused_groups"] == 4 and report["greedy_groups"] == 1
    assert report["greedy"] == [
        {"ops": ["fc1", "bn1", "fc2", "fc3"], "mode": "merge", "pattern": "P3"}
    ]
    assert len(report["first_plans"]) == 3  # type: ignore[arg-type]
    assert len(report["explain"]) == 3  # type: ignore[arg-type]
    assert main(["plans", "mlp_relu", "--count"]) == 0
    assert capsys.readouterr().out.strip() == "16"
    assert main(["plans", "mlp_relu", "--count", "--patterns", "P1"]) == 0
    # P1 only (fc1 r1 fc2 r2 fc3): legal multi-op groups are the segments with one FC:
    # fc1r1, r1fc2, fc2r2, r2fc3 and r1fc2r2. Plans: all single (1) + one pair (4) + two
    # disjoint pairs (fc1r1+fc2r2, fc1r1+r2fc3, r1fc2+r2fc3: 3) + the triple (1) = 9
    assert capsys.readouterr().out.strip() == "9"


def test_cli_explain_text_and_out(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    from pathlib import Path

    out = Path(str(tmp_path)) / "plan.json"
    assert main(["plans", "mlp_relu", "--explain", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "legal plans: 16" in text
    assert "rule 2 (nonlinear)" in text
    g = build_zoo("mlp_relu")
    assert Plan.from_json(out.read_text(), g) == greedy_plan(g)


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plans", "mlp_relu", "--patterns", "P9"]) == 2
    assert "P9" in capsys.readouterr().err
    assert main(["plans", "no_such_model"]) == 2


def test_cli_onnx_file(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    from pathlib import Path

    from fusiontune.export.onnx_export import to_onnx

    path = Path(str(tmp_path)) / "mlp.onnx"
    to_onnx(build_zoo("mlp_relu"), path)
    report = _cli_json(capsys, str(path))
    assert report["plans"] == 16
    assert report["greedy_groups"] == 1
