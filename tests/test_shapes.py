"""Shape inference (the op registry, fusiontune.ops) against onnx.shape_inference, op by op.

Each case is a one-node ONNX model built with onnx.helper. For every case we check
(a) ``infer_op_shapes`` gives exactly the shapes ONNX infers (strict mode), and the
hand-computed shape where one is given; (b) the importer loads the same model into a
linted Graph with those output shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.errors import ShapeError
from fusiontune.ir.graph import Op, Tensor
from fusiontune.ops import KNOWN_OP_TYPES, infer_op_shapes
from fusiontune.ops.layout import reshape_target
from fusiontune.ops.window import window_geometry

INT64_MAX = np.iinfo(np.int64).max

Input = tuple[int, ...] | np.ndarray | None  # activation shape, constant, or omitted


@dataclass(frozen=True)
class Case:
    id: str
    op_type: str
    inputs: list[Input]
    attrs: dict[str, Any] = field(default_factory=dict)
    n_out: int = 1
    opset: int = 17
    expect: tuple[int, ...] | None = None  # hand-computed first output shape
    # onnx.shape_inference 1.23 keeps a ceil_mode window that starts in the right padding,
    # which the ONNX spec and onnxruntime drop, and gives GroupNormalization no shape: such
    # cases are checked against onnxruntime
    oracle: str = "onnx"


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def f32(*shape: int) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)


X4 = (1, 3, 8, 8)
CASES = [
    # ---- Conv: pads, strides, dilations, groups, depthwise, auto_pad, 1-D -------------------
    Case("conv_pad1", "Conv", [X4, f32(4, 3, 3, 3)], {"pads": [1, 1, 1, 1]}, expect=(1, 4, 8, 8)),
    Case("conv_bias_stride2", "Conv", [X4, f32(4, 3, 3, 3), f32(4)], {"strides": [2, 2]},
         expect=(1, 4, 3, 3)),
    Case("conv_asym_pads", "Conv", [X4, f32(4, 3, 3, 3)], {"pads": [0, 1, 2, 0], "strides": [2, 1]},
         expect=(1, 4, 4, 7)),
    Case("conv_dilated", "Conv", [X4, f32(2, 3, 3, 3)], {"dilations": [2, 2]}, expect=(1, 2, 4, 4)),
    Case("conv_groups", "Conv", [(1, 4, 8, 8), f32(6, 2, 3, 3)], {"group": 2}, expect=(1, 6, 6, 6)),
    Case("conv_depthwise", "Conv", [(1, 4, 9, 9), f32(4, 1, 3, 3)],
         {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}, expect=(1, 4, 5, 5)),
    Case("conv_same_upper", "Conv", [(1, 3, 7, 7), f32(2, 3, 3, 3)],
         {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, expect=(1, 2, 4, 4)),
    Case("conv_same_lower", "Conv", [(1, 3, 7, 6), f32(2, 3, 4, 4)], {"auto_pad": "SAME_LOWER"},
         expect=(1, 2, 7, 6)),
    Case("conv_valid", "Conv", [(1, 3, 7, 7), f32(2, 3, 3, 3)],
         {"auto_pad": "VALID", "strides": [2, 2]}, expect=(1, 2, 3, 3)),
    Case("conv_transpose_s2_outpad_group", "ConvTranspose", [(1, 4, 5, 6), f32(4, 3, 3, 3)],
         {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0], "group": 2},
         expect=(1, 6, 10, 11)),
    Case("conv_transpose_same_upper", "ConvTranspose", [(1, 3, 5, 4), f32(3, 2, 4, 3)],
         {"auto_pad": "SAME_UPPER", "strides": [2, 3]}, expect=(1, 2, 10, 12)),
    Case("conv_1d", "Conv", [(1, 2, 10), f32(3, 2, 3)], {"pads": [1, 1], "strides": [3]},
         expect=(1, 3, 4)),
    Case("conv_kernel_attr", "Conv", [X4, f32(4, 3, 1, 1)], {"kernel_shape": [1, 1]},
         expect=(1, 4, 8, 8)),
    # ---- pooling: ceil_mode, pads, dilations, auto_pad ---------------------------------------
    Case("maxpool_k3s2", "MaxPool", [X4], {"kernel_shape": [3, 3], "strides": [2, 2]},
         expect=(1, 3, 3, 3)),
    Case("maxpool_ceil", "MaxPool", [X4],
         {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, expect=(1, 3, 4, 4)),
    Case("maxpool_ceil_pad", "MaxPool", [(1, 1, 6, 6)],
         {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
         expect=(1, 1, 4, 4)),
    Case("maxpool_ceil_last_window_dropped", "MaxPool", [(1, 1, 5, 5)],
         {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
         expect=(1, 1, 3, 3), oracle="onnxruntime"),
    Case("avgpool_ceil_last_window_dropped", "AveragePool", [(1, 1, 5, 5)],
         {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
         expect=(1, 1, 3, 3), oracle="onnxruntime"),
    Case("maxpool_valid_ceil", "MaxPool", [(1, 1, 7, 7)],
         {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID", "ceil_mode": 1},
         expect=(1, 1, 4, 4)),
    Case("maxpool_dilated", "MaxPool", [X4], {"kernel_shape": [2, 2], "dilations": [2, 2]},
         expect=(1, 3, 6, 6)),
    Case("maxpool_same_upper", "MaxPool", [(1, 3, 7, 7)],
         {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
         expect=(1, 3, 4, 4)),
    Case("maxpool_indices", "MaxPool", [X4], {"kernel_shape": [2, 2], "strides": [2, 2]}, n_out=2,
         expect=(1, 3, 4, 4)),
    Case("avgpool_pad", "AveragePool", [X4],
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, expect=X4),
    Case("avgpool_ceil", "AveragePool", [(1, 2, 7, 7)],
         {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, expect=(1, 2, 4, 4)),
    Case("avgpool_valid_1d", "AveragePool", [(1, 2, 9)],
         {"kernel_shape": [4], "strides": [2], "auto_pad": "VALID"}, expect=(1, 2, 3)),
    Case("global_avgpool", "GlobalAveragePool", [X4], expect=(1, 3, 1, 1)),
    Case("global_maxpool", "GlobalMaxPool", [(2, 5, 3)], expect=(2, 5, 1)),
    # ---- Gemm / MatMul -----------------------------------------------------------------------
    Case("gemm", "Gemm", [(2, 5), f32(5, 3)], expect=(2, 3)),
    Case("gemm_transB_bias", "Gemm", [(2, 5), f32(3, 5), f32(3)], {"transB": 1}, expect=(2, 3)),
    Case("gemm_transA", "Gemm", [(5, 2), f32(5, 3), f32(2, 3)], {"transA": 1}, expect=(2, 3)),
    Case("gemm_transA_transB", "Gemm", [(5, 2), f32(3, 5), f32(1)], {"transA": 1, "transB": 1},
         expect=(2, 3)),
    Case("matmul_2d", "MatMul", [(2, 5), f32(5, 3)], expect=(2, 3)),
    Case("matmul_batched", "MatMul", [(4, 2, 5), f32(5, 3)], expect=(4, 2, 3)),
    Case("matmul_broadcast", "MatMul", [(2, 1, 3, 4), (5, 4, 6)], expect=(2, 5, 3, 6)),
    Case("matmul_1d_left", "MatMul", [(4,), f32(3, 4, 6)], expect=(3, 6)),
    Case("matmul_1d_right", "MatMul", [(2, 3, 4), f32(4)], expect=(2, 3)),
    Case("matmul_1d_both", "MatMul", [(4,), f32(4)], expect=()),
    # ---- layout ------------------------------------------------------------------------------
    Case("reshape_zero_minus1", "Reshape", [(2, 3, 4), i64(0, -1)], expect=(2, 12)),
    Case("reshape_minus1_first", "Reshape", [(2, 3, 4), i64(-1, 2, 2)], expect=(6, 2, 2)),
    Case("reshape_allowzero", "Reshape", [(2, 3, 4), i64(4, 6)], {"allowzero": 1}, opset=14,
         expect=(4, 6)),
    Case("flatten_axis0", "Flatten", [(2, 3, 4)], {"axis": 0}, expect=(1, 24)),
    Case("flatten_axis1", "Flatten", [(2, 3, 4)], expect=(2, 12)),
    Case("flatten_axis_neg", "Flatten", [(2, 3, 4, 5)], {"axis": -1}, expect=(24, 5)),
    Case("flatten_axis_rank", "Flatten", [(2, 3, 4)], {"axis": 3}, expect=(24, 1)),
    Case("transpose_default", "Transpose", [(2, 3, 4)], expect=(4, 3, 2)),
    Case("transpose_perm", "Transpose", [(2, 3, 4)], {"perm": [1, 0, 2]}, expect=(3, 2, 4)),
    Case("squeeze_attr_opset11", "Squeeze", [(1, 3, 1, 4)], {"axes": [0, -2]}, opset=11,
         expect=(3, 4)),
    Case("squeeze_input_opset13", "Squeeze", [(1, 3, 1, 4), i64(2)], opset=13, expect=(1, 3, 4)),
    Case("squeeze_all", "Squeeze", [(1, 3, 1, 4)], expect=(3, 4)),
    Case("unsqueeze_attr_opset11", "Unsqueeze", [(3, 4)], {"axes": [0, 3]}, opset=11,
         expect=(1, 3, 4, 1)),
    Case("unsqueeze_input_neg", "Unsqueeze", [(3, 4), i64(-1, 1)], opset=13, expect=(3, 1, 4, 1)),
    # ---- normalization -----------------------------------------------------------------------
    Case("bn_inference", "BatchNormalization", [X4, f32(3), f32(3), f32(3), f32(3)], opset=15,
         expect=X4),
    Case("bn_training_opset15", "BatchNormalization", [X4, f32(3), f32(3), f32(3), f32(3)],
         {"training_mode": 1}, n_out=3, opset=15, expect=X4),
    Case("layernorm_last", "LayerNormalization", [(2, 3, 4), f32(4), f32(4)], n_out=3,
         expect=(2, 3, 4)),
    Case("layernorm_axis1", "LayerNormalization", [(2, 3, 4), f32(3, 4)], {"axis": 1}, n_out=3,
         expect=(2, 3, 4)),
    Case("softmax", "Softmax", [(2, 3, 4)], {"axis": 1}, expect=(2, 3, 4)),
    # ---- reductions: axes attribute (<13 / <18) or input (13+ ReduceSum, 18+ others) --------
    Case("reducemean_attr_keep", "ReduceMean", [(2, 3, 4)], {"axes": [1]}, opset=13,
         expect=(2, 1, 4)),
    Case("reducemean_attr_nokeep", "ReduceMean", [(2, 3, 4)], {"axes": [-1, 0], "keepdims": 0},
         opset=11, expect=(3,)),
    Case("reducemean_input_opset18", "ReduceMean", [(2, 3, 4), i64(2)], {"keepdims": 0}, opset=18,
         expect=(2, 3)),
    Case("reducesum_input_opset13", "ReduceSum", [(2, 3, 4), i64(0, 2)], opset=13,
         expect=(1, 3, 1)),
    Case("reducemax_all", "ReduceMax", [(2, 3, 4)], {"keepdims": 0}, opset=18, expect=()),
    Case("reducesum_noop_empty", "ReduceSum", [(2, 3, 4), i64()], {"noop_with_empty_axes": 1},
         opset=13, expect=(2, 3, 4)),
    # ---- elementwise and broadcasting ---------------------------------------------------------
    Case("relu", "Relu", [X4], expect=X4),
    Case("add_broadcast", "Add", [(2, 1, 4), (3, 1)], expect=(2, 3, 4)),
    Case("mul_const", "Mul", [X4, f32(3, 1, 1)], expect=X4),
    Case("where", "Where", [np.ones((1, 4), dtype=bool), (3, 1), f32(4)], expect=(3, 4)),
    Case("dropout_mask", "Dropout", [(2, 3)], n_out=2, expect=(2, 3)),
    Case("cast", "Cast", [(2, 3)], {"to": TensorProto.INT64}, expect=(2, 3)),
    Case("sub_div_max", "Max", [(2, 1, 4), f32(3, 1), (4,)], expect=(2, 3, 4)),
    Case("sum3", "Sum", [(2, 1), (1, 3), f32(3)], expect=(2, 3)),
    Case("div", "Div", [f32(1, 3, 1, 1), X4], expect=X4),
    Case("prelu", "PRelu", [X4, f32(3, 1, 1)], expect=X4),
    Case("pow_const", "Pow", [X4, np.array(2.0, np.float32)], expect=X4),
    Case("clip_inputs", "Clip", [X4, np.array(0, np.float32), np.array(6, np.float32)],
         expect=X4),
    Case("gelu_opset20", "Gelu", [(2, 3)], {"approximate": "tanh"}, opset=20, expect=(2, 3)),
    Case("hardswish", "HardSwish", [(2, 3)], expect=(2, 3)),
    Case("identity", "Identity", [(2, 3)], expect=(2, 3)),
    Case("instancenorm", "InstanceNormalization", [X4, f32(3), f32(3)], expect=X4),
    Case("groupnorm_opset21", "GroupNormalization", [(1, 4, 3, 3), f32(4), f32(4)],
         {"num_groups": 2}, opset=21, expect=(1, 4, 3, 3), oracle="onnxruntime"),
    Case("lppool", "LpPool", [X4], {"kernel_shape": [2, 2], "strides": [2, 2], "p": 2},
         expect=(1, 3, 4, 4)),
    Case("logsoftmax", "LogSoftmax", [(2, 5)], expect=(2, 5)),
    Case("reducel2_opset18", "ReduceL2", [(2, 3, 4), i64(-1)], opset=18, expect=(2, 3, 1)),
    Case("shape_start_end", "Shape", [(2, 3, 4, 5)], {"start": 1, "end": -1}, opset=15,
         expect=(2,)),
    # ---- data movement ----------------------------------------------------------------------
    Case("concat_axis1", "Concat", [(1, 2, 4), (1, 3, 4)], {"axis": 1}, expect=(1, 5, 4)),
    Case("concat_axis_neg", "Concat", [(1, 2, 4), f32(1, 2, 1)], {"axis": -1}, expect=(1, 2, 5)),
    Case("slice_basic", "Slice", [(5, 6), i64(1, 0), i64(4, INT64_MAX)], expect=(3, 6)),
    Case("slice_axes_steps", "Slice", [(5, 6, 7), i64(-1, 1), i64(-INT64_MAX, 7), i64(2, 0),
                                       i64(-2, 3)], expect=(2, 6, 4)),
    Case("gather_axis0", "Gather", [(5, 4), i64(0, 2, 4, 1, 1, 3).reshape(2, 3)], expect=(2, 3, 4)),
    Case("gather_scalar_axis1", "Gather", [(5, 4, 3), np.array(2, dtype=np.int64)], {"axis": 1},
         expect=(5, 3)),
    Case("gather_elements_axis_neg", "GatherElements",
         [(3, 4), i64(0, -1, 3, 2, 1, 1).reshape(3, 2)], {"axis": -1}, expect=(3, 2)),
    Case("scatter_nd_rows", "ScatterND", [(4, 3), i64(1, 3).reshape(2, 1), f32(2, 3)],
         expect=(4, 3)),
    Case("scatter_nd_elements_add", "ScatterND", [(4, 3), i64(1, 2, 1, 2).reshape(2, 2), f32(2)],
         {"reduction": "add"}, expect=(4, 3)),
    Case("scatter_elements_axis_neg", "ScatterElements",
         [(4, 3), i64(1, -1, 0, 2).reshape(2, 2), f32(2, 2)], {"axis": -1}, opset=13,
         expect=(4, 3)),
    Case("scatter_elements_max_opset18", "ScatterElements", [(4, 3), i64(3, 0, 1).reshape(1, 3),
                                                             f32(1, 3)],
         {"reduction": "max"}, opset=18, expect=(4, 3)),
    Case("depth_to_space_dcr", "DepthToSpace", [(1, 8, 3, 5)], {"blocksize": 2}, opset=11,
         expect=(1, 2, 6, 10)),
    Case("depth_to_space_crd", "DepthToSpace", [(2, 18, 2, 3)], {"blocksize": 3, "mode": "CRD"},
         opset=13, expect=(2, 2, 6, 9)),
    Case("split_input_opset13", "Split", [(2, 6), i64(2, 4)], {"axis": 1}, n_out=2, opset=13,
         expect=(2, 2)),
    Case("split_attr_opset11", "Split", [(6, 2)], {"split": [1, 5]}, n_out=2, opset=11,
         expect=(1, 2)),
    Case("split_equal", "Split", [(6, 2)], n_out=3, expect=(2, 2)),
    Case("split_num_outputs_uneven", "Split", [(7, 2)], {"num_outputs": 3}, n_out=3, opset=18,
         expect=(3, 2)),
    Case("pad_input", "Pad", [X4, i64(0, 0, 1, 2, 0, 0, 3, 0)], expect=(1, 3, 12, 10)),
    Case("pad_axes_opset18", "Pad", [X4, i64(1, 2, 3, 4), None, i64(2, 3)], opset=18,
         expect=(1, 3, 12, 14)),
    Case("resize_scales", "Resize", [X4, None, np.array([1, 1, 2, 1.5], dtype=np.float32)],
         {"mode": "nearest"}, opset=13, expect=(1, 3, 16, 12)),
    Case("resize_sizes_opset11", "Resize", [X4, f32(0), f32(0), i64(1, 3, 5, 9)], opset=11,
         expect=(1, 3, 5, 9)),
    Case("expand", "Expand", [(3, 1), i64(2, 1, 4)], expect=(2, 3, 4)),
    # ---- LSTM: directions, optional inputs, batch-first layout ---------------------------
    Case("lstm_forward", "LSTM", [(5, 2, 3), f32(1, 16, 3), f32(1, 16, 4)], {"hidden_size": 4},
         n_out=3, expect=(5, 1, 2, 4)),
    Case("lstm_bidirectional_state", "LSTM", [(5, 2, 3), f32(2, 16, 3), f32(2, 16, 4), f32(2, 32),
                                              None, (2, 2, 4), (2, 2, 4)],
         {"hidden_size": 4, "direction": "bidirectional"}, n_out=3, expect=(5, 2, 2, 4)),
    Case("lstm_layout1", "LSTM", [(2, 5, 3), f32(1, 16, 3), f32(1, 16, 4)],
         {"hidden_size": 4, "layout": 1}, n_out=3, opset=14, expect=(2, 5, 1, 4)),
]  # fmt: skip


def make_model(case: Case) -> onnx.ModelProto:
    """A one-node model: activations are graph inputs, constants initializers."""
    inputs, inits, names = [], [], []
    for k, value in enumerate(case.inputs):
        if value is None:
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        if isinstance(value, np.ndarray):
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, value))
    outs = [f"out{k}" for k in range(case.n_out)]
    node = helper.make_node(case.op_type, names, outs, name="node", **case.attrs)
    graph = helper.make_graph(
        [node],
        case.id,
        inputs,
        [helper.make_empty_tensor_value_info(o) for o in outs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    return model


def onnx_shapes(model: onnx.ModelProto, oracle: str = "onnx") -> list[tuple[int, ...]]:
    """Output shapes by onnx.shape_inference, or by running onnxruntime on ones."""
    if oracle == "onnxruntime":
        import onnxruntime as ort

        feeds = {
            v.name: np.ones([d.dim_value for d in v.type.tensor_type.shape.dim], np.float32)
            for v in model.graph.input
        }
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the model's declared shapes are deliberately absent
        session = ort.InferenceSession(model.SerializeToString(), options)
        return [tuple(y.shape) for y in session.run(None, feeds)]
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    shapes = []
    for value in inferred.graph.output:
        assert value.type.tensor_type.HasField("shape"), f"ONNX gave {value.name} no shape"
        dims = value.type.tensor_type.shape.dim
        assert all(d.HasField("dim_value") for d in dims), f"ONNX left {value.name} dynamic"
        shapes.append(tuple(d.dim_value for d in dims))
    return shapes


def our_shapes(case: Case) -> list[tuple[int, ...] | None]:
    tensors: dict[str, Tensor] = {}
    names = []
    for k, value in enumerate(case.inputs):
        if value is None:
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        if isinstance(value, np.ndarray):
            tensors[name] = Tensor(name, value.shape, str(value.dtype), value)
        else:
            tensors[name] = Tensor(name, value)
    attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in case.attrs.items()}
    op = Op("node", case.op_type, tuple(names), tuple(f"out{k}" for k in range(case.n_out)), attrs)
    return infer_op_shapes(op, tensors)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shapes_match_onnx(case: Case) -> None:
    expected = onnx_shapes(make_model(case), case.oracle)
    assert our_shapes(case) == expected
    if case.expect is not None:
        assert expected[0] == case.expect


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_importer_loads_case(case: Case, tmp_path: Path) -> None:
    from fusiontune.frontend.onnx_import import load_onnx

    path = tmp_path / f"{case.id}.onnx"
    onnx.save(make_model(case), path)
    graph = load_onnx(path)  # lints
    expected = onnx_shapes(make_model(case), case.oracle)
    assert [graph.tensors[f"out{k}"].shape for k in range(case.n_out)] == expected
    if case.op_type != "Shape":
        assert [op.op_type for op in graph.ops] == [case.op_type]


def test_every_design_op_is_covered() -> None:
    """Every op type of DESIGN §3 with a shape rule appears in at least one case above."""
    design_ops = {
        "Conv", "Gemm", "MatMul", "BatchNormalization", "Add", "Mul", "Relu", "MaxPool",
        "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LayerNormalization", "Softmax",
        "ReduceMean", "ReduceSum", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
        "Concat", "Resize", "Slice", "Gather", "Split", "Pad", "Expand", "Dropout",
    }  # fmt: skip
    assert design_ops <= {c.op_type for c in CASES}
    assert design_ops <= KNOWN_OP_TYPES


def test_shape_op_start_end() -> None:
    x = Tensor("x", (2, 3, 4, 5))
    op = Op("s", "Shape", ("x",), ("y",), {"start": 1, "end": -1})
    assert infer_op_shapes(op, {"x": x}) == [(2,)]
    assert infer_op_shapes(Op("s", "Shape", ("x",), ("y",)), {"x": x}) == [(4,)]


def test_bn_training_opset11_has_five_outputs() -> None:
    tensors = {"x": Tensor("x", (2, 3, 4)), **{n: Tensor(n, (3,), value=f32(3)) for n in "sbmv"}}
    op = Op("bn", "BatchNormalization", ("x", "s", "b", "m", "v"), ("y", "m1", "v1", "sm", "sv"))
    assert infer_op_shapes(op, tensors) == [(2, 3, 4), (3,), (3,), (3,), (3,)]


def test_window_geometry_same_lower_puts_extra_pad_first() -> None:
    op = Op("p", "MaxPool", ("x",), ("y",), {"auto_pad": "SAME_LOWER", "kernel_shape": (4,)})
    geo = window_geometry(op, (6,), (4,))
    assert (geo.pads_begin, geo.pads_end, geo.out_spatial) == ((2,), (1,), (6,))
    op_upper = Op("p", "MaxPool", ("x",), ("y",), {"auto_pad": "SAME_UPPER", "kernel_shape": (4,)})
    geo = window_geometry(op_upper, (6,), (4,))
    assert (geo.pads_begin, geo.pads_end) == ((1,), (2,))


def test_reshape_target_zero_and_allowzero() -> None:
    copy_zero = Op("r", "Reshape", ("x", "s"), ("y",))
    assert reshape_target(copy_zero, (2, 3, 4), [0, 0, -1]) == (2, 3, 4)
    allowzero = Op("r", "Reshape", ("x", "s"), ("y",), {"allowzero": 1})
    with pytest.raises(ShapeError, match=r"op 'r' \(Reshape\): cannot reshape \(2, 3, 4\)"):
        reshape_target(allowzero, (2, 3, 4), [0, -1])


@pytest.mark.parametrize(
    ("op", "tensors", "message"),
    [
        (
            Op("c", "Conv", ("x", "w"), ("y",), {"group": 2}),
            {"x": Tensor("x", (1, 3, 8, 8)), "w": Tensor("w", (4, 3, 3, 3), value=f32(4, 3, 3, 3))},
            r"op 'c' \(Conv\): input has 3 channels, weight expects 3 x group 2 = 6",
        ),
        (
            Op("g", "Gemm", ("a", "b"), ("y",), {"transB": 1}),
            {"a": Tensor("a", (2, 5)), "b": Tensor("b", (5, 3), value=f32(5, 3))},
            r"op 'g' \(Gemm\): inner dimensions differ \(5 vs 3\)",
        ),
        (
            Op("m", "MatMul", ("a", "b"), ("y",)),
            {"a": Tensor("a", (2, 5)), "b": Tensor("b", (4, 3))},
            r"op 'm' \(MatMul\): inner dimensions differ \(5 vs 4\)",
        ),
        (
            Op("r", "Reshape", ("x", "s"), ("y",)),
            {"x": Tensor("x", (2, 3)), "s": Tensor("s", (2,), "int64", i64(4, 2))},
            r"op 'r' \(Reshape\): cannot reshape \(2, 3\) to \[4, 2\]",
        ),
        (
            Op("q", "Squeeze", ("x", "a"), ("y",)),
            {"x": Tensor("x", (2, 3)), "a": Tensor("a", (1,), "int64", i64(1))},
            r"op 'q' \(Squeeze\): axis 1 has size 3, not 1",
        ),
        (
            Op("c", "Concat", ("a", "b"), ("y",), {"axis": 1}),
            {"a": Tensor("a", (2, 3)), "b": Tensor("b", (3, 3))},
            r"op 'c' \(Concat\): input shapes \[\(2, 3\), \(3, 3\)\] differ outside axis 1",
        ),
        (
            Op("s", "Split", ("x",), ("y", "z")),
            {"x": Tensor("x", (5, 2))},
            r"op 's' \(Split\): axis size 5 is not divisible by 2",
        ),
        (
            Op("p", "MaxPool", ("x",), ("y",), {"kernel_shape": (5, 5)}),
            {"x": Tensor("x", (1, 1, 3, 3))},
            r"op 'p' \(MaxPool\): window 5 is larger than padded input 3",
        ),
        (
            Op("g", "GatherElements", ("x", "i"), ("y",), {"axis": 1}),
            {"x": Tensor("x", (2, 3)), "i": Tensor("i", (2,), "int64", i64(0, 1))},
            r"op 'g' \(GatherElements\): indices \(2,\) must have the rank of the data",
        ),
        (
            Op("s", "ScatterND", ("x", "i", "u"), ("y",)),
            {"x": Tensor("x", (4, 3)), "i": Tensor("i", (2, 1), "int64", i64(0, 1).reshape(2, 1)),
             "u": Tensor("u", (2, 2))},
            r"op 's' \(ScatterND\): updates have shape \(2, 2\); .* need \(2, 3\)",
        ),
        (
            Op("s", "ScatterND", ("x", "i", "u"), ("y",)),
            {"x": Tensor("x", (4, 3)), "u": Tensor("u", (1,)),
             "i": Tensor("i", (1, 3), "int64", i64(0, 1, 2).reshape(1, 3))},
            r"op 's' \(ScatterND\): the indices' last axis \(3\) must be in \[1, 2\]",
        ),
        (
            Op("s", "ScatterElements", ("x", "i", "u"), ("y",)),
            {"x": Tensor("x", (4, 3)), "u": Tensor("u", (2, 2)),
             "i": Tensor("i", (2, 3), "int64", np.zeros((2, 3), np.int64))},
            r"op 's' \(ScatterElements\): updates have shape \(2, 2\); they need the indices' "
            r"shape \(2, 3\)",
        ),
        (
            Op("d", "DepthToSpace", ("x",), ("y",), {"blocksize": 2}),
            {"x": Tensor("x", (1, 8, 3))},
            r"op 'd' \(DepthToSpace\): input \(1, 8, 3\) must be NCHW",
        ),
    ],
    ids=["conv_group", "gemm_inner", "matmul_inner", "reshape", "squeeze", "concat", "split",
         "pool_window", "gather_elements_rank", "scatter_nd_updates", "scatter_nd_depth",
         "scatter_elements_updates", "depth_to_space_rank"],
)  # fmt: skip
def test_shape_errors_name_the_op(op: Op, tensors: dict[str, Tensor], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        infer_op_shapes(op, tensors)


def test_unknown_op_type_returns_none() -> None:
    op = Op("t", "Tile", ("x", "r"), ("y",))
    tensors = {"x": Tensor("x", (2, 3)), "r": Tensor("r", (2,), "int64", i64(2, 2))}
    assert infer_op_shapes(op, tensors) == [None]
    assert math.prod(tensors["x"].shape) == 6
