"""LINEAR ops (Conv, Gemm, MatMul with a constant weight) and their weights on crossbars.

- Reference kernels: Conv as im2col over a sliding-window view and one batched matmul;
  ConvTranspose as a stride-1 convolution of the whole zero-upsampled input; Gemm and MatMul
  as numpy products.
- Fused kernels: :func:`conv_nd` (im2col + matmul, or kernel-offset accumulation for
  depthwise convolutions) on an explicit :class:`~fusiontune.ops.window.Window`, so that a
  fused group can run it on a band of rows; :func:`conv_transpose_rows` builds the band of
  the zero-upsampled input a band of ConvTranspose output rows reads (its
  :class:`~fusiontune.ops.base.RowSpans`) and runs :func:`conv_nd` on it; ``matmul`` is
  pluggable (CIM numerics).
- :class:`LinearParams` is a LINEAR op as weights the executor folds AFFINE ops into
  (DESIGN §5 rule 5) and merges (P3); :func:`linear_params` builds it, :func:`apply_matrix`
  runs a matrix.
- For the cost model: each OpDef's ``matrix`` gives the op's crossbar matrix, ``fc_like``
  whether a P3 merge may chain it.

Everything runs in float32; folded or merged weights are computed in float64 and rounded once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from fusiontune.errors import FusiontuneError, IllegalPlanError, ShapeError
from fusiontune.ir.quant import CrossbarGrid
from fusiontune.ops.base import (
    DTYPE,
    Array,
    Inputs,
    OpDef,
    RowBand,
    RowSpans,
    Shape,
    Shapes,
    Tensors,
    arg,
    attr_f,
    attr_i,
    attr_s,
    broadcast_shapes,
    linear_rule,
    rows_of,
)
from fusiontune.ops.window import (
    Window,
    has_padding,
    offset_slices,
    pad_for_window,
    window_geometry,
    window_view,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

MatmulFn = Callable[[Array, Array], Array]  # (M, K) @ (K, N) -> (M, N)


@runtime_checkable
class GridMatmul(Protocol):
    """A crossbar product that uses its operands' integer grids (CIM numerics on a quantized
    model); :func:`on_grid` makes one from a matmul that offers ``on_grid``."""

    def __call__(self, x: Array, w: Array) -> Array: ...

    def columns(self, lo: int, hi: int) -> GridMatmul:
        """The same product for output columns ``lo:hi`` of the weight it was bound to."""
        ...


def on_grid(
    matmul: MatmulFn, grid: CrossbarGrid | None, lo: int = 0, hi: int | None = None
) -> MatmulFn:
    """``matmul`` told the grids of a LINEAR op's operands (columns ``lo:hi`` of its weight);
    a matmul without ``on_grid`` (float) or a ``None`` grid is returned unchanged."""
    bind = getattr(matmul, "on_grid", None)
    if grid is None or bind is None:
        return matmul
    if grid.w_scale is not None and (lo or hi is not None):
        grid = grid.columns(lo, len(grid.w_scale) if hi is None else hi)
    bound: MatmulFn = bind(grid)
    return bound


def grid_columns(p: LinearParams, cols: slice) -> CrossbarGrid | None:
    """The grid of ``p`` for its output columns ``cols`` (a tile of a ``"matrix"`` op)."""
    if p.grid is None or p.grid.w_scale is None:
        return p.grid
    lo, hi, _ = cols.indices(len(p.grid.w_scale))
    return p.grid.columns(lo, hi)


def _columns(matmul: MatmulFn, lo: int, hi: int) -> MatmulFn:
    return matmul.columns(lo, hi) if isinstance(matmul, GridMatmul) else matmul


def matmul_float(x: Array, w: Array) -> Array:
    """Plain float32 matrix product (the ``numerics="float"`` crossbar)."""
    return np.matmul(x, w)


# ---- reference ----------------------------------------------------------------------------
def _conv(op: Op, inputs: Inputs) -> list[Array]:
    x, w, b = inputs[0], inputs[1], arg(inputs, 2)
    assert x is not None and w is not None
    win = window_geometry(op, x.shape[2:], w.shape[2:])
    return [_conv_core(pad_for_window(x, win, 0.0), w, b, attr_i(op, "group"), win)]


def _conv_core(xp: Array, w: Array, b: Array | None, group: int, win: Window) -> Array:
    """Grouped convolution of an already padded input (im2col + one batched matmul)."""
    nd = xp.ndim - 2
    cols_view = window_view(xp, win)  # (N, C, *out, *k)
    n = xp.shape[0]
    m, cg = w.shape[:2]
    out_sp = win.out_spatial
    p, k = math.prod(out_sp), math.prod(win.kernel)
    # im2col per group: (G, N*P, Cg*K) @ (G, Cg*K, M/G) -> (G, N*P, M/G)
    cols_view = cols_view.reshape(n, group, cg, *out_sp, *win.kernel)
    perm = (1, 0, *range(3, 3 + nd), 2, *range(3 + nd, 3 + 2 * nd))
    cols = cols_view.transpose(perm).reshape(group, n * p, cg * k)
    wg = w.reshape(group, m // group, cg * k).transpose(0, 2, 1)
    y = np.matmul(cols, wg)  # (G, N*P, M/G)
    y = y.reshape(group, n, p, m // group).transpose(1, 0, 3, 2).reshape(n, m, *out_sp)
    if b is not None:
        y = y + b.reshape((m,) + (1,) * nd)
    return np.ascontiguousarray(y)


# ---- ConvTranspose ------------------------------------------------------------------------
@dataclass(frozen=True)
class Deconv:
    """Resolved ConvTranspose geometry: the op as a stride-1 convolution of its input with
    ``strides - 1`` zeros inserted between samples, padded by ``begin``/``end`` (negative
    amounts crop), with the spatially flipped kernel whose channels are swapped per group.

    ``begin = eff - 1 - pads_begin`` and ``end = eff - 1 - pads_end + output_padding`` per
    axis, ``eff`` the dilated kernel extent; ``out_spatial`` follows from them.
    """

    kernel: Shape
    strides: Shape
    dilations: Shape
    begin: Shape
    end: Shape
    in_spatial: Shape
    out_spatial: Shape

    @property
    def effective(self) -> Shape:
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations))

    def spans(self) -> RowSpans:
        """Input rows each output row (axis 2) reads: ``i`` with ``i·s + begin`` in
        ``[r, r + eff)``."""
        s, b, e, h = self.strides[0], self.begin[0], self.effective[0], self.in_spatial[0]
        first = tuple(min(max(-((b - r) // s), 0), h) for r in range(self.out_spatial[0]))
        end = tuple(min(max((r + e - 1 - b) // s + 1, 0), h) for r in range(self.out_spatial[0]))
        return RowSpans(first, end, h)


def deconv_geometry(op: Op, in_spatial: Sequence[int], kernel: Sequence[int]) -> Deconv:
    """Resolve a ConvTranspose's geometry (ONNX attributes; ``auto_pad`` as onnxruntime:
    SAME_* gives ``in * stride`` outputs, SAME_UPPER puts the odd padding row last).

    Raises:
        FusiontuneError: an ``output_shape`` attribute (not supported: give ``pads`` and
            ``output_padding``) or an unknown ``auto_pad`` (the op is then OPAQUE).
    """
    reason = _conv_transpose_unsupported(op)
    if reason is not None:
        raise FusiontuneError(f"op '{op.name}' (ConvTranspose): unsupported {reason}")
    nd = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(int(v) for v in op.attr("strides", (1,) * nd))
    dilations = tuple(int(v) for v in op.attr("dilations", (1,) * nd))
    out_pad = tuple(int(v) for v in op.attr("output_padding", (0,) * nd))
    if not len(strides) == len(dilations) == len(out_pad) == len(kernel) == nd:
        raise ShapeError(
            f"op '{op.name}' (ConvTranspose): kernel/strides/dilations/output_padding must "
            f"have {nd} entries"
        )
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    auto_pad = attr_s(op, "auto_pad")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (i - 1) * s + o + e - i * s)
            for i, s, o, e in zip(in_spatial, strides, out_pad, eff)
        ]
        more, less = [t - t // 2 for t in total], [t // 2 for t in total]
        head, tail = (less, more) if auto_pad == "SAME_UPPER" else (more, less)
    elif auto_pad == "VALID":
        head = tail = [0] * nd
    else:
        pads = tuple(int(v) for v in op.attr("pads", (0,) * (2 * nd)))
        if len(pads) != 2 * nd:
            raise ShapeError(f"op '{op.name}' (ConvTranspose): pads must have {2 * nd} entries")
        head, tail = list(pads[:nd]), list(pads[nd:])
    begin = tuple(e - 1 - p for e, p in zip(eff, head))
    end = tuple(e - 1 - p + o for e, p, o in zip(eff, tail, out_pad))
    out = tuple(
        (i - 1) * s + 1 + b + z - e + 1
        for i, s, b, z, e in zip(in_spatial, strides, begin, end, eff)
    )
    if any(o <= 0 for o in out):
        raise ShapeError(f"op '{op.name}' (ConvTranspose): output spatial size {out} is empty")
    return Deconv(kernel, strides, dilations, begin, end, tuple(int(i) for i in in_spatial), out)


_AUTO_PADS = ("NOTSET", "", "SAME_UPPER", "SAME_LOWER", "VALID")


def _conv_transpose_unsupported(op: Op, tensors: Tensors | None = None) -> str | None:
    """What of a ConvTranspose fusiontune does not model (it then stays OPAQUE)."""
    if op.attr("output_shape") is not None:
        return "attribute output_shape (give pads and output_padding)"
    if attr_s(op, "auto_pad") not in _AUTO_PADS:
        return f"auto_pad '{attr_s(op, 'auto_pad')}' is not one of {', '.join(_AUTO_PADS[2:])}"
    return None


def deconv_weight(w: Array, group: int) -> Array:
    """The convolution weight ``(C_out, C_in/group, *k)`` equivalent to a ConvTranspose
    weight ``(C_in, C_out/group, *k)``: channels swapped per group, kernel flipped."""
    c, mg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    wt = w.reshape(group, c // group, mg, *kernel).swapaxes(1, 2)
    wt = np.flip(wt, axis=tuple(range(3, 3 + len(kernel))))
    return np.ascontiguousarray(wt.reshape(group * mg, c // group, *kernel))


def _conv_transpose(op: Op, inputs: Inputs) -> list[Array]:
    """Reference: zero-upsample the whole input, pad (or crop), convolve (im2col)."""
    x, w, b = inputs[0], inputs[1], arg(inputs, 2)
    assert x is not None and w is not None
    nd, group = x.ndim - 2, attr_i(op, "group")
    geo = deconv_geometry(op, x.shape[2:], w.shape[2:])
    up_shape = [(i - 1) * s + 1 for i, s in zip(x.shape[2:], geo.strides)]
    up = np.zeros((*x.shape[:2], *up_shape), dtype=x.dtype)
    every_stride = (slice(None), slice(None), *(slice(None, None, s) for s in geo.strides))
    up[every_stride] = x
    begin, end = geo.begin, geo.end
    xp = np.pad(up, [(0, 0), (0, 0), *((max(a, 0), max(z, 0)) for a, z in zip(begin, end))])
    crop = [slice(-min(a, 0), size + min(z, 0)) for size, a, z in zip(xp.shape[2:], begin, end)]
    xp = xp[tuple([slice(None), slice(None), *crop])]  # negative amounts crop
    zeros = (0,) * nd
    win = Window(geo.kernel, (1,) * nd, geo.dilations, zeros, zeros, geo.out_spatial)
    return [_conv_core(xp, deconv_weight(w, group), b, group, win)]


def conv_transpose_rows(
    x: Array,
    weight: Array,
    bias: Array | None,
    group: int,
    geo: Deconv,
    band: RowBand,
    matmul: MatmulFn = matmul_float,
) -> Array:
    """Output rows ``[band.a, band.b)`` (axis 2) of a ConvTranspose from its input rows
    ``[band.lo, band.lo + x.shape[2])``.

    The band of the zero-upsampled, padded input that these rows read is built row by row
    (input row ``i`` lands on band row ``i·s + begin - a``; every other row is a zero), the
    other spatial axes upsampled and padded whole; then :func:`conv_nd` with stride 1.

    Args:
        x: input rows ``(N, C_in, rows, *other spatial)``.
        weight: the ONNX weight ``(C_in, C_out/group, *k)`` (folded or not).
        bias: ``(C_out,)`` or ``None``.
        group: ONNX ``group``.
        geo: the op's :class:`Deconv` geometry.
        band: where the rows lie.
        matmul: the crossbar product.
    """
    nd = x.ndim - 2
    eff = geo.effective
    s0, b0 = geo.strides[0], geo.begin[0]
    band_h = band.b - band.a + eff[0] - 1
    others = [
        ((i - 1) * s + 1, s, a, z)
        for i, s, a, z in zip(x.shape[3:], geo.strides[1:], geo.begin[1:], geo.end[1:])
    ]
    width = [u + a + z for u, _, a, z in others]
    rows = band.lo + np.arange(x.shape[2])
    dest = rows * s0 + b0 - band.a
    keep = (dest >= 0) & (dest < band_h)
    up = np.zeros((*x.shape[:2], band_h, *width), dtype=DTYPE)
    if keep.any():
        src = x[:, :, keep]
        # the other axes: samples every ``s`` from ``begin`` (cropped where begin < 0)
        padded = tuple(u + max(a, 0) + max(z, 0) for u, _, a, z in others)
        placed = np.zeros(src.shape[:3] + padded, dtype=DTYPE)
        lead = (slice(None),) * 3
        spots = tuple(slice(max(a, 0), max(a, 0) + u, s) for u, s, a, _ in others)
        placed[lead + spots] = src
        crop = tuple(slice(-min(a, 0), -min(a, 0) + w) for (_, _, a, _), w in zip(others, width))
        up[:, :, dest[keep]] = placed[lead + crop]
    zeros = (0,) * nd
    out_sp = (band.b - band.a, *geo.out_spatial[1:])
    win = Window(geo.kernel, (1,) * nd, geo.dilations, zeros, zeros, out_sp)
    return conv_nd(up, deconv_weight(weight, group), bias, win, group, matmul)


def _conv_transpose_fused(op: Op, inputs: Inputs) -> list[Array]:
    """The executor's kernel on the whole tensor (one band of every row)."""
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    geo = deconv_geometry(op, x.shape[2:], w.shape[2:])
    band = RowBand(0, 0, geo.out_spatial[0], x.shape[2])
    return [conv_transpose_rows(x, w, arg(inputs, 2), attr_i(op, "group"), geo, band)]


