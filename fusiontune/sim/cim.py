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
4. Digital shift-add recombines tiles, weight slices, input bits and signs; the result is
   rescaled by the two quantization scales. Biases and everything outside the crossbar stay float.

Vectorized: one batched matmul per input bit chunk (a loop over a handful of bit slices), all
weight slices and signs stacked along the columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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


def cim_matmul(x: np.ndarray, w: np.ndarray, cfg: CimNumerics) -> np.ndarray:
    """``x (M, K) @ w (K, N)`` as the crossbars compute it (module docstring)."""
    m, k = x.shape
    n = w.shape[1]
    rows = cfg.crossbar_rows
    tiles = math.ceil(k / rows)
    k_pad = tiles * rows

    wq, w_scale = quantize_symmetric(w.astype(np.float64), cfg.weight_bits, axis=0)  # (K,N),(1,N)
    xq, x_scale = quantize_symmetric(x.astype(np.float64), cfg.act_bits, axis=None)

    # weight cells: (sign, slice) stacked along columns -> (tiles, rows, S * N)
    cell_mask = 2**cfg.cell_bits - 1
    w_cols = []
    col_weight = []  # signed shift of each stacked column block
    for sign in (1, -1):
        mag = np.maximum(sign * wq, 0).astype(np.int64)
        for j in range(cfg.weight_slices):
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
        for s in range(cfg.input_steps):
            bits = ((mag >> (cfg.dac_bits * s)) & dac_mask).astype(np.float64)  # (T, M, R)
            partial = np.matmul(bits, cells)  # (T, M, S*N): analog column sums per tile
            digital = np.minimum(partial, adc_max)  # ADC: integer counts, saturating
            summed = digital.sum(axis=0) * shifts  # shift-add over tiles and slices
            acc += sign * 2.0 ** (cfg.dac_bits * s) * summed.reshape(m, -1, n).sum(axis=1)
    return (acc * x_scale * w_scale).astype(np.float32)


def cim_matmul_fn(cfg: CimNumerics) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A ``(x, w) -> x @ w`` callable with CIM numerics, for the fused kernels."""

    def matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return cim_matmul(x, w, cfg)

    return matmul
