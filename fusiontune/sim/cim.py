"""CIM numerics: what a crossbar does to a matrix product (``numerics="cim"``).

Model (ISAAC-like, DESIGN §7), one crossbar product ``y = x @ w`` with ``x (M, K)``, ``w (K, N)``:

1. Weights are quantized symmetrically per output column to ``weight_bits`` (sign + magnitude,
   magnitude ≤ ``2**(weight_bits-1) - 1``); positive and negative parts sit on separate columns
   (a differential pair) and each magnitude is bit-sliced over ``ceil((weight_bits-1)/cell_bits)``
   cells of ``cell_bits``.
2. Inputs are quantized symmetrically per tensor to ``act_bits``; the positive and negative parts
   are fed bit-serially, ``dac_bits`` per crossbar cycle.
3. The K rows are tiled onto crossbars of ``crossbar_rows`` rows; each tile's column sum (an
   unsigned integer up to ``rows * (2**dac_bits-1) * (2**cell_bits-1)``) goes through an
   ``adc_bits`` ADC with a one-count LSB: exact up to ``2**adc_bits - 1``, clipped above it
   (ISAAC sizes its 8-bit ADC so that typical sums fit; a smaller ADC saturates more often).
   A grouped convolution runs one product per group: on a crossbar packed block-diagonally
   (:func:`fusiontune.sim.matrices.crossbar_tiles`) a group's columns sum only its own rows,
   the cells of the other groups' rows being zero, so its counts, the ADC's range and
   clipping are those of this product (``tests/test_packing.py``).
4. Digital shift-add recombines tiles, weight slices, input bits and signs; the result is
   rescaled by the two quantization scales. Biases and everything outside the crossbar stay float.

A quantized model's op (:class:`~fusiontune.ir.quant.CrossbarGrid` on its params) brings its own
codes instead of steps 1-2: the input's codes are ``x / scale`` of the DequantizeLinear before it
(``code - zero_point``: ``[0, 255]`` for uint8 with zero point 0, ``[-128, 127]`` for symmetric
int8), the weight's ``w / scale`` of the grid the importer recorded, and each is fed with as
many bits as its codes need (8-bit codes: 8 magnitude bits, so ``ceil(8 / dac_bits)`` cycles and
``ceil(8 / cell_bits)`` slices); ``act_bits``/``weight_bits`` only quantize operands with no grid.
With an ADC that never clips, the crossbar's integer sum is then exactly onnxruntime's int32
accumulator.

Vectorized: one batched matmul per input bit chunk (a loop over a handful of bit slices), all
weight slices and signs stacked along the columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fusiontune.ir.quant import CrossbarGrid
from fusiontune.sim.hardware import HardwareConfig

_ISAAC = HardwareConfig()  # DESIGN §7 defaults (sim/hardware.py gives their sources)


@dataclass(frozen=True)
class CimNumerics:
    """Bit widths and crossbar height that decide CIM rounding (defaults: DESIGN §7)."""

    act_bits: int = _ISAAC.act_bits
    weight_bits: int = _ISAAC.weight_bits
    cell_bits: int = _ISAAC.cell_bits
    dac_bits: int = _ISAAC.dac_bits
    adc_bits: int = _ISAAC.adc_bits
    crossbar_rows: int = _ISAAC.crossbar_rows

    @classmethod
    def from_hw(cls, hw: HardwareConfig | None = None) -> CimNumerics:
        """The widths of ``hw`` (the DESIGN §7 default hardware for ``None``)."""
        hw = hw or _ISAAC
        return cls(
            act_bits=hw.act_bits,
            weight_bits=hw.weight_bits,
            cell_bits=hw.cell_bits,
            dac_bits=hw.dac_bits,
            adc_bits=hw.adc_bits,
            crossbar_rows=hw.crossbar_rows,
        )

    @property
    def weight_slices(self) -> int:
        """Cells per weight magnitude."""
        return math.ceil((self.weight_bits - 1) / self.cell_bits)

    @property
    def input_steps(self) -> int:
        """Crossbar cycles per input magnitude."""
        return math.ceil((self.act_bits - 1) / self.dac_bits)

    @property
    def adc_max(self) -> int:
        """Largest count the ADC reports (one-count LSB)."""
        return 2**self.adc_bits - 1


def quantize_symmetric(x: np.ndarray, bits: int, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Signed integer codes ``|q| ≤ 2**(bits-1) - 1`` and the scale (per ``axis`` or per tensor)."""
    q_max = 2 ** (bits - 1) - 1
    if axis is None:
        peak = np.asarray(np.max(np.abs(x)), dtype=np.float64)
    else:
        peak = np.max(np.abs(x), axis=axis, keepdims=True).astype(np.float64)
    scale = np.where(peak > 0, peak / q_max, 1.0)
    q = np.clip(np.rint(x / scale), -q_max, q_max)
    return q, scale


def _magnitude_bits(codes: np.ndarray) -> int:
    """Bits of the largest code magnitude (at least 1)."""
    peak = int(np.max(np.abs(codes), initial=0))
    return max(peak.bit_length(), 1)