def _conv_transpose_spans(graph: Graph, op: Op) -> RowSpans:
    x = graph.tensors[op.inputs[0]].shape
    return deconv_geometry(op, x[2:], conv_kernel_shape(graph, op)).spans()


def _conv_transpose_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x, w = ins[0], ins[1]
    assert x is not None and w is not None
    if _conv_transpose_unsupported(op) is not None:
        return [None] * n_out  # output_shape: left to onnx.shape_inference (the op is OPAQUE)
    group = attr_i(op, "group")
    if x[1] != w[0] or w[0] % group:
        raise ShapeError(
            f"op '{op.name}' (ConvTranspose): input has {x[1]} channels, weight {w} expects "
            f"{w[0]} (a multiple of group {group})"
        )
    kernel = tuple(op.attr("kernel_shape", w[2:]))
    if kernel != tuple(w[2:]):
        raise ShapeError(
            f"op '{op.name}' (ConvTranspose): kernel_shape {kernel} != weight shape {w[2:]}"
        )
    geo = deconv_geometry(op, x[2:], w[2:])
    return [(x[0], w[1] * group, *geo.out_spatial)] + [None] * (n_out - 1)


def _conv_transpose_matrix(graph: Graph, op: Op) -> Matrix:
    """As the equivalent convolution: ``C_in/g * prod(K)`` x ``C_out/g``, ``g`` of them,
    one product per output pixel (the inserted zeros are read like any input)."""
    w = graph.tensors[op.inputs[1]].shape
    out = graph.tensors[op.outputs[0]].shape
    g = attr_i(op, "group")
    return w[0] // g * math.prod(w[2:]), w[1], g, out[0] * math.prod(out[2:]), rows_of(out)


