"""ONNX importer and loader: op classes, constant folding, real files, bad inputs."""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.errors import ModelLoadError
from fusiontune.frontend.loader import load_model, parse_input_shapes
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.ir.opclass import OpClass

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = ONNX_DATA / "light"


def save(tmp_path: Path, nodes, inputs, outputs, inits=(), opset=17, name="m.onnx") -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / name
    onnx.save(model, path)
    return path


def vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def classes(graph) -> dict[str, OpClass]:
    return {op.name: op.op_class for op in graph.ops}


# ---- (b) op classes ----------------------------------------------------------------------------
def test_op_classes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "scale"], ["m"], name="mul_const"),
        helper.make_node("Add", ["bias", "m"], ["a"], name="add_const"),
        helper.make_node("BatchNormalization", ["a", "s", "b", "mu", "var"], ["bn"], name="bn"),
        helper.make_node(
            "BatchNormalization", ["bn", "s", "b", "mu", "var"], ["bt", "rm", "rv"],
            name="bn_train", training_mode=1,
        ),
        helper.make_node("Relu", ["bt"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "a"], ["res"], name="residual"),
        helper.make_node("Reshape", ["res", "shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "wt"], ["q"], name="fc"),
        helper.make_node("MatMul", ["q", "qT"], ["att"], name="act_matmul"),
        helper.make_node("Transpose", ["q"], ["qT"], name="transpose"),
        helper.make_node("Softmax", ["att"], ["y"], name="softmax"),
        helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2]),
    ]  # fmt: skip
    c = np.ones(4, np.float32)
    inits = [
        init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        init("scale", np.full((4, 1, 1), 2, np.float32)),
        init("bias", np.zeros((4, 1, 1), np.float32)),
        *(init(n, c) for n in ("s", "b", "mu", "var")),
        init("shape", np.array([4, 16], np.int64)),
        init("wt", np.ones((16, 8), np.float32)),
    ]
    # Transpose is listed after its consumer: the importer sorts nodes topologically
    path = save(tmp_path, nodes, [vi("x", (1, 3, 4, 4))], [vi("y", None), vi("p", None)], inits,
                opset=15)  # fmt: skip
    graph = load_onnx(path)
    assert classes(graph) == {
        "conv": OpClass.LINEAR,
        "mul_const": OpClass.AFFINE,
        "add_const": OpClass.AFFINE,
        "bn": OpClass.AFFINE,
        "bn_train": OpClass.STATS,
        "relu": OpClass.ELEMWISE,
        "residual": OpClass.BINARY,
        "reshape": OpClass.LAYOUT,
        "fc": OpClass.LINEAR,
        "transpose": OpClass.LAYOUT,
        "act_matmul": OpClass.OPAQUE,
        "softmax": OpClass.STATS,
        "pool": OpClass.WINDOW,
    }
    assert graph.op_index["transpose"] < graph.op_index["act_matmul"]
    assert graph.tensors["att"].shape == (4, 4)
    assert graph.tensors["rm"].shape == (4,)
    assert graph.inputs == ("x",) and graph.outputs == ("y", "p")
    assert graph.total_macs == 1 * 4 * 4 * 4 * 27 + 4 * 8 * 16


def test_initializer_inputs_are_constants_and_names_are_filled(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["h"], transB=1),  # no name
        helper.make_node("Relu", ["h"], ["r"], name="dup"),
        helper.make_node("Relu", ["r"], ["y"], name="dup"),  # duplicate name
    ]
    inits = [init("w", np.ones((3, 5), np.float32))]
    # "w" is also listed as a graph input (IR version 3 style)
    path = save(tmp_path, nodes, [vi("x", (2, 5)), vi("w", (3, 5))], [vi("y", (2, 3))], inits)
    graph = load_onnx(path)
    assert graph.inputs == ("x",)
    assert graph.tensors["w"].is_constant
    assert [op.name for op in graph.ops] == ["Gemm_0", "Relu_1", "Relu_2"]
    assert graph.ops[0].op_class is OpClass.LINEAR