def _input_codes(
    x: np.ndarray, cfg: CimNumerics, grid: CrossbarGrid | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Signed input codes, their scale, and the magnitude bits fed to the DACs."""
    if grid is None or grid.x is None:
        xq, scale = quantize_symmetric(x, cfg.act_bits, axis=None)
        return xq, scale, cfg.act_bits - 1
    lo, hi = grid.x.offset_range
    scale = np.asarray(float(grid.x.scale))
    xq = np.clip(np.rint(x / scale), lo, hi)  # on the grid: code - zero_point
    return xq, scale, max(abs(lo), abs(hi)).bit_length()


def _weight_codes(
    w: np.ndarray, cfg: CimNumerics, grid: CrossbarGrid | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Signed weight codes ``(K, N)``, their per-column scale ``(1, N)``, magnitude bits."""
    if grid is None or grid.w_scale is None:
        wq, scale = quantize_symmetric(w, cfg.weight_bits, axis=0)
        return wq, scale, cfg.weight_bits - 1
    if grid.w_scale.shape != (w.shape[1],):
        raise ValueError(f"weight grid of {grid.w_scale.shape} steps for {w.shape[1]} columns")
    scale = grid.w_scale.reshape(1, -1)
    wq = np.rint(w / scale)
    return wq, scale, _magnitude_bits(wq)


def cim_matmul(
    x: np.ndarray, w: np.ndarray, cfg: CimNumerics, grid: CrossbarGrid | None = None
) -> np.ndarray:
    """``x (M, K) @ w (K, N)`` as the crossbars compute it (module docstring); ``grid``: the
    operands' integer grids in a quantized model."""
    m, k = x.shape
    n = w.shape[1]
    rows = cfg.crossbar_rows
    tiles = math.ceil(k / rows)
    k_pad = tiles * rows

    wq, w_scale, w_bits = _weight_codes(w.astype(np.float64), cfg, grid)  # (K,N),(1,N)
    xq, x_scale, x_bits = _input_codes(x.astype(np.float64), cfg, grid)
    weight_slices = math.ceil(w_bits / cfg.cell_bits)
    input_steps = math.ceil(x_bits / cfg.dac_bits)

    # weight cells: (sign, slice) stacked along columns -> (tiles, rows, S * N)
    cell_mask = 2**cfg.cell_bits - 1
    w_cols = []
    col_weight = []  # signed shift of each stacked column block
    for sign in (1, -1):
        mag = np.maximum(sign * wq, 0).astype(np.int64)
        for j in range(weight_slices):
            w_cols.append((mag >> (cfg.cell_bits * j)) & cell_mask)
            col_weight.append(sign * 2.0 ** (cfg.cell_bits * j))
    cells = np.concatenate(w_cols, axis=1).astype(np.float64)  # (K, S*N)
    cells = np.pad(cells, ((0, k_pad - k), (0, 0))).reshape(tiles, rows, -1)
    shifts = np.repeat(np.asarray(col_weight), n)  # (S*N,)

    dac_mask = 2**cfg.dac_bits - 1
    adc_max = float(cfg.adc_max)
    acc = np.zeros((m, n), dtype=np.float64)
    for sign in (1, -1):
        mag = np.maximum(sign * xq, 0).astype(np.int64)
        mag = np.pad(mag, ((0, 0), (0, k_pad - k))).reshape(m, tiles, rows).transpose(1, 0, 2)
        for s in range(input_steps):
            bits = ((mag >> (cfg.dac_bits * s)) & dac_mask).astype(np.float64)  # (T, M, R)
            partial = np.matmul(bits, cells)  # (T, M, S*N): analog column sums per tile
            digital = np.minimum(partial, adc_max)  # ADC: integer counts, saturating
            summed = digital.sum(axis=0) * shifts  # shift-add over tiles and slices
            acc += sign * 2.0 ** (cfg.dac_bits * s) * summed.reshape(m, -1, n).sum(axis=1)
    return (acc * x_scale * w_scale).astype(np.float32)


@dataclass(frozen=True, eq=False)
class CimMatmul:
    """``(x, w) -> x @ w`` with CIM numerics, for the fused kernels; ``on_grid`` binds it to a
    quantized op's grids (``ops.linear.on_grid``), ``columns`` to a slice of its columns."""

    cfg: CimNumerics
    grid: CrossbarGrid | None = None

    def __call__(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return cim_matmul(x, w, self.cfg, self.grid)

    def on_grid(self, grid: CrossbarGrid) -> CimMatmul:
        return CimMatmul(self.cfg, grid)

    def columns(self, lo: int, hi: int) -> CimMatmul:
        return self if self.grid is None else CimMatmul(self.cfg, self.grid.columns(lo, hi))


def cim_matmul_fn(cfg: CimNumerics) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A ``(x, w) -> x @ w`` callable with CIM numerics, for the fused kernels."""
    return CimMatmul(cfg)
