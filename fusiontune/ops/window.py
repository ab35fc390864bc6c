"""Sliding windows and pooling: the window geometry of Conv and pools, and the pooling ops.

:class:`Window` is the one resolved geometry (kernel, strides, dilations, pads, output size)
that shape inference, the reference kernels, the fused band kernels and the capacity model
share; :func:`window_geometry` resolves it once from ONNX attributes (``pads``, ``auto_pad``,
``ceil_mode``). The reference pools run on :func:`numpy.lib.stride_tricks.sliding_window_view`;
the fused pools (:func:`pool_nd`) reduce one kernel offset at a time and run on a band of
output rows whose halo replaces part of the padding (:meth:`Window.band`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ir.opclass import OpClass
from fusiontune.ops.base import (
    DTYPE,
    SAME_AS_REFERENCE,
    Array,
    Inputs,
    Kernel,
    OpDef,
    PoolReduce,
    Shape,
    Shapes,
    Tensors,
    attr_f,
    attr_i,
    numel,
    one_activation,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op


@dataclass(frozen=True)
class Window:
    """Resolved geometry of a sliding-window op over the spatial axes.

    ``pads_begin``/``pads_end`` are explicit padding (they count for ``count_include_pad``);
    rows a ceil-mode window needs beyond them are added as extension padding that never counts.
    """

    kernel: Shape
    strides: Shape
    dilations: Shape
    pads_begin: Shape
    pads_end: Shape
    out_spatial: Shape

    @cached_property
    def effective(self) -> Shape:
        """Extent of the dilated kernel on each axis."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations))

    def input_rows(self, a: int, b: int) -> tuple[int, int]:
        """Input rows (axis 2, unpadded coordinates, may reach outside) for output rows [a, b)."""
        start = a * self.strides[0] - self.pads_begin[0]
        end = (b - 1) * self.strides[0] - self.pads_begin[0] + self.effective[0]
        return start, end

    def band(self, a: int, b: int, height: int) -> tuple[Window, int, int]:
        """Geometry for output rows [a, b) computed from input rows [lo, hi) of ``height``.

        Returns the band window and ``(lo, hi)``, the rows of the real input it reads; the
        missing halo rows become padding (explicit padding where the full op had it).
        """
        start, end = self.input_rows(a, b)
        lo, hi = max(start, 0), min(end, height)
        pad_top = lo - start
        pad_bottom = max(0, min(end, height + self.pads_end[0]) - height) if end > height else 0
        win = replace(
            self,
            pads_begin=(pad_top, *self.pads_begin[1:]),
            pads_end=(pad_bottom, *self.pads_end[1:]),
            out_spatial=(b - a, *self.out_spatial[1:]),
        )
        return win, lo, hi


def window_geometry(op: Op, in_spatial: Sequence[int], kernel: Sequence[int]) -> Window:
    """Resolve the window geometry of a Conv or pooling op (ONNX semantics).

    ``strides``, ``dilations`` and ``pads`` default to ones and zeros of the input's rank;
    ``ceil_mode`` (pools only) to 0 and ``auto_pad`` to ``NOTSET``.
    """
    nd = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(int(s) for s in op.attr("strides", (1,) * nd))
    dilations = tuple(int(d) for d in op.attr("dilations", (1,) * nd))
    ceil_mode = bool(int(op.attr("ceil_mode", 0)))
    auto_pad = _auto_pad(op)
    if len(strides) != nd or len(dilations) != nd or len(kernel) != nd:
        raise ShapeError(
            f"op '{op.name}' ({op.op_type}): kernel/strides/dilations must have {nd} entries, "
            f"got kernel={kernel}, strides={strides}, dilations={dilations}"
        )
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(i / s) for i, s in zip(in_spatial, strides)]
        total = [max((o - 1) * s + e - i, 0) for o, s, e, i in zip(out, strides, eff, in_spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))
    if auto_pad == "VALID":
        begin = end = [0] * nd
    elif auto_pad in ("NOTSET", ""):
        pads = tuple(int(p) for p in op.attr("pads", (0,) * (2 * nd)))
        if len(pads) != 2 * nd:
            raise ShapeError(f"op '{op.name}' ({op.op_type}): pads must have {2 * nd} entries")
        begin, end = list(pads[:nd]), list(pads[nd:])
    else:
        raise ShapeError(
            f"op '{op.name}' ({op.op_type}): auto_pad '{auto_pad}' is not one of "
            "NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    out = []
    for i, s, e, b, p_end in zip(in_spatial, strides, eff, begin, end):
        span = i + b + p_end - e
        if span < 0:
            raise ShapeError(
                f"op '{op.name}' ({op.op_type}): window {e} is larger than padded input "
                f"{i + b + p_end}"
            )
        o = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:
            o -= 1  # the last window must start inside the input or the left padding
        out.append(o)
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))


def _auto_pad(op: Op) -> str:
    value = op.attr("auto_pad", "NOTSET")
    return value.decode() if isinstance(value, bytes) else str(value or "NOTSET")