def test_same_file_same_hash(tmp_path: Path) -> None:
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")]
    path = save(tmp_path, nodes, [vi("x", (2, 5))], [vi("y", None)],
                [init("w", np.arange(15, dtype=np.float32).reshape(5, 3))])  # fmt: skip
    assert load_onnx(path).structural_hash == load_onnx(path).structural_hash


# ---- constant folding ----------------------------------------------------------------------------
def test_torch_export_shape_chain_folds_to_constant(tmp_path: Path) -> None:
    """x.view(x.size(0), -1) as torch exports it: Shape->Gather->Unsqueeze->Concat->Reshape."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node(
            "Constant", [], ["zero"], name="c0", value=numpy_helper.from_array(np.array(0))
        ),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Constant", [], ["ax"], name="c1", value_ints=[0]),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsqueeze"),
        helper.make_node("Constant", [], ["m1"], name="c2", value_ints=[-1]),
        helper.make_node("Concat", ["n1", "m1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
        helper.make_node("Transpose", ["w"], ["wT"], name="weight_transpose"),
        helper.make_node("MatMul", ["flat", "wT"], ["y"], name="fc"),
    ]
    w = np.arange(10 * 48, dtype=np.float32).reshape(10, 48)
    path = save(tmp_path, nodes, [vi("x", (2, 3, 4, 4))], [vi("y", None)], [init("w", w)], 13)
    graph = load_onnx(path)
    assert [op.name for op in graph.ops] == ["relu", "reshape", "fc"]
    target = graph.tensors["target"]
    assert target.is_constant and target.value.tolist() == [2, -1]
    assert graph.tensors["flat"].shape == (2, 48)
    np.testing.assert_array_equal(graph.tensors["wT"].value, w.T)
    assert classes(graph) == {
        "relu": OpClass.ELEMWISE, "reshape": OpClass.LAYOUT, "fc": OpClass.LINEAR,
    }  # fmt: skip
    assert graph.tensors["y"].shape == (2, 10)
    # intermediate constants nobody reads are not kept
    assert "s" not in graph.tensors and "n1" not in graph.tensors


def test_shape_with_start_end_folds(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
        helper.make_node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(
            np.array([0.5], np.float32))),
        helper.make_node("Add", ["x", "z"], ["y"], name="add"),
    ]  # fmt: skip
    graph = load_onnx(save(tmp_path, nodes, [vi("x", (2, 3, 3))], [vi("y", None)], opset=15))
    assert [op.name for op in graph.ops] == ["add"]
    np.testing.assert_array_equal(graph.tensors["z"].value, np.full((3,), 0.5, np.float32))
    assert graph.ops[0].op_class is OpClass.AFFINE


def test_sum_of_two_activations_is_a_residual_add(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Sum", ["x", "r"], ["y"], name="sum"),
    ]
    graph = load_onnx(save(tmp_path, nodes, [vi("x", (2, 3))], [vi("y", None)]))
    assert (graph.op("sum").op_type, graph.op("sum").op_class) == ("Add", OpClass.BINARY)


@pytest.mark.parametrize("opset", [5, 23])
def test_opsets_outside_11_21_are_converted(opset: int, tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = load_onnx(save(tmp_path, nodes, [vi("x", (2, 3))], [vi("y", None)], opset=opset))
    assert [(op.name, op.op_class) for op in graph.ops] == [("relu", OpClass.ELEMWISE)]


# ---- (c) real files ------------------------------------------------------------------------------
def test_real_inception_v1_loads_with_unknown_ops_opaque() -> None:
    """ONNX's own test model (opset 9, converted): LRN is outside our list, Concat opaque."""
    path = LIGHT / "light_inception_v1.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = load_onnx(path)
    ours = [
        w for w in caught if issubclass(w.category, UserWarning) and "IR does not" in str(w.message)
    ]
    assert len(ours) == 1
    assert str(ours[0].message) == (
        f"{path}: 2 op(s) of types the IR does not know load as OPAQUE: LRN (2)"
    )
    types = Counter(op.op_type for op in graph.ops)
    assert types == {
        "Conv": 57, "Relu": 57, "MaxPool": 13, "Concat": 9, "LRN": 2, "AveragePool": 1,
        "Dropout": 1, "Reshape": 1, "Gemm": 1, "Softmax": 1,
    }  # fmt: skip
    assert all(op.op_class is OpClass.OPAQUE for op in graph.ops if op.op_type in ("LRN", "Concat"))
    assert graph.tensors[graph.inputs[0]].shape == (1, 3, 224, 224)
    assert graph.tensors[graph.outputs[0]].shape == (1, 1000)
    assert graph.total_params == 6_998_552
    graph.lint()