def _gemm(op: Op, inputs: Inputs) -> list[Array]:
    a, b, c = inputs[0], inputs[1], arg(inputs, 2)
    assert a is not None and b is not None
    a = a.T if attr_i(op, "transA") else a
    b = b.T if attr_i(op, "transB") else b
    y = np.matmul(a, b)
    alpha, beta = attr_f(op, "alpha"), attr_f(op, "beta")
    if alpha != 1.0:
        y = alpha * y
    if c is not None:
        y = y + (c if beta == 1.0 else beta * c)
    return [y.astype(a.dtype, copy=False)]


def _matmul(op: Op, inputs: Inputs) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.matmul(a, b)]


# ---- fused: convolution on an explicit window (a band of rows) ----------------------------
def im2col(x: Array, win: Window) -> Array:
    """Columns ``(N, C * prod(kernel), prod(out_spatial))`` of the zero-padded input."""
    xp = pad_for_window(x, win, 0.0)
    n, c = x.shape[:2]
    nk = math.prod(win.kernel)
    npix = math.prod(win.out_spatial)
    cols = np.empty((n, c, nk, *win.out_spatial), dtype=x.dtype)
    for i, (_, sl) in enumerate(offset_slices(win)):
        cols[:, :, i] = xp[sl]
    return cols.reshape(n, c * nk, npix)


