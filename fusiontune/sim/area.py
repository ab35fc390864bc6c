"""Chip area of a :class:`~fusiontune.sim.hardware.HardwareConfig`, in mm².

Every number comes from ISAAC's published area breakdown (Shafiee et al., "ISAAC: A
Convolutional Neural Network Accelerator with In-Situ Analog Arithmetic in Crossbars",
ISCA 2016, Table 6, 32 nm), used as follows.

Per IMA (8 crossbars), count and area of each row:

- ADC, 8 bit, 1.28 GS/s: 8, 0.0096 mm² -> 0.0012 mm² per ADC (the 1200 µm² of
  cim-parameters.md);
- DAC, 1 bit: 8 x 128, 0.00017 mm² -> per crossbar row;
- sample and hold: 8 x 128, 0.00004 mm² -> per crossbar column;
- memristor array, 128 x 128, 2-bit cells: 8, 0.0002 mm² -> per array, scaled by its cells;
- shift-and-add: 4, 0.00024 mm²; input register (2 KB): 0.0021 mm²; output register (256 B):
  0.00077 mm² -> per crossbar (one eighth each);
- IMA total: 0.157 mm² for the 12 IMAs of a tile.

Per tile (12 IMAs = 96 crossbars):

- eDRAM buffer, 64 KB: 0.083 mm² -> per byte of ``buffer_bytes`` (eDRAM buffers, below);
- eDRAM-to-IMA bus 0.090 mm², router 0.151 mm² shared by 4 tiles, sigmoid (2) 0.0006 mm²,
  shift-and-add 0.00006 mm², max-pool 0.00024 mm², output register (3 KB) 0.0032 mm² ->
  "tile digital", per crossbar (one 96th each);
- tile total 0.372 mm².

Chip: 168 tiles, 62.5 mm²; HyperTransport links (4) 22.88 mm²; chip total 85.4 mm².

How a configuration scales them (each scaling is stated, none is a published number):

- **ADCs** are counted by the conversion rate the cost model's timing needs: every column is
  converted once per input slice, which takes ``max(crossbar_cycle_ns, cols_per_adc x
  adc_conversion_ns)`` (``HardwareConfig.slice_cycles``), so a crossbar needs ``cols /
  slice_ns`` GS/s, i.e. that rate over ISAAC's 1.28 GS/s ADCs (derived from ISAAC's ADC by
  taking area proportional to conversion rate, as time-interleaved ADCs are built). ISAAC
  itself: 128 columns in 100 ns = 1.28 GS/s = one ADC per crossbar, as in Table 6.
- **ADC resolution**: derived from ISAAC's 8-bit area by the ratio of the configuration's
  energy per conversion to ISAAC's 8-bit 1.67 pJ (``adc_pj_by_bits``, Accelergy's ISAAC
  components); i.e. area taken proportional to energy per conversion at a fixed rate, an
  assumption (cim-parameters.md has no ADC area per resolution). A configuration without
  ADCs (0 pJ per conversion, a digital array) has no ADC area.
- **Arrays** scale with ``crossbar_rows x crossbar_cols`` over ISAAC's 128 x 128 cells, DACs
  with the rows, sample-and-hold circuits with the columns.
- **Buffer**, by ``hw.buffer_tech`` (both at 32 nm, ISAAC's node; no node scaling):

  - ``edram`` (the default): ISAAC's eDRAM, 0.083 mm² per 64 KB (Table 6), i.e.
    0.001297 mm² per KiB, periphery included (ISAAC's CACTI figure for the whole buffer).
  - ``sram``: a 6T bitcell of 0.171 µm² (Intel 32 nm, Natarajan et al., "A 32nm logic
    technology featuring 2nd-generation high-k + metal-gate transistors, enhanced channel
    strain and 0.171µm² SRAM cell size in a 291Mb array", IEDM 2008: the number is in the
    title; it is 167 F² at F = 32 nm, in line with DNN+NeuroSim V1.4 ``Param.cpp``'s note
    "suggested SRAM cell size above 22nm: 160F^2") over an array efficiency of 0.7, the share
    of the macro the bitcells take (**assumed**: no published efficiency in
    cim-parameters.md; 0.6 or 0.8 would give 0.00233 or 0.00175 mm² per KiB). Per KiB:
    8,192 bits x 0.171 µm² / 0.7 = 2,001 µm² = 0.002001 mm², 1.54x ISAAC's eDRAM.

  The technology changes the area only. Its access energy is ``buffer_pj_per_bit``, set per
  preset from that preset's own source (ISAAC's eDRAM 0.08 pJ/bit; ZigZag's SRAM 0.78 pJ/bit
  at another size and node, so the two are not an eDRAM-vs-SRAM comparison), and eDRAM
  refresh has no sourced energy in cim-parameters.md, so none is modelled.
  Presets whose sources describe an SRAM buffer (``sram_edge``, ``zigzag_aimc``,
  ``stream_tpu_like``) say ``buffer_tech: sram``; the ISAAC presets keep eDRAM. The
  ``sram_edge`` preset borrows ZigZag's 28 nm energies, but its area, like every component
  here, is priced at 32 nm.
- **Digital units and interconnect** of a tile (bus, router share, sigmoid, shift-and-add,
  max-pool, output register) are charged per crossbar: a tile holds 96 of them.
- ISAAC's four HyperTransport links (22.88 mm²) connect ISAAC chips to each other; the model
  has no chip-to-chip links (its off-chip memory is DRAM), so they are not part of
  ``area_mm2``. The ISAAC preset (168 tiles, 16,128 crossbars, 168 x 64 KB eDRAM) therefore
  models Table 6's 168 tiles, 62.5 mm²; adding the links gives the 85.4 mm² chip total.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from fusiontune.sim.hardware import BITS_PER_BYTE

if TYPE_CHECKING:
    from fusiontune.sim.hardware import HardwareConfig

KIB = 1024

# ---- ISAAC Table 6 (Shafiee et al., ISCA 2016), 32 nm: per IMA (8 crossbars) -------------
ISAAC_CROSSBARS_PER_IMA = 8
ISAAC_IMAS_PER_TILE = 12
ISAAC_CROSSBARS_PER_TILE = ISAAC_CROSSBARS_PER_IMA * ISAAC_IMAS_PER_TILE
ISAAC_XBAR_ROWS = 128
ISAAC_XBAR_COLS = 128
ISAAC_ADC_MM2 = 0.0096 / 8
"""One 8-bit 1.28 GS/s ADC (8 per IMA, 0.0096 mm²): 1200 µm², as cim-parameters.md lists."""
ISAAC_ADC_GSPS = 1.28
ISAAC_ADC_PJ = 1.67
"""8-bit conversion energy of the same ADC (Accelergy ISAAC components, cim-parameters.md)."""
ISAAC_DAC_MM2 = 0.00017 / (ISAAC_CROSSBARS_PER_IMA * ISAAC_XBAR_ROWS)
"""One 1-bit row DAC (8 x 128 per IMA, 0.00017 mm²)."""
ISAAC_SAMPLE_HOLD_MM2 = 0.00004 / (ISAAC_CROSSBARS_PER_IMA * ISAAC_XBAR_COLS)
"""One column sample-and-hold (8 x 128 per IMA, 0.00004 mm²)."""
ISAAC_ARRAY_MM2 = 0.0002 / ISAAC_CROSSBARS_PER_IMA
"""One 128 x 128 memristor array with 2-bit cells (8 per IMA, 0.0002 mm²)."""
ISAAC_IMA_SHIFT_ADD_MM2 = 0.00024
ISAAC_IMA_INPUT_REG_MM2 = 0.0021  # IR, 2 KB
ISAAC_IMA_OUTPUT_REG_MM2 = 0.00077  # OR, 256 B

# ---- per tile (12 IMAs) -------------------------------------------------------------------
ISAAC_EDRAM_MM2 = 0.083
ISAAC_EDRAM_BYTES = 64 * KIB
ISAAC_BUS_MM2 = 0.090
ISAAC_ROUTER_MM2 = 0.151
ISAAC_TILES_PER_ROUTER = 4
ISAAC_TILE_SIGMOID_MM2 = 0.0006
ISAAC_TILE_SHIFT_ADD_MM2 = 0.00006
ISAAC_TILE_MAXPOOL_MM2 = 0.00024
ISAAC_TILE_OUTPUT_REG_MM2 = 0.0032  # OR, 3 KB

# ---- buffer by technology (module docstring: sources and derivation) ---------------------
UM2_PER_MM2 = 1e6
SRAM_BITCELL_UM2 = 0.171
"""Intel 32 nm 6T SRAM bitcell (Natarajan et al., IEDM 2008, title)."""
SRAM_ARRAY_EFFICIENCY = 0.7
"""Bitcells' share of an SRAM macro's area: assumed (no published figure in
cim-parameters.md)."""
SRAM_MM2_PER_KIB = KIB * BITS_PER_BYTE * SRAM_BITCELL_UM2 / SRAM_ARRAY_EFFICIENCY / UM2_PER_MM2
"""8,192 bits x 0.171 µm² / 0.7 = 0.002001 mm² per KiB."""
BUFFER_AREA: dict[str, tuple[int, float]] = {
    "edram": (ISAAC_EDRAM_BYTES, ISAAC_EDRAM_MM2),
    "sram": (KIB, SRAM_MM2_PER_KIB),
}
"""Buffer technology -> (bytes, mm²) of a reference buffer; area scales with the bytes."""

# ---- chip ---------------------------------------------------------------------------------
ISAAC_TILES = 168
ISAAC_TILES_MM2 = 62.5
"""Table 6: 168 tiles."""
ISAAC_HYPERTRANSPORT_MM2 = 22.88
"""Table 6: four HyperTransport links between ISAAC chips (not modelled, see the docstring)."""
ISAAC_CHIP_MM2 = 85.4
"""Table 6: the whole chip, tiles and links."""


@dataclass(frozen=True)
class AreaBreakdown:
    """Area of a chip by component, in mm² (fields as in the module docstring)."""

    adc_mm2: float
    dac_mm2: float
    sample_hold_mm2: float
    array_mm2: float
    ima_digital_mm2: float
    buffer_mm2: float
    tile_digital_mm2: float

    @property
    def crossbar_mm2(self) -> float:
        """The crossbars with their analog periphery and IMA registers."""
        return (
            self.adc_mm2
            + self.dac_mm2
            + self.sample_hold_mm2
            + self.array_mm2
            + self.ima_digital_mm2
        )

    @property
    def total_mm2(self) -> float:
        return self.crossbar_mm2 + self.buffer_mm2 + self.tile_digital_mm2


def adcs_per_crossbar(hw: HardwareConfig) -> float:
    """ISAAC-ADC equivalents one crossbar needs: its conversion rate (every column once per
    input slice) over ISAAC's 1.28 GS/s."""
    slice_ns = max(hw.crossbar_cycle_ns, hw.cols_per_adc * hw.adc_conversion_ns)
    return hw.crossbar_cols / slice_ns / ISAAC_ADC_GSPS


