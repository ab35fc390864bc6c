"""Resize: the reference kernel of every mode, and the streamable form of upsampling.

- Reference (:func:`_resize`): nearest, linear and cubic along each resized axis, every
  ``coordinate_transformation_mode`` onnxruntime knows but ``tf_crop_and_resize``.
- Streamable (ELEMWISE, a P1 member that can join any group): ``nearest`` or ``linear``, a
  coordinate mode torch emits (:data:`STREAM_COORD_MODES`), constant ``scales``/``sizes``
  giving an integer factor >= 1 on each spatial axis and none on the batch and channel axes.
  Output row ``r`` (axis 2) reads the input rows it interpolates from (:func:`_resize_spans`),
  so the executor streams it band by band (:func:`_resize_rows`). Any other Resize stays
  OPAQUE, and :func:`_resize_unsupported` says what it uses that is not in the set.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ir.opclass import OpClass
from fusiontune.ops.base import (
    Array,
    FoldFn,
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
    const_input,
    fold_ints,
    ints,
    norm_axis,
    numel,
    one_activation,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

CUBIC_COEFF_A = -0.75  # Resize cubic_coeff_a default
STREAM_MODES = ("nearest", "linear")
STREAM_COORD_MODES = ("asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel")
"""The coordinate transformation modes torch's exporters emit for ``F.interpolate``."""
LINEAR_OPS_PER_AXIS = 3  # cost model: two multiplies and an add per output element and axis


# ---- coordinates ----------------------------------------------------------------------------
def _source_coords(mode: str, out_len: int, in_len: int, scale: float) -> Array:
    """Input coordinate of each output index (ONNX coordinate_transformation_mode)."""
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        center = in_len / 2 * (1 - adjustment)
        return center + (x + 0.5) / scale - 0.5
    raise FusiontuneError(
        f"Resize coordinate_transformation_mode '{mode}' is not supported; allowed: "
        "half_pixel, pytorch_half_pixel, asymmetric, align_corners, half_pixel_symmetric"
    )


