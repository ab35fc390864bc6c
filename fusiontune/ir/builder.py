"""A small builder for graphs in code: the model zoo and the tests use it.

Shapes are inferred as ops are added, so a mistake fails at the line that made it.
Weights come from a seeded generator: the same seed builds the same graph (same hash).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fusiontune.errors import ShapeError
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ops import infer_op_shapes
from fusiontune.ops.layout import FLATTEN, RESHAPE
from fusiontune.ops.linear import CONV, CONV_TRANSPOSE, GEMM, MATMUL
from fusiontune.ops.norm import BATCH_NORM, BN_MOMENTUM, LAYER_NORM, NORM_EPSILON
from fusiontune.ops.pointwise import ADD, RELU
from fusiontune.ops.resize import RESIZE
from fusiontune.ops.window import AVERAGE_POOL, GLOBAL_AVERAGE_POOL, MAX_POOL


class GraphBuilder:
    """Builds a :class:`Graph` op by op.

    Args:
        name: graph name.
        seed: seed of the weight generator.
    """

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self._tensors: dict[str, Tensor] = {}
        self._ops: list[Op] = []
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._counts: dict[str, int] = {}

    # ---- primitives ---------------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        n = self._counts.get(stem, 0)
        self._counts[stem] = n + 1
        name = f"{stem}{n}" if n or stem[-1].isdigit() else stem
        while name in self._tensors or any(o.name == name for o in self._ops):
            n += 1
            self._counts[stem] = n + 1
            name = f"{stem}{n}"
        return name

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self._tensors[tensor].shape

    def input(self, name: str, shape: Sequence[int]) -> str:
        self._tensors[name] = Tensor(name, tuple(shape))
        self._inputs.append(name)
        return name

    def const(self, name: str, value: Any, dtype: str | None = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        name = name if name not in self._tensors else self.fresh(name)
        self._tensors[name] = Tensor(name, arr.shape, str(arr.dtype), arr)
        return name

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
        name: str | None = None,
        n_outputs: int = 1,
    ) -> str:
        """Add an op and return the name of its first output."""
        name = name or self.fresh(op_type.lower())
        outputs = [name] + [f"{name}.out{i}" for i in range(1, n_outputs)]
        op = Op(name, op_type, tuple(inputs), tuple(outputs), dict(attrs or {}))
        shapes = infer_op_shapes(op, self._tensors)
        for out, shape in zip(outputs, shapes):
            if shape is None:
                raise ShapeError(f"op '{name}' ({op_type}): no shape inference for this op type")
            self._tensors[out] = Tensor(out, shape)
        self._ops.append(op)
        return name

    def output(self, *names: str) -> None:
        self._outputs.extend(names)

    def build(self) -> Graph:
        outputs = self._outputs or [self._ops[-1].outputs[0]]
        return Graph(
            self.name, dict(self._tensors), tuple(self._ops), tuple(self._inputs), tuple(outputs)
        ).lint()

    # ---- weights ------------------------------------------------------------------------
    def weight(self, name: str, shape: Sequence[int], fan_in: int) -> str:
        from fusiontune.limits import check_tensor

        check_tensor(name, shape, 8, f"graph '{self.name}'")  # drawn as float64, then cast
        w = self.rng.standard_normal(tuple(shape)) * np.sqrt(2.0 / max(fan_in, 1))
        return self.const(name, w.astype(np.float32))

    def bias(self, name: str, n: int) -> str:
        return self.const(name, (0.1 * self.rng.standard_normal(n)).astype(np.float32))

    # ---- layers -------------------------------------------------------------------------
    def conv(
        self,
        x: str,
        c_out: int,
        k: int | Sequence[int],
        stride: int = 1,
        pad: int | None = None,
        group: int = 1,
        bias: bool = True,
        dilation: int = 1,
        name: str | None = None,
    ) -> str:
        name = name or self.fresh("conv")
        c_in = self.shape(x)[1]
        ks = (k, k) if isinstance(k, int) else tuple(k)
        pad = (ks[0] - 1) // 2 * dilation if pad is None else pad
        w = self.weight(
            f"{name}.weight", (c_out, c_in // group, *ks), c_in // group * ks[0] * ks[1]
        )
        ins = [x, w] + ([self.bias(f"{name}.bias", c_out)] if bias else [])
        attrs = {
            "kernel_shape": ks,
            "strides": (stride, stride),
            "pads": (pad,) * 4,
            "dilations": (dilation, dilation),
            "group": group,
        }
        return self.op(CONV, ins, attrs, name=name)

    def conv_transpose(
        self,
        x: str,
        c_out: int,
        k: int,
        stride: int = 1,
        pad: int = 0,
        output_padding: int = 0,
        group: int = 1,
        bias: bool = True,
        name: str | None = None,
    ) -> str:
        """A 2-D ConvTranspose (weight ``(C_in, C_out/group, k, k)``)."""
        name = name or self.fresh("convtranspose")
        c_in = self.shape(x)[1]
        w = self.weight(f"{name}.weight", (c_in, c_out // group, k, k), c_in // group * k * k)
        ins = [x, w] + ([self.bias(f"{name}.bias", c_out)] if bias else [])
        attrs = {
            "kernel_shape": (k, k),
            "strides": (stride, stride),
            "pads": (pad,) * 4,
            "output_padding": (output_padding, output_padding),
            "group": group,
        }
        return self.op(CONV_TRANSPOSE, ins, attrs, name=name)

    def resize(
        self,
        x: str,
        scale: int,
        mode: str = "nearest",
        coordinate_transformation_mode: str = "asymmetric",
        name: str | None = None,
    ) -> str:
        """Resize the spatial axes of an ``(N, C, H, W)`` tensor by ``scale`` (``scales``
        input, ``nearest_mode`` floor as torch exports ``F.interpolate``)."""
        name = name or self.fresh("resize")
        scales = self.const(f"{name}.scales", np.asarray([1, 1, scale, scale], np.float32))
        attrs = {
            "mode": mode,
            "coordinate_transformation_mode": coordinate_transformation_mode,
            "nearest_mode": "floor",
        }
        return self.op(RESIZE, [x, "", scales], attrs, name=name)

    def bn(self, x: str, training: bool = False, name: str | None = None) -> str:
        name = name or self.fresh("bn")
        c = self.shape(x)[1]
        gamma = self.const(
            f"{name}.scale", (1.0 + 0.1 * self.rng.standard_normal(c)).astype(np.float32)
        )
        beta = self.const(f"{name}.bias", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const(f"{name}.mean", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const(f"{name}.var", (0.5 + self.rng.random(c)).astype(np.float32))
        attrs: dict[str, Any] = {"epsilon": NORM_EPSILON, "momentum": BN_MOMENTUM}
        if training:
            attrs["training_mode"] = 1
        return self.op(BATCH_NORM, [x, gamma, beta, mean, var], attrs, name=name)

    def gemm(self, x: str, n_out: int, bias: bool = True, name: str | None = None) -> str:
        """Fully connected layer as ONNX Gemm with transB=1 (weight shape (out, in))."""
        name = name or self.fresh("fc")
        k = self.shape(x)[-1]
        w = self.weight(f"{name}.weight", (n_out, k), k)
        ins = [x, w] + ([self.bias(f"{name}.bias", n_out)] if bias else [])
        return self.op(GEMM, ins, {"transB": 1}, name=name)

    def matmul(self, x: str, n_out: int, bias: bool = True, name: str | None = None) -> str:
        """Fully connected layer as MatMul (+ Add of a constant bias), as exporters emit it."""
        name = name or self.fresh("matmul")
        k = self.shape(x)[-1]
        w = self.weight(f"{name}.weight", (k, n_out), k)
        y = self.op(MATMUL, [x, w], name=name)
        if bias:
            y = self.op(ADD, [y, self.bias(f"{name}.bias", n_out)], name=f"{name}_bias")
        return y

    def act(self, op_type: str, x: str, name: str | None = None, **attrs: Any) -> str:
        return self.op(op_type, [x], attrs, name=name)

    def relu(self, x: str, name: str | None = None) -> str:
        return self.op(RELU, [x], name=name)

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self.op(ADD, [a, b], name=name)

    def maxpool(
        self,
        x: str,
        k: int,
        stride: int | None = None,
        pad: int = 0,
        ceil_mode: int = 0,
        name: str | None = None,
    ) -> str:
        s = k if stride is None else stride
        attrs = {
            "kernel_shape": (k, k),
            "strides": (s, s),
            "pads": (pad,) * 4,
            "ceil_mode": ceil_mode,
        }
        return self.op(MAX_POOL, [x], attrs, name=name)

    def avgpool(
        self, x: str, k: int, stride: int | None = None, pad: int = 0, name: str | None = None
    ) -> str:
        s = k if stride is None else stride
        attrs = {"kernel_shape": (k, k), "strides": (s, s), "pads": (pad,) * 4}
        return self.op(AVERAGE_POOL, [x], attrs, name=name)

    def global_avgpool(self, x: str, name: str | None = None) -> str:
        return self.op(GLOBAL_AVERAGE_POOL, [x], name=name)

    def flatten(self, x: str, axis: int = 1, name: str | None = None) -> str:
        return self.op(FLATTEN, [x], {"axis": axis}, name=name)

    def reshape(self, x: str, shape: Sequence[int], name: str | None = None) -> str:
        name = name or self.fresh("reshape")
        s = self.const(f"{name}.shape", np.asarray(shape, dtype=np.int64))
        return self.op(RESHAPE, [x, s], name=name)

    def layernorm(self, x: str, axis: int = -1, name: str | None = None) -> str:
        name = name or self.fresh("layernorm")
        n = self.shape(x)[-1]
        g = self.const(
            f"{name}.scale", (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)
        )
        b = self.const(f"{name}.bias", (0.1 * self.rng.standard_normal(n)).astype(np.float32))
        return self.op(LAYER_NORM, [x, g, b], {"axis": axis, "epsilon": NORM_EPSILON}, name=name)