def conv_nd(
    x: Array,
    weight: Array,
    bias: Array | None,
    win: Window,
    group: int = 1,
    matmul: MatmulFn = matmul_float,
) -> Array:
    """N-d convolution (NCHW...) by im2col + matmul; depthwise by kernel-offset accumulation.

    Args:
        x: input ``(N, C, *spatial)``.
        weight: ``(C_out, C / group, *kernel)``.
        bias: ``(C_out,)`` or ``None``.
        win: geometry (may describe a band of rows).
        group: ONNX ``group``.
        matmul: the crossbar product ``(M, K) @ (K, N)``; float by default, CIM numerics
            pass a quantized one.
    """
    n = x.shape[0]
    c_out = weight.shape[0]
    c_in_g = weight.shape[1]
    if group > 1 and c_in_g == 1 and c_out == group and matmul is matmul_float:
        xp = pad_for_window(x, win, 0.0)
        out = np.zeros((n, c_out, *win.out_spatial), dtype=DTYPE)
        w_flat = weight.reshape(c_out, -1)
        shape = (1, c_out) + (1,) * len(win.out_spatial)
        for i, (_, sl) in enumerate(offset_slices(win)):
            out += xp[sl] * w_flat[:, i].reshape(shape)
    else:
        cols = im2col(x, win)  # (N, C*K, P)
        ck = c_in_g * math.prod(win.kernel)
        npix = cols.shape[-1]
        cols = cols.reshape(n, group, ck, npix)
        w_mat = weight.reshape(group, c_out // group, ck)
        if matmul is matmul_float and group == 1:
            out = np.stack([w_mat[0] @ cols[i, 0] for i in range(n)])  # (N, C_out, P)
        elif matmul is matmul_float:
            out = np.matmul(w_mat[None], cols)  # (N, G, C_out/G, P)
        else:
            rows = cols.transpose(1, 0, 3, 2).reshape(group, n * npix, ck)
            per = c_out // group
            prod = np.stack(
                [
                    _columns(matmul, g * per, (g + 1) * per)(rows[g], w_mat[g].T)
                    for g in range(group)
                ]
            )
            out = prod.reshape(group, n, npix, c_out // group).transpose(1, 0, 3, 2)
        out = out.reshape(n, c_out, *win.out_spatial)
    out = out.astype(DTYPE, copy=False)
    if bias is not None:
        out += bias.reshape((1, c_out) + (1,) * len(win.out_spatial))
    return out


def _conv_fused(op: Op, inputs: Inputs) -> list[Array]:
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    win = window_geometry(op, x.shape[2:], w.shape[2:])
    return [conv_nd(x, w, arg(inputs, 2), win, attr_i(op, "group"))]


# ---- LINEAR ops as weights the fused kernels fold into -------------------------------------
@dataclass(frozen=True)
class LinearParams:
    """A LINEAR op (possibly with folded AFFINE ops, possibly merged) as weights.

    Attributes:
        kind: ``"conv"`` (``weight`` is ``(C_out, C_in/group, *kernel)``, channel axis 1),
            ``"conv_transpose"`` (the ONNX ConvTranspose weight ``(C_in, C_out/group,
            *kernel)``, channel axis 1) or ``"matrix"`` (``weight`` is ``(K, N)``; features
            of the input on ``in_axis``, of the output on ``out_axis``, the rows are every
            other index).
        weight: float32 weights.
        bias: float32 ``(C_out,)`` / ``(N,)``, or a full array for a Gemm bias ``(M, N)``, or None.
        group: conv group count.
        in_axis: matrix input feature axis.
        out_axis: matrix output feature axis.
        out_shape: output shape of the (last) op.
        source_op: the op the params came from (conv window attributes).
        grid: the integer grids of the crossbar operands of a quantized model's op (its input
            after a DequantizeLinear, its weight dequantized by the importer), kept through
            folds (the codes stay, the steps scale) and dropped by a merge (a product of two
            grids is on none); ``None``: CIM numerics quantize by the operands' peaks.
    """

    kind: str
    weight: Array
    bias: Array | None
    group: int = 1
    in_axis: int = -1
    out_axis: int = -1
    out_shape: tuple[int, ...] = ()
    source_op: Op | None = None
    grid: CrossbarGrid | None = None

    @property
    def out_channels(self) -> int:
        if self.kind == "conv_transpose":
            return int(self.weight.shape[1] * self.group)
        return int(self.weight.shape[0] if self.kind == "conv" else self.weight.shape[1])

    def fold(self, scale: Array, shift: Array) -> LinearParams:
        """Fold ``y * scale + shift`` (per output channel) into weights and bias (float64)."""
        w = self.weight.astype(np.float64)
        if self.kind == "conv":
            w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        elif self.kind == "conv_transpose":  # output channel g * (C_out/g) + j is w[g-th, :, j]
            c, mg, kernel = w.shape[0], w.shape[1], w.shape[2:]
            per_group = scale.reshape(self.group, 1, mg, *((1,) * len(kernel)))
            w = (w.reshape(self.group, c // self.group, mg, *kernel) * per_group).reshape(w.shape)
        else:
            w = w * scale.reshape(1, -1)
        b = np.zeros(self.out_channels) if self.bias is None else self.bias.astype(np.float64)
        b = b * scale + shift
        grid = None if self.grid is None else self.grid.scaled(np.broadcast_to(scale, b.shape))
        return replace(self, weight=w.astype(DTYPE), bias=np.asarray(b, dtype=DTYPE), grid=grid)

    def then(self, nxt: LinearParams) -> LinearParams:
        """Merge two matrices: ``W = W1 @ W2``, ``b = b1 @ W2 + b2`` (DESIGN §4 P3)."""
        w1 = self.weight.astype(np.float64)
        w2 = nxt.weight.astype(np.float64)
        b = np.zeros(w2.shape[1]) if nxt.bias is None else nxt.bias.astype(np.float64)
        if self.bias is not None:
            b = self.bias.astype(np.float64) @ w2 + b
        return replace(
            self,
            weight=(w1 @ w2).astype(DTYPE),
            bias=np.asarray(b, dtype=DTYPE),
            out_axis=nxt.out_axis,
            out_shape=nxt.out_shape,
            grid=None if self.grid is None or self.grid.x is None else CrossbarGrid(self.grid.x),
        )


def linear_params(graph: Graph, op: Op, as_matrix: bool = False) -> LinearParams:
    """Weights of a LINEAR op. ``as_matrix`` views a 1×1 stride-1 unpadded Conv as a matrix.

    In a quantized model the params carry the operands' grids (:func:`crossbar_grid`).

    Raises:
        IllegalPlanError: ``as_matrix`` for a Conv that is not a pointwise FC, or a MatMul
            with a batched weight.
    """
    p = _linear_params(graph, op, as_matrix)
    grid = crossbar_grid(graph, op, p)
    return p if grid is None else replace(p, grid=grid)


def crossbar_grid(graph: Graph, op: Op, p: LinearParams) -> CrossbarGrid | None:
    """The grids of a LINEAR op's crossbar operands, or ``None`` (neither is on a known grid).

    The input's: the per-tensor grid of the DequantizeLinear producing it. The weight's: the
    grid the importer recorded on the weight constant (``Tensor.quant``), as one step per
    output column; a per-channel grid along another axis (the reduction) gives none. Gemm's
    ``alpha`` scales the steps. ConvTranspose: no grid (its crossbar matrix is rearranged).
    """
    from fusiontune.ops.quant import grid_of

    producer = graph.producer(op.inputs[0])
    x = grid_of(graph, producer) if producer is not None else None
    if x is not None and x.axis is not None:
        x = None
    quant = graph.tensors[op.inputs[1]].quant
    w_scale = None
    if quant is not None and p.kind != "conv_transpose":
        w = graph.tensors[op.inputs[1]]
        out_axis = (
            0 if op.op_type == "Conv" or (op.op_type == "Gemm" and attr_i(op, "transB")) else 1
        )
        n_out = w.shape[out_axis]
        if quant.axis is None:
            w_scale = np.full(n_out, float(quant.scale))
        elif quant.axis == out_axis % len(w.shape):
            w_scale = np.asarray(quant.scale, np.float64).copy()
        if w_scale is not None and op.op_type == "Gemm":
            w_scale = w_scale * abs(attr_f(op, "alpha"))
        if w_scale is not None and not np.all(w_scale > 0):
            w_scale = None
    if x is None and w_scale is None:
        return None
    return CrossbarGrid(x, w_scale)


def _linear_params(graph: Graph, op: Op, as_matrix: bool) -> LinearParams:
    consts = [graph.tensors[t].value if t else None for t in op.inputs]
    out_shape = graph.tensors[op.output].shape
    if op.op_type == "ConvTranspose":
        if as_matrix:
            raise IllegalPlanError(f"op '{op.name}' (ConvTranspose): cannot be merged")
        w = np.asarray(consts[1], dtype=DTYPE)
        b = None if len(consts) < 3 or consts[2] is None else np.asarray(consts[2], DTYPE)
        return LinearParams("conv_transpose", w, b, attr_i(op, "group"), 1, 1, out_shape, op)
    if op.op_type == "Conv":
        w = np.asarray(consts[1], dtype=DTYPE)
        b = None if len(consts) < 3 or consts[2] is None else np.asarray(consts[2], DTYPE)
        group = attr_i(op, "group")
        if not as_matrix:
            return LinearParams("conv", w, b, group, 1, 1, out_shape, op)
        x_shape = graph.tensors[op.inputs[0]].shape
        win = window_geometry(op, x_shape[2:], w.shape[2:])
        pointwise = (
            group == 1
            and all(k == 1 for k in win.kernel)
            and all(s == 1 for s in win.strides)
            and not any(win.pads_begin + win.pads_end)
        )
        if not pointwise:
            raise IllegalPlanError(
                f"op '{op.name}' (Conv): only 1x1 stride-1 unpadded convolutions can be merged"
            )
        w_mat = w.reshape(w.shape[0], w.shape[1]).T
        return LinearParams("matrix", w_mat, b, 1, 1, 1, out_shape, op)
    if op.op_type == "Gemm":
        alpha = attr_f(op, "alpha")
        given = np.asarray(consts[1])
        given = given.T if attr_i(op, "transB") else given
        # alpha 1: the float64 round trip is exact, so one float32 copy instead of three
        matrix = (
            np.array(given, dtype=DTYPE)
            if alpha == 1.0
            else (np.asarray(given, dtype=np.float64) * alpha).astype(DTYPE)
        )
        bias = None
        if len(consts) > 2 and consts[2] is not None:
            c = np.asarray(consts[2], dtype=np.float64) * attr_f(op, "beta")
            n_out = matrix.shape[1]
            if c.size == 1:
                c = np.full(n_out, float(c.reshape(())))
            elif c.size == n_out and c.shape[-1] == n_out:
                c = c.reshape(-1)
            else:  # a full (M, N) bias
                c = np.broadcast_to(c, out_shape).copy()
            bias = c.astype(DTYPE)
        in_axis = 0 if attr_i(op, "transA") else 1
        return LinearParams("matrix", matrix, bias, 1, in_axis, 1, out_shape, op)
    # MatMul with a constant weight
    w = np.asarray(consts[1], dtype=DTYPE)
    if w.ndim != 2:
        raise IllegalPlanError(f"op '{op.name}' (MatMul): only a 2-d constant weight is supported")
    return LinearParams("matrix", w, None, 1, -1, -1, out_shape, op)


def apply_matrix(p: LinearParams, x: Array, matmul: MatmulFn = matmul_float) -> Array:
    """Run a ``"matrix"`` LinearParams on the full input ``x``."""
    xm = np.moveaxis(x, p.in_axis, -1)
    rows = xm.reshape(-1, xm.shape[-1])
    y = on_grid(matmul, p.grid)(rows, p.weight)
    if p.bias is not None:
        y = y + (p.bias if p.bias.ndim == 1 else p.bias.reshape(-1, y.shape[-1]))
    n_out = p.weight.shape[1]
    out_moved = list(p.out_shape)
    del out_moved[p.out_axis if p.out_axis >= 0 else len(out_moved) + p.out_axis]
    y = y.reshape(*out_moved, n_out)
    return np.ascontiguousarray(np.moveaxis(y, -1, p.out_axis)).astype(DTYPE, copy=False)


# ---- shapes ---------------------------------------------------------------------------------
def _conv_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x, w = ins[0], ins[1]
    assert x is not None and w is not None
    group = attr_i(op, "group")
    if x[1] != w[1] * group:
        raise ShapeError(
            f"op '{op.name}' (Conv): input has {x[1]} channels, weight expects "
            f"{w[1]} x group {group} = {w[1] * group}"
        )
    if w[0] % group:
        raise ShapeError(
            f"op '{op.name}' (Conv): {w[0]} output channels not divisible by group {group}"
        )
    kernel = op.attr("kernel_shape", w[2:])
    if tuple(kernel) != tuple(w[2:]):
        raise ShapeError(f"op '{op.name}' (Conv): kernel_shape {kernel} != weight shape {w[2:]}")
    win = window_geometry(op, x[2:], w[2:])
    return [(x[0], w[0], *win.out_spatial)] + [None] * (n_out - 1)


def _gemm_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    a, b = ins[0], ins[1]
    assert a is not None and b is not None
    m, k = (a[1], a[0]) if attr_i(op, "transA") else (a[0], a[1])
    k2, n = (b[1], b[0]) if attr_i(op, "transB") else (b[0], b[1])
    if k != k2:
        raise ShapeError(f"op '{op.name}' (Gemm): inner dimensions differ ({k} vs {k2})")
    if len(ins) > 2 and ins[2] is not None and broadcast_shapes(ins[2], (m, n)) != (m, n):
        raise ShapeError(
            f"op '{op.name}' (Gemm): bias shape {ins[2]} does not broadcast to {(m, n)}"
        )
    return [(m, n)] + [None] * (n_out - 1)


def _matmul_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    a, b = ins[0], ins[1]
    assert a is not None and b is not None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"op '{op.name}' (MatMul): inner dimensions differ ({a2[-1]} vs {b2[-2]})")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [tuple(out)] + [None] * (n_out - 1)


# ---- crossbars: matrices and FC-likeness ----------------------------------------------------
Matrix = tuple[int, int, int, int, int]  # rows, cols, count, vectors, out_rows


def _conv_matrix(graph: Graph, op: Op) -> Matrix:
    """Weight ``(C_out, C_in/g, K...)``: ``C_in/g * prod(K)`` x ``C_out/g``, ``g`` of them,
    one product per output pixel."""
    w = graph.tensors[op.inputs[1]].shape
    out = graph.tensors[op.outputs[0]].shape
    g = attr_i(op, "group")
    return math.prod(w[1:]), w[0] // g, g, out[0] * math.prod(out[2:]), rows_of(out)


def _gemm_matrix(graph: Graph, op: Op) -> Matrix:
    """``(M, K) x (K, N)``: ``K`` x ``N``, one product per row of the output."""
    w = graph.tensors[op.inputs[1]].shape
    out = graph.tensors[op.outputs[0]].shape
    rows, cols = (w[1], w[0]) if attr_i(op, "transB") else (w[0], w[1])
    vectors = math.prod(out) // cols
    return rows, cols, 1, vectors, vectors


def _matmul_matrix(graph: Graph, op: Op) -> Matrix:
    """Constant weight ``(..., K, N)``: one ``K`` x ``N`` matrix per batch index."""
    w = graph.tensors[op.inputs[1]].shape
    out = graph.tensors[op.outputs[0]].shape
    rows, cols = (w[0], 1) if len(w) == 1 else (w[-2], w[-1])
    count = math.prod(w[:-2]) if len(w) > 2 else 1
    vectors = math.prod(out) // cols // count
    return rows, cols, count, vectors, vectors


def _conv_fc_like(graph: Graph, op: Op) -> bool:
    """A 1x1 convolution, stride 1, no padding, group 1: a matrix over channels."""
    kernel = graph.tensors[op.inputs[1]].shape[2:]
    strides = op.attr("strides", (1,) * len(kernel))
    return (
        all(k == 1 for k in kernel)
        and all(int(s) == 1 for s in strides)
        and attr_i(op, "group") == 1
        and not has_padding(op)
    )


def conv_kernel_shape(graph: Graph, op: Op) -> Shape:
    """``kernel_shape``, or the weight's spatial shape when the attribute is omitted (ONNX)."""
    kernel = op.attr("kernel_shape") or graph.tensors[op.inputs[1]].shape[2:]
    return tuple(int(k) for k in kernel)


_CONV_DEFAULTS = {"group": 1, "auto_pad": "NOTSET"}


def _gemm_row_local(graph: Graph, op: Op) -> bool:
    """A Gemm streams by rows of ``A`` unless ``A`` is transposed or its bias varies along
    ``M`` (the bias would have to be cut into rows too)."""
    if attr_i(op, "transA"):
        return False
    if len(op.inputs) < 3 or not op.inputs[2]:
        return True
    c = graph.tensors[op.inputs[2]].shape
    return not (len(c) == 2 and c[0] > 1)


CONV = "Conv"
CONV_TRANSPOSE = "ConvTranspose"
GEMM = "Gemm"
MATMUL = "MatMul"
"""Op types the graph builder (``ir/builder.py``) emits."""

OPS: tuple[OpDef, ...] = (
    OpDef(
        CONV,
        linear_rule,
        defaults=_CONV_DEFAULTS,
        shape=_conv_shape,
        lint_opaque=True,
        reference=_conv,
        fused=_conv_fused,
        kernel_shape=conv_kernel_shape,
        matrix=_conv_matrix,
        fc_like=_conv_fc_like,
        channel_matrix=True,
    ),
    OpDef(
        GEMM,
        linear_rule,
        defaults={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
        shape=_gemm_shape,
        lint_opaque=True,
        reference=_gemm,
        matrix=_gemm_matrix,
        fc_like=lambda graph, op: attr_i(op, "transA") == 0,
        row_local=_gemm_row_local,
    ),
    OpDef(
        MATMUL,
        linear_rule,
        shape=_matmul_shape,
        lint_opaque=True,
        reference=_matmul,
        matrix=_matmul_matrix,
        fc_like=lambda graph, op: len(graph.tensors[op.inputs[1]].shape) == 2,
        activation_matmul=True,
    ),
    OpDef(
        CONV_TRANSPOSE,
        linear_rule,
        defaults=_CONV_DEFAULTS,
        shape=_conv_transpose_shape,
        lint_opaque=True,
        reference=_conv_transpose,
        fused=_conv_transpose_fused,
        kernel_shape=conv_kernel_shape,
        matrix=_conv_transpose_matrix,
        spans=_conv_transpose_spans,
        unsupported=_conv_transpose_unsupported,
    ),
)