def _nearest_index(coords: Array, mode: str, in_len: int) -> Array:
    if mode == "round_prefer_floor":
        idx = np.where(coords - np.floor(coords) == 0.5, np.floor(coords), np.round(coords))
    elif mode == "round_prefer_ceil":
        idx = np.where(coords - np.floor(coords) == 0.5, np.ceil(coords), np.round(coords))
    elif mode == "floor":
        idx = np.floor(coords)
    elif mode == "ceil":
        idx = np.ceil(coords)
    else:
        raise FusiontuneError(f"Resize nearest_mode '{mode}' is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _linear_taps(coords: Array, in_len: int) -> tuple[Array, Array, Array]:
    """The two input indices and the weight of the second for linear interpolation."""
    coords = np.clip(coords, 0, in_len - 1)
    lo = np.floor(coords).astype(np.int64)
    hi = np.minimum(lo + 1, in_len - 1)
    return lo, hi, coords - lo


def _targets(
    op: Op, x_shape: Shape, scales_in: Array | None, sizes_in: Array | None
) -> tuple[list[int], list[float], list[int]]:
    """Resized axes with their scales and output lengths (``sizes`` wins over ``scales``)."""
    rank = len(x_shape)
    axes = [a % rank for a in (ints(op.attr("axes")) or range(rank))]
    if sizes_in is not None and sizes_in.size:
        sizes = ints(sizes_in) or []
        return axes, [s / x_shape[a] for a, s in zip(axes, sizes)], sizes
    if scales_in is not None and scales_in.size:
        scales = [float(s) for s in np.asarray(scales_in).reshape(-1)]
        return axes, scales, [math.floor(x_shape[a] * s) for a, s in zip(axes, scales)]
    raise FusiontuneError(f"op '{op.name}' (Resize): needs scales or sizes")


# ---- reference ------------------------------------------------------------------------------
def _resize(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes, scales, sizes = _targets(op, x.shape, arg(inputs, 2), arg(inputs, 3))
    mode = attr_s(op, "mode")
    coord_mode = attr_s(op, "coordinate_transformation_mode")
    policy = attr_s(op, "keep_aspect_ratio_policy")
    if attr_i(op, "antialias") or policy != "stretch":
        raise FusiontuneError(
            f"op '{op.name}' (Resize): antialias=1 and keep_aspect_ratio_policy other than "
            "'stretch' are not supported"
        )
    y = x
    for a, scale, out_len in zip(axes, scales, sizes):
        in_len = x.shape[a]
        if out_len == in_len and scale == 1.0:
            continue
        coords = _source_coords(coord_mode, out_len, in_len, scale)
        if mode == "nearest":
            idx = _nearest_index(coords, attr_s(op, "nearest_mode"), in_len)
            y = np.take(y, idx, axis=a)
        elif mode == "linear":
            lo, hi, frac = _linear_taps(coords, in_len)
            shape = [1] * x.ndim
            shape[a] = out_len
            w = frac.astype(x.dtype).reshape(shape)
            y = np.take(y, lo, axis=a) * (1 - w) + np.take(y, hi, axis=a) * w
        elif mode == "cubic":
            y = _cubic_resize_axis(y, a, coords, op)
        else:
            raise FusiontuneError(
                f"op '{op.name}' (Resize): mode '{mode}' is not one of nearest, linear, cubic"
            )
    return [y.astype(x.dtype, copy=False)]


def _cubic_resize_axis(y: Array, axis: int, coords: Array, op: Op) -> Array:
    """Cubic convolution along one axis: 4 taps, edge-clamped indices (ONNX Resize)."""
    a = attr_f(op, "cubic_coeff_a")
    in_len = y.shape[axis]
    base = np.floor(coords)
    r = (coords - base)[:, None]
    d = np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1)  # distance of each tap, (out, 4)
    near = ((a + 2) * d - (a + 3)) * d * d + 1  # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # 1 < |d| < 2
    weights = np.where(d <= 1, near, far)
    taps = base[:, None].astype(np.int64) + np.arange(-1, 3)
    if attr_i(op, "exclude_outside"):
        weights = np.where((taps >= 0) & (taps < in_len), weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    moved = np.moveaxis(y, axis, -1)[..., np.clip(taps, 0, in_len - 1)]  # (..., out, 4)
    out = np.sum(moved * weights.astype(y.dtype), axis=-1)
    return np.moveaxis(out, -1, axis)


# ---- streaming: the supported set, row spans, the band kernel -------------------------------
def _resize_unsupported(op: Op, tensors: Tensors) -> str | None:
    """What of this Resize is outside the streamable set (``None``: it streams)."""
    mode, coord = attr_s(op, "mode"), attr_s(op, "coordinate_transformation_mode")
    if mode not in STREAM_MODES:
        return f"mode '{mode}' (streamable: {', '.join(STREAM_MODES)})"
    if coord not in STREAM_COORD_MODES:
        allowed = ", ".join(STREAM_COORD_MODES)
        return f"coordinate_transformation_mode '{coord}' (streamable: {allowed})"
    if attr_i(op, "antialias"):
        return "antialias=1"
    if attr_s(op, "keep_aspect_ratio_policy") != "stretch":
        return f"keep_aspect_ratio_policy '{attr_s(op, 'keep_aspect_ratio_policy')}'"
    x = tensors.get(op.inputs[0])
    if x is None or len(x.shape) < 3:
        return "an input of rank < 3 (streamable: N, C and spatial axes)"
    values = [tensors[t].value if t and t in tensors else None for t in op.inputs[2:4]]
    values += [None] * (2 - len(values))
    if all(v is None or np.asarray(v).size == 0 for v in values):
        return "scales and sizes that are not constants"
    axes, scales, sizes = _targets(op, x.shape, values[0], values[1])
    for a, scale, out_len in zip(axes, scales, sizes):
        in_len = x.shape[a]
        factor = out_len // in_len
        if a < 2 and out_len != in_len:
            return f"resizing axis {a} (streamable: spatial axes only)"
        if out_len != factor * in_len or factor < 1 or not math.isclose(scale, factor):
            return f"scale {scale:g} on axis {a} (streamable: integer factors >= 1)"
    return None


def _resize_spans(graph: Graph, op: Op) -> RowSpans:
    """Output row ``r`` reads its nearest input row, or the two it interpolates between."""
    x = graph.tensors[op.inputs[0]].shape
    consts = [graph.tensors[t].value if t else None for t in op.inputs[2:4]]
    axes, scales, sizes = _targets(op, x, *(consts + [None] * (2 - len(consts))))
    h = x[2]
    scale, out_len = next(((s, n) for a, s, n in zip(axes, scales, sizes) if a == 2), (1.0, h))
    coords = _source_coords(attr_s(op, "coordinate_transformation_mode"), out_len, h, scale)
    if out_len == h and scale == 1.0:
        first = end = np.arange(h)
    elif attr_s(op, "mode") == "nearest":
        first = end = _nearest_index(coords, attr_s(op, "nearest_mode"), h)
    else:
        first, end, _ = _linear_taps(coords, h)
    return RowSpans(tuple(int(v) for v in first), tuple(int(v) + 1 for v in end), h)


def _resize_rows(op: Op, inputs: Inputs, band: RowBand) -> Array:
    """Output rows ``[band.a, band.b)`` of a streamable Resize from input rows from
    ``band.lo`` (axis 2): the row axis interpolates over the band's coordinates shifted by
    ``lo``, the other axes over their whole extent."""
    x = inputs[0]
    assert x is not None
    full = (*x.shape[:2], band.in_height, *x.shape[3:])
    axes, scales, sizes = _targets(op, full, arg(inputs, 2), arg(inputs, 3))
    coord_mode = attr_s(op, "coordinate_transformation_mode")
    y = x
    for a, scale, out_len in zip(axes, scales, sizes):
        in_len = full[a]
        if out_len == in_len and scale == 1.0:
            continue
        coords = _source_coords(coord_mode, out_len, in_len, scale)
        shift = 0
        if a == 2:
            coords, shift = coords[band.a : band.b], band.lo
        if attr_s(op, "mode") == "nearest":
            idx = _nearest_index(coords, attr_s(op, "nearest_mode"), in_len)
            y = np.take(y, idx - shift, axis=a)
        else:
            lo, hi, frac = _linear_taps(coords, in_len)
            shape = [1] * x.ndim
            shape[a] = len(coords)
            w = frac.astype(x.dtype).reshape(shape)
            y = np.take(y, lo - shift, axis=a) * (1 - w) + np.take(y, hi - shift, axis=a) * w
    return np.ascontiguousarray(y, dtype=x.dtype)


def _resize_fused(op: Op, inputs: Inputs) -> list[Array]:
    """The band kernel on the whole tensor (one band of every row); the reference for the
    forms it does not cover (cubic, antialias, a rank below 3)."""
    x = inputs[0]
    assert x is not None
    if (
        x.ndim < 3
        or attr_s(op, "mode") not in STREAM_MODES
        or attr_i(op, "antialias")
        or attr_s(op, "keep_aspect_ratio_policy") != "stretch"
    ):
        return _resize(op, inputs)
    axes, _, sizes = _targets(op, x.shape, arg(inputs, 2), arg(inputs, 3))
    out_h = next((n for a, n in zip(axes, sizes) if a == 2), x.shape[2])
    return [_resize_rows(op, inputs, RowBand(0, 0, out_h, x.shape[2]))]


def _resize_element_ops(graph: Graph, op: Op) -> int:
    """A copy per output element (nearest), or a lerp per output element and resized axis."""
    out = numel(graph, op.outputs[0])
    if attr_s(op, "mode") != "linear":
        return out
    x = graph.tensors[op.inputs[0]].shape
    y = graph.tensors[op.outputs[0]].shape
    return LINEAR_OPS_PER_AXIS * out * sum(1 for i, o in zip(x, y) if i != o)


# ---- shapes ---------------------------------------------------------------------------------
def _resize_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    policy = op.attr("keep_aspect_ratio_policy", "stretch")
    if isinstance(policy, bytes):
        policy = policy.decode()
    if policy != "stretch":
        return [None]  # not_larger / not_smaller: left to onnx.shape_inference
    scales = const_input(op, tensors, 2)
    sizes = const_input(op, tensors, 3)
    axes = [norm_axis(int(a), len(x), op) for a in op.attr("axes", range(len(x)))]
    out = list(x)
    if sizes is not None and sizes.size:
        for a, s in zip(axes, sizes, strict=True):
            out[a] = int(s)
    elif scales is not None and scales.size:
        for a, s in zip(axes, scales, strict=True):
            out[a] = math.floor(x[a] * float(s))
    else:
        raise ShapeError(f"op '{op.name}' (Resize): one of scales or sizes is required")
    return [tuple(out)]


_RESIZE_DEFAULTS = {
    "mode": "nearest",
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": CUBIC_COEFF_A,
    "exclude_outside": 0,
    "antialias": 0,
    "keep_aspect_ratio_policy": "stretch",
    "extrapolation_value": 0.0,
}

RESIZE = "Resize"
"""Op type the graph builder (``ir/builder.py``) emits."""


def _resize_fold_elements(values: Inputs) -> int | None:
    """Folded output size of Resize (``X, roi, scales, sizes``) or Upsample (``X, scales``)."""
    if not values or values[0] is None:
        return None
    sizes = fold_ints(values[3]) if len(values) >= 4 else []
    if sizes:
        return math.prod(sizes)
    scales = values[2] if len(values) >= 3 else values[1] if len(values) == 2 else None
    if scales is None or scales.size != values[0].ndim:
        return None
    dims = [math.floor(d * float(s)) for d, s in zip(values[0].shape, scales.reshape(-1))]
    return math.prod(max(d, 0) for d in dims)


FOLD_ONLY: dict[str, FoldFn] = {"Upsample": _resize_fold_elements}
"""Folded sizes of op types without an OpDef: Upsample (opsets 7-9), Resize's predecessor."""


OPS: tuple[OpDef, ...] = (
    OpDef(
        RESIZE,
        one_activation(OpClass.ELEMWISE),
        defaults=_RESIZE_DEFAULTS,
        shape=_resize_shape,
        reference=_resize,
        fused=_resize_fused,
        element_ops=_resize_element_ops,
        spans=_resize_spans,
        span_kernel=_resize_rows,
        unsupported=_resize_unsupported,
        fold_elements=_resize_fold_elements,
    ),
)
