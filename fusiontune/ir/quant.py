"""The integer grid of a quantized tensor: ``value = scale * (code - zero_point)``.

A :class:`QuantParams` is attached to a constant :class:`~fusiontune.ir.graph.Tensor` (a weight
the importer dequantized, ``Tensor.quant``) and read off the DequantizeLinear ops in front of an
activation (:func:`fusiontune.ops.quant.grid_of`); the CIM numerics (``sim/cim.py``) then use
the model's codes instead of re-quantizing by the tensor's peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1),
}
"""Code range of each integer type ONNX quantizes to (int32: DequantizeLinear of a bias only)."""


@dataclass(frozen=True, eq=False)
class QuantParams:
    """Scale and zero point of a tensor's integer grid.

    Attributes:
        scale: float64, shape ``()`` (per tensor) or ``(n,)`` (per channel along ``axis``).
        zero_point: float64 (exact integers), the shape of ``scale``.
        dtype: the integer type of the codes (``"int8"``, ``"uint8"``, ...).
        axis: the channel axis of a per-channel grid, ``None`` per tensor.
        runtime_zero_point: the zero point is computed at run time (DynamicQuantizeLinear
            before a ConvInteger): ``zero_point`` is 0 and only the code range is known.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    dtype: str
    axis: int | None = None
    runtime_zero_point: bool = False

    @classmethod
    def of(
        cls,
        scale: np.ndarray,
        zero_point: np.ndarray | None,
        dtype: str,
        axis: int | None,
        runtime_zero_point: bool = False,
    ) -> QuantParams:
        """From ONNX scale/zero-point values (scalars or 1-D); a missing zero point is 0."""
        s = np.asarray(scale, dtype=np.float64)
        s = s.reshape(()) if s.size == 1 else s.reshape(-1)
        z = np.zeros_like(s) if zero_point is None else np.asarray(zero_point, np.float64)
        z = np.broadcast_to(z.reshape(()) if z.size == 1 else z.reshape(-1), s.shape).copy()
        s.flags.writeable = False
        z.flags.writeable = False
        return cls(s, z, dtype, axis if s.ndim else None, runtime_zero_point)

    @property
    def code_range(self) -> tuple[int, int]:
        """Smallest and largest code of :attr:`dtype`."""
        return INTEGER_RANGES[self.dtype]

    @property
    def offset_range(self) -> tuple[int, int]:
        """Smallest and largest ``code - zero_point`` (per tensor): what the crossbar is fed.
        With a run-time zero point anywhere in the code range, ``[lo - hi, hi - lo]``."""
        lo, hi = self.code_range
        if self.runtime_zero_point:
            return lo - hi, hi - lo
        zero = int(np.max(self.zero_point)), int(np.min(self.zero_point))
        return lo - zero[0], hi - zero[1]

    @property
    def bits(self) -> int:
        """Bits of the code type (8 for int8/uint8)."""
        return int(np.iinfo(np.dtype(self.dtype)).bits)

    def key(self) -> bytes:
        """Bytes that identify the grid (the graph's structural hash includes them)."""
        return b"|".join(
            [self.scale.tobytes(), self.zero_point.tobytes(), self.dtype.encode(),
             str(self.axis).encode(), str(self.runtime_zero_point).encode()]
        )  # fmt: skip

    def __repr__(self) -> str:
        per = "tensor" if self.axis is None else f"axis {self.axis}"
        return f"QuantParams({self.dtype}, per {per}, {self.scale.size} scale(s))"


@dataclass(frozen=True, eq=False)
class CrossbarGrid:
    """The integer grids of a LINEAR op's two crossbar operands (``y = x @ w``, ``w (K, N)``).

    Attributes:
        x: the input's grid (per tensor), or ``None`` when the input is not known to lie on one.
        w_scale: float64 ``(N,)``, the step of each weight column (the crossbar stores
            ``w / w_scale`` as integer codes), or ``None``.
    """

    x: QuantParams | None = None
    w_scale: np.ndarray | None = None

    def columns(self, lo: int, hi: int) -> CrossbarGrid:
        """The grid of output columns ``lo:hi`` (a tile, or one group of a grouped Conv)."""
        if self.w_scale is None:
            return self
        return CrossbarGrid(self.x, self.w_scale[lo:hi])

    def scaled(self, factor: np.ndarray) -> CrossbarGrid | None:
        """The grid after each output column's weights are multiplied by ``factor`` (a fold):
        the codes stay, the steps scale by ``|factor|`` (``None``: a factor is 0)."""
        if self.w_scale is None:
            return self
        factor = np.abs(np.asarray(factor, np.float64)).reshape(-1)
        if not np.all(factor > 0):
            return None if self.x is None else CrossbarGrid(self.x, None)
        return CrossbarGrid(self.x, np.broadcast_to(self.w_scale * factor, self.w_scale.shape))