def has_padding(op: Op) -> bool:
    """Whether a window op pads its input (explicit pads, or SAME padding of a kernel > 1)."""
    kernel = op.attr("kernel_shape", ())
    if _auto_pad(op).startswith("SAME") and any(int(k) > 1 for k in kernel):
        return True
    return any(int(p) != 0 for p in op.attr("pads", ()))


def pad_for_window(x: Array, win: Window, fill: float) -> Array:
    """Pad the spatial axes with the explicit pads plus what ceil_mode's last window needs.

    An integer array (a quantized tensor in a max pool) takes ``fill`` clipped to its type's
    range: ``-inf`` pads with the smallest code.
    """
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        fill = float(np.clip(fill, info.min, info.max))
    widths = [(0, 0), (0, 0)]
    for n, o, s, e, pb, pe in zip(
        x.shape[2:], win.out_spatial, win.strides, win.effective, win.pads_begin, win.pads_end
    ):
        need = (o - 1) * s + e  # padded extent the windows touch
        widths.append((pb, max(pe, need - pb - n)))
    if all(w == (0, 0) for w in widths):
        return x
    # a filled array and one slice copy: np.pad's general path costs more than the copy
    out = np.full(tuple(d + a + b for d, (a, b) in zip(x.shape, widths)), fill, dtype=x.dtype)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, widths))] = x
    return out


# ---- reference: sliding-window views ------------------------------------------------------
def window_view(xp: Array, win: Window) -> Array:
    """Windows of a padded NC* array: shape (N, C, *out_spatial, *kernel), a view."""
    nd = len(win.kernel)
    view = sliding_window_view(xp, win.effective, axis=tuple(range(2, 2 + nd)))
    out_idx = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(win.out_spatial, win.strides))
    win_idx = tuple(slice(None, None, d) for d in win.dilations)
    index = (slice(None), slice(None), *out_idx, *win_idx)
    return view[index]


def _pool_window(op: Op, x: Array) -> Window:
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise ShapeError(f"op '{op.name}' ({op.op_type}): kernel_shape is required")
    return window_geometry(op, x.shape[2:], kernel)


def _window_axes(win: Window) -> tuple[int, ...]:
    nd = len(win.kernel)
    return tuple(range(2 + nd, 2 + 2 * nd))


def _maxpool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    win = _pool_window(op, x)
    y = np.max(window_view(pad_for_window(x, win, -np.inf), win), axis=_window_axes(win))
    if len(op.outputs) > 1 and op.outputs[1]:
        raise FusiontuneError(f"op '{op.name}' (MaxPool): the Indices output is not supported")
    return [y.astype(x.dtype, copy=False)]


def _averagepool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    win = _pool_window(op, x)
    axes = _window_axes(win)
    total = np.sum(window_view(pad_for_window(x, win, 0.0), win), axis=axes)
    # divisor: the input region, plus the explicit pads when count_include_pad=1; the extra
    # region ceil_mode adds beyond the pads is never counted (onnxruntime, onnx reference)
    ones = np.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    if attr_i(op, "count_include_pad"):
        ones = np.pad(ones, [(0, 0), (0, 0), *zip(win.pads_begin, win.pads_end)], constant_values=1)
        inner = replace(win, pads_begin=(0,) * len(win.kernel), pads_end=(0,) * len(win.kernel))
        count = np.sum(window_view(pad_for_window(ones, inner, 0.0), inner), axis=axes)
    else:
        count = np.sum(window_view(pad_for_window(ones, win, 0.0), win), axis=axes)
    return [(total / count).astype(x.dtype, copy=False)]


def _lppool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    win = _pool_window(op, x)
    p = attr_f(op, "p")
    view = window_view(pad_for_window(np.abs(x) ** p, win, 0.0), win)
    return [(np.sum(view, axis=_window_axes(win)) ** (1.0 / p)).astype(x.dtype, copy=False)]


def _global_pool(reduce: Callable[..., Array]) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True)]

    return kernel


def _global_lppool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    p = attr_f(op, "p")
    y = np.sum(np.abs(x) ** p, axis=tuple(range(2, x.ndim)), keepdims=True) ** (1.0 / p)
    return [y.astype(x.dtype, copy=False)]