def area_breakdown(hw: HardwareConfig) -> AreaBreakdown:
    """The area of ``hw`` by component (see the module docstring for every scaling)."""
    n = hw.n_crossbars
    adc_scale = hw.adc_pj_per_conversion / ISAAC_ADC_PJ
    cells = hw.crossbar_rows * hw.crossbar_cols / (ISAAC_XBAR_ROWS * ISAAC_XBAR_COLS)
    ima_digital = (
        ISAAC_IMA_SHIFT_ADD_MM2 + ISAAC_IMA_INPUT_REG_MM2 + ISAAC_IMA_OUTPUT_REG_MM2
    ) / ISAAC_CROSSBARS_PER_IMA
    tile_digital = (
        ISAAC_BUS_MM2
        + ISAAC_ROUTER_MM2 / ISAAC_TILES_PER_ROUTER
        + ISAAC_TILE_SIGMOID_MM2
        + ISAAC_TILE_SHIFT_ADD_MM2
        + ISAAC_TILE_MAXPOOL_MM2
        + ISAAC_TILE_OUTPUT_REG_MM2
    ) / ISAAC_CROSSBARS_PER_TILE
    return AreaBreakdown(
        adc_mm2=n * adcs_per_crossbar(hw) * ISAAC_ADC_MM2 * adc_scale,
        dac_mm2=n * hw.crossbar_rows * ISAAC_DAC_MM2,
        sample_hold_mm2=n * hw.crossbar_cols * ISAAC_SAMPLE_HOLD_MM2,
        array_mm2=n * cells * ISAAC_ARRAY_MM2,
        ima_digital_mm2=n * ima_digital,
        buffer_mm2=buffer_mm2(hw),
        tile_digital_mm2=n * tile_digital,
    )


def buffer_mm2(hw: HardwareConfig) -> float:
    """Area of the activation buffer: ``buffer_bytes`` at its technology's density."""
    ref_bytes, ref_mm2 = BUFFER_AREA[hw.buffer_tech]
    return hw.buffer_bytes / ref_bytes * ref_mm2


@lru_cache(maxsize=256)
def chip_area_mm2(hw: HardwareConfig) -> float:
    """Total area of ``hw`` in mm² (cached: configs are frozen and hashable)."""
    return area_breakdown(hw).total_mm2