def test_opset11_training_batchnorm_loads_as_stats(tmp_path: Path) -> None:
    """BatchNormalization-9 marks training by its five outputs (no attribute): it must load
    as STATS and run on batch statistics. Oracle: onnxruntime on the same file."""
    import onnxruntime as ort

    from fusiontune.reference import reference_run

    rng = np.random.default_rng(4)
    c = 3
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                            ["y", "rm", "rv", "sm", "sv"], name="bn", momentum=0.8)  # fmt: skip
    stats = [(1 + 0.1 * rng.standard_normal(c)), 0.1 * rng.standard_normal(c),
             0.1 * rng.standard_normal(c), 0.5 + rng.random(c)]  # fmt: skip
    inits = [init(n, v.astype(np.float32)) for n, v in zip("sbmv", stats)]
    outs = [vi("y", (4, c, 5)), *(vi(n, (c,)) for n in ("rm", "rv", "sm", "sv"))]
    path = save(tmp_path, [node], [vi("x", (4, c, 5))], outs, inits, opset=11)
    graph = load_onnx(path)
    assert classes(graph) == {"bn": OpClass.STATS}
    x = (3 * rng.standard_normal((4, c, 5)) + 1).astype(np.float32)
    ours = reference_run(graph, {"x": x})
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for name, want in zip(["y", "rm", "rv", "sm", "sv"], sess.run(None, {"x": x})):
        np.testing.assert_allclose(ours[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_real_resnet50_sum_becomes_binary_add() -> None:
    graph = load_onnx(LIGHT / "light_resnet50.onnx")
    counts = Counter((op.op_type, op.op_class) for op in graph.ops)
    assert counts[("Add", OpClass.BINARY)] == 16
    assert counts[("Conv", OpClass.LINEAR)] == 53
    assert counts[("BatchNormalization", OpClass.AFFINE)] == 53
    assert graph.tensors[graph.outputs[0]].shape == (1, 1000)


def test_real_pytorch_tile_loads_opaque_and_slice_known() -> None:
    with pytest.warns(UserWarning, match=r": 1 op\(s\) of types the IR does not know load as "
                      r"OPAQUE: Tile \(1\)$"):  # fmt: skip
        graph = load_onnx(ONNX_DATA / "pytorch-operator" / "test_operator_repeat" / "model.onnx")
    assert [(op.op_type, op.op_class) for op in graph.ops] == [("Tile", OpClass.OPAQUE)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Slice and Squeeze are known: no warning
        graph = load_onnx(ONNX_DATA / "pytorch-operator" / "test_operator_index" / "model.onnx")
    assert [op.op_type for op in graph.ops] == ["Slice", "Squeeze"]


# ---- (d) bad inputs ------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.onnx"
    with pytest.raises(ModelLoadError, match=f"^{re.escape(str(path))}: no such file$"):
        load_onnx(path)


def test_truncated_file(tmp_path: Path) -> None:
    data = (LIGHT / "light_squeezenet.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError) as info:
        load_onnx(path)
    assert str(info.value).startswith(f"{path}: is truncated or corrupt, protobuf parsing failed")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "payload", [b"this is a text file, not a model\n" * 8, b"\x89PNG\r\n\x1a\n"]
)
def test_non_onnx_bytes(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "fake.onnx"
    path.write_bytes(payload)
    with pytest.raises(ModelLoadError) as info:
        load_onnx(path)
    assert str(info.value).startswith(f"{path}: is not ONNX, protobuf parsing failed")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"empty\.onnx: the file is empty, not an ONNX model$"):
        load_onnx(path)


def test_external_data_is_read_and_its_absence_reported(tmp_path: Path) -> None:
    w = np.arange(20, dtype=np.float32).reshape(4, 5)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "g", [vi("x", (2, 5))], [vi("y", None)], [init("w", w)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.bin", size_threshold=0)
    np.testing.assert_array_equal(load_onnx(path).tensors["w"].value, w)
    (tmp_path / "ext.bin").unlink()
    with pytest.raises(ModelLoadError, match=r"ext\.onnx: cannot read external tensor data"):
        load_onnx(path)


def test_dynamic_dimension_needs_input_shapes(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    path = save(tmp_path, nodes, [vi("x", ("batch", 3, 8, 8))], [vi("y", None)])
    with pytest.raises(ModelLoadError) as info:
        load_onnx(path)
    assert str(info.value) == (
        f"{path}: input 'x' dimension 0 ('batch') is dynamic; give static shapes: "
        "input_shapes={'x': (1, 3, 8, 8)} in Python or --input-shape x=1,3,8,8 on the CLI "
        "(checked: the model loads with these)"
    )
    graph = load_onnx(path, input_shapes={"x": (2, 3, 8, 8)})
    assert graph.tensors["y"].shape == (2, 3, 8, 8)
    with pytest.raises(ModelLoadError, match=r"input_shapes gives 'x' dimension 1 = 4, the model "
                       r"fixes it to 3$"):  # fmt: skip
        load_onnx(path, input_shapes={"x": (2, 4, 8, 8)})
    with pytest.raises(ModelLoadError, match=r"input_shapes names 'x1', which is not a graph input "
                       r"\(did you mean 'x'\?\); graph inputs: x$"):  # fmt: skip
        load_onnx(path, input_shapes={"x1": (2, 3, 8, 8)})


def test_unknown_op_single_warning_lists_types(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Erf", ["r"], ["e"]),
        helper.make_node("Hardmax", ["e"], ["h2"]),
        helper.make_node("Hardmax", ["h2"], ["h3"]),
        helper.make_node("CumSum", ["h3", "axis"], ["y"]),
    ]
    inits = [init("axis", np.array(1, np.int64))]
    path = save(tmp_path, nodes, [vi("x", (2, 3))], [vi("y", None)], inits)
    with pytest.warns(UserWarning) as record:
        graph = load_onnx(path)
    assert [str(w.message) for w in record] == [
        f"{path}: 3 op(s) of types the IR does not know load as OPAQUE: CumSum (1), Hardmax (2)"
    ]
    assert graph.tensors["y"].shape == (2, 3)  # shape from onnx.shape_inference
    assert [op.op_class for op in graph.ops][2:] == [OpClass.OPAQUE] * 3


def test_float16_input_is_rejected(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    path = save(tmp_path, nodes, [vi("x", (2, 3), TensorProto.FLOAT16)],
                [vi("y", None, TensorProto.FLOAT16)])  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"input 'x' has dtype float16; fusiontune models "
                       r"float32 activations, re-export the model in float32$"):  # fmt: skip
        load_onnx(path)


def test_uninferable_custom_op_names_the_op(tmp_path: Path) -> None:
    node = helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example")
    graph = helper.make_graph([node], "g", [vi("x", (2, 3))], [vi("y", None)])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    with pytest.raises(ModelLoadError, match=r"cannot infer a static shape for output 'y' of "
                           r"op 'fancy' \(FancyOp\); fusiontune needs static shapes$"):  # fmt: skip
        load_onnx(path)


def test_data_dependent_reshape_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    inputs = [vi("x", (2, 6)), vi("s", (2,), TensorProto.INT64)]
    path = save(tmp_path, nodes, inputs, [vi("y", None)])
    with pytest.raises(ModelLoadError) as info:
        load_onnx(path)
    assert str(info.value) == f"{path}: op 'reshape' (Reshape): the shape input must be a constant"


def test_output_dtypes(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", "idx"], name="pool", kernel_shape=[2]),
        helper.make_node("Cast", ["p"], ["c"], name="cast", to=TensorProto.INT32),
        helper.make_node("Dropout", ["p"], ["d", "mask"], name="drop"),
        helper.make_node("ArgMax", ["x"], ["am"], name="argmax", axis=2),
    ]
    outs = [vi(n, None) for n in ("idx", "c", "mask", "am", "d")]
    with pytest.warns(UserWarning, match=r"OPAQUE: ArgMax \(1\)$"):
        graph = load_onnx(save(tmp_path, nodes, [vi("x", (1, 2, 6))], outs))
    dtypes = {n: graph.tensors[n].dtype for n in ("p", "idx", "c", "d", "mask", "am")}
    assert dtypes == {
        "p": "float32", "idx": "int64", "c": "int32", "d": "float32", "mask": "bool",
        "am": "int64",
    }  # fmt: skip
    assert graph.tensors["am"].shape == (1, 2, 1)


@pytest.mark.parametrize("name", ["lenet5", "resnet18", "mobilenet_v2", "bert_encoder"])
def test_zoo_export_import_round_trip_keeps_the_hash(name: str, tmp_path: Path) -> None:
    """load_model(zoo name) and load_model(its to_onnx export) give the very same Graph."""
    from fusiontune.export.onnx_export import to_onnx

    graph = load_model(name) if name == "bert_encoder" else load_model(name, input_size=32)
    path = tmp_path / f"{name}.onnx"
    to_onnx(graph, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every zoo op is known
        loaded = load_model(path)
    assert [(op.name, op.op_type, op.op_class) for op in loaded.ops] == [
        (op.name, op.op_type, op.op_class) for op in graph.ops
    ]
    assert loaded.structural_hash == graph.structural_hash


# ---- loader ------------------------------------------------------------------------------------
def test_load_model_dispatches_files(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    path = save(tmp_path, nodes, [vi("x", (1, 4))], [vi("y", None)])
    assert [op.name for op in load_model(str(path)).ops] == ["relu"]
    assert [op.name for op in load_model(path).ops] == ["relu"]
    with pytest.raises(ModelLoadError, match=r"missing\.onnx: no such file$"):
        load_model(tmp_path / "missing.onnx")
    with pytest.raises(ModelLoadError, match=r"options \['input_size'\] apply to zoo models only"):
        load_model(path, input_size=32, batch=None)
    assert load_model(path, input_size=None).structural_hash == load_model(path).structural_hash


def test_load_model_zoo_name() -> None:
    graph = load_model("lenet5", input_size=None, batch=2)
    assert graph.name == "lenet5"
    assert graph.tensors[graph.inputs[0]].shape[0] == 2
    with pytest.raises(ModelLoadError, match="did you mean 'resnet18'"):
        load_model("resnet81")
    with pytest.raises(ModelLoadError, match="input_shapes applies to ONNX files"):
        load_model("lenet5", input_shapes={"x": (1, 1, 32, 32)})


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["x=1,3,224,224", "mask = 1, 7"]) == {
        "x": (1, 3, 224, 224), "mask": (1, 7),
    }  # fmt: skip
    for bad in ["x", "x=", "=1,2", "x=1,a", "x=1,0", "x=1,-2", "x=1,,2"]:
        with pytest.raises(ModelLoadError, match=re.escape(f"--input-shape '{bad}': expected")):
            parse_input_shapes([bad])
    with pytest.raises(ModelLoadError, match="input 'x' is given twice"):
        parse_input_shapes(["x=1", "x=2"])