# ---- fused: one kernel offset at a time, on bands of rows ---------------------------------
def offset_slices(win: Window) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel offset, the strided slice of the padded input it multiplies."""
    out = []
    for offs in itertools.product(*(range(k) for k in win.kernel)):
        sl = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offs, win.dilations, win.out_spatial, win.strides)
        )
        out.append((offs, (slice(None), slice(None), *sl)))
    return out


def _window_sum(x: Array, win: Window) -> Array:
    xp = pad_for_window(x, win, 0.0)
    total = np.zeros((*x.shape[:2], *win.out_spatial), dtype=DTYPE)
    for _, sl in offset_slices(win):
        total += xp[sl]
    return total


def pool_nd(x: Array, kind: str, win: Window, count_include_pad: bool = False) -> Array:
    """Max or average pooling (``kind`` is ``"max"`` or ``"avg"``) by kernel-offset reduction."""
    if kind == "max":
        xp = pad_for_window(x, win, -np.inf)
        out = None
        for _, sl in offset_slices(win):
            out = xp[sl].copy() if out is None else np.maximum(out, xp[sl], out=out)
        assert out is not None
        return out
    total = _window_sum(x, win)
    # divisor: window cells inside the input (or inside explicit padding)
    ones = np.ones((1, 1, *x.shape[2:]), dtype=DTYPE)
    if count_include_pad:
        ones = np.pad(ones, [(0, 0), (0, 0), *zip(win.pads_begin, win.pads_end)], constant_values=1)
        inner = replace(win, pads_begin=(0,) * len(win.kernel), pads_end=(0,) * len(win.kernel))
        count = _window_sum(ones, inner)
    else:
        count = _window_sum(ones, win)
    return (total / count).astype(DTYPE, copy=False)


def _max_band(op: Op, x: Array, win: Window) -> Array:
    return pool_nd(x, "max", win)


def _avg_band(op: Op, x: Array, win: Window) -> Array:
    return pool_nd(x, "avg", win, bool(attr_i(op, "count_include_pad")))


def _whole(band: Callable[[Op, Array, Window], Array]) -> Kernel:
    """The fused kernel of a banded op: its band kernel over every output row."""

    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [band(op, x, _pool_window(op, x))]

    return kernel


# ---- shapes, cost and capacity ------------------------------------------------------------
def _pool_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise ShapeError(f"op '{op.name}' ({op.op_type}): kernel_shape is required")
    win = window_geometry(op, x[2:], kernel)
    pooled = (x[0], x[1], *win.out_spatial)
    out: Shapes = [pooled, pooled]
    return out[:n_out]


def _global_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    return [(x[0], x[1]) + (1,) * (len(x) - 2)] + [None] * (n_out - 1)


def pool_kernel_shape(graph: Graph, op: Op) -> Shape:
    """The ``kernel_shape`` attribute of a pool (empty when absent)."""
    return tuple(int(k) for k in op.attr("kernel_shape") or ())


def _pool_element_ops(graph: Graph, op: Op) -> int:
    """One ALU op per window cell per output element."""
    return numel(graph, op.outputs[0]) * math.prod(int(k) for k in op.attr("kernel_shape"))


def _global_element_ops(graph: Graph, op: Op) -> int:
    """One ALU op per input element."""
    return numel(graph, op.inputs[0])


_WINDOW_RULE = one_activation(OpClass.WINDOW)
_PADDING = {"auto_pad": "NOTSET", "ceil_mode": 0}  # ONNX defaults of every spatial pool


def _spatial_pool(
    op_type: str,
    reference: Kernel,
    band: Callable[[Op, Array, Window], Array] | None,
    defaults: Mapping[str, object],
    **facts: Any,
) -> OpDef:
    """A pool sliding a ``kernel_shape`` window; with a band kernel the executor runs it by
    bands of rows (and on whole arrays through the same code)."""
    return OpDef(
        op_type,
        _WINDOW_RULE,
        {**_PADDING, **defaults},
        shape=_pool_shape,
        reference=reference,
        fused=_whole(band) if band is not None else SAME_AS_REFERENCE,
        band=band,
        element_ops=_pool_element_ops,
        kernel_shape=pool_kernel_shape,
        **facts,
    )


def _global_pool_def(op_type: str, reference: Kernel, **facts: Any) -> OpDef:
    return OpDef(
        op_type,
        _WINDOW_RULE,
        shape=_global_shape,
        reference=reference,
        element_ops=_global_element_ops,
        global_pool=True,
        **facts,
    )


MAX_POOL = "MaxPool"
AVERAGE_POOL = "AveragePool"
GLOBAL_AVERAGE_POOL = "GlobalAveragePool"
"""Op types the graph builder (``ir/builder.py``) emits."""

OPS: tuple[OpDef, ...] = (
    _spatial_pool(
        MAX_POOL,
        _maxpool,
        _max_band,
        {"storage_order": 0},
        out_dtypes={1: "int64"},
        pool_reduce=PoolReduce.MAX,
    ),
    _spatial_pool(
        AVERAGE_POOL,
        _averagepool,
        _avg_band,
        {"count_include_pad": 0},
        linear_map=True,
        pool_reduce=PoolReduce.MEAN,
    ),
    _spatial_pool("LpPool", _lppool, None, {"p": 2}),
    _global_pool_def(
        GLOBAL_AVERAGE_POOL, _global_pool(np.mean), linear_map=True, pool_reduce=PoolReduce.MEAN
    ),
    _global_pool_def("GlobalMaxPool", _global_pool(np.max), pool_reduce=PoolReduce.MAX),
    OpDef("GlobalLpPool", defaults={"p": 2}, shape=_global_shape, reference=_global_lppool),
)
