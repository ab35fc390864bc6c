"""Hardware description of a CIM accelerator (DESIGN §7) and its YAML presets.

:class:`HardwareConfig` is one frozen parameter table; every field carries its unit in its
name and its source in the class docstring (``../shared/reference/cim-parameters.md`` lists
the published values). :func:`load_hardware` reads a preset by name from the package data
``fusiontune/presets/hardware/<name>.yaml`` (:mod:`fusiontune.presets`) or any YAML file,
validates every key first (unknown key, wrong type, out-of-range or contradictory value -> one
:class:`ConfigError` naming the file, the key and what is allowed) and builds the typed object
second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from fusiontune import presets
from fusiontune.errors import ConfigError, check_keys, closest

if TYPE_CHECKING:
    from importlib.abc import Traversable

KIB = 1024
BITS_PER_BYTE = 8

# Accelergy hwcomponents-library, ISAAC components: 32 nm SAR ADC at 1.2 GS/s (Kull ISSCC'13
# scaled per Saberi'11), energy per conversion in pJ by resolution in bits.
ACCELERGY_ADC_PJ_BY_BITS: tuple[tuple[int, float], ...] = (
    (4, 0.79), (5, 0.99), (6, 1.20), (7, 1.42), (8, 1.67), (9, 1.97), (10, 2.38),
)  # fmt: skip
ADC_SAMPLE_RATE_GSPS = 1.2  # same source: the ADC converts 1.2e9 samples per second

# ISAAC (Shafiee et al., ISCA'16): 168 tiles x 12 IMAs x 8 crossbars; 64 KB eDRAM per tile.
ISAAC_TILES = 168
ISAAC_CROSSBARS_PER_TILE = 12 * 8
ISAAC_EDRAM_PER_TILE_BYTES = 64 * KIB
# Accelergy hwcomponents-library, ``isaac_router`` (32 nm, 1 ns cycle): 20.74 pJ per 256-bit
# read; its ``isaac_router_shared_by_four`` notes: ISAAC shares each router between 4 tiles
# (a concentrated mesh) and the router bandwidth equals the tile's eDRAM bandwidth (256 bits
# per cycle). One hop = one router traversal.
ISAAC_ROUTER_PJ = 20.74
ISAAC_ROUTER_BITS = 256

TOPOLOGIES = ("mesh", "cmesh", "bus")
"""Networks on chip (:mod:`fusiontune.sim.placement`): a 2-D mesh of one core per router, a
concentrated mesh of ``concentration`` cores per router, or a bus (one hop between any two)."""

# cim-parameters.md, derived row: PUMAsim 128x128 crossbar power 0.3 mW over a 100 ns read
# cycle, shared by 16,384 cells -> 0.3e-3 W * 100e-9 s / 16384 = 1.83 fJ per cell operation.
CROSSBAR_128_POWER_W = 0.3e-3
CROSSBAR_128_CYCLE_S = 100e-9
CROSSBAR_128_CELLS = 128 * 128
PJ_PER_J = 1e12
CELL_OP_PJ = CROSSBAR_128_POWER_W * CROSSBAR_128_CYCLE_S / CROSSBAR_128_CELLS * PJ_PER_J

# ISAAC components: eDRAM buffer 64 KB, 256-bit port, 20.45 pJ per access.
EDRAM_ACCESS_PJ = 20.45
EDRAM_PORT_BITS = 256

# DNN+NeuroSim V2.1 DRAM.cpp: energy per bit and bandwidth by DRAM kind.
DRAM_KINDS: dict[str, tuple[float, float]] = {
    "HBM2": (3.9, 15_200.0),  # 3.9 pJ/bit, 15.2 Tbit/s
    "GDDR5": (14.0, 4_288.0),  # 14 pJ/bit, 4.288 Tbit/s
}
DRAM_CUSTOM = "custom"

BUFFER_TECHS = ("edram", "sram")
"""Technologies of the on-chip buffer; each has its area per KiB in :mod:`fusiontune.sim.area`."""

MAX_INT_BITS = 32
MAX_CROSSBAR_DIM = 4096
MAX_CELL_BITS = 8
MAX_COUNT = 10**9
MAX_BUFFER_BYTES = 1 << 40
MAX_ENERGY_PJ = 1e6
MAX_TIME_NS = 1e9


@dataclass(frozen=True)
class HardwareConfig:
    """Parameters of one CIM accelerator; defaults are the ISAAC-like ReRAM chip of DESIGN §7
    as one flat pool (the preset ``isaac_reram_flat``; ``isaac_reram`` is the same chip as its
    168 tiles, ``cores: 168``, ``docs/cores.md``).

    Attributes:
        name: preset name (not part of :attr:`hash`).
        crossbar_rows: word lines per crossbar (128; NeuroSim numRowSubArray, MNSIM Xbar_Size).
        crossbar_cols: bit lines per crossbar (128; same sources).
        cell_bits: bits stored per cell (2; CiMLoop ISAAC model).
        weight_bits: weight precision (8; ISAAC); a weight spans ceil(weight_bits/cell_bits)
            columns.
        act_bits: activation precision (8; ISAAC). One element is ceil(act_bits/8) bytes.
        dac_bits: input bits applied per crossbar cycle (1: ISAAC's 1-bit row drivers, bit-serial).
        adc_bits: ADC resolution (8; ISAAC); selects the energy in ``adc_pj_by_bits``.
        cols_per_adc: bit lines sharing one ADC (8; NeuroSim numColMuxed).
        n_crossbars: crossbars on the chip (16,128 = ISAAC's 168 tiles x 12 IMAs x 8 crossbars).
        buffer_bytes: on-chip activation buffer (168 x 64 KB eDRAM = ISAAC's chip total).
        adc_pj_by_bits: ADC energy per conversion by resolution (Accelergy ISAAC components).
        adc_conversion_ns: one conversion at 1.2 GS/s (same source).
        dac_pj_per_drive: 1-bit row driver energy, 0.417 pJ (Accelergy ISAAC components).
        cell_op_pj: one cell operation, 1.83 fJ (derived: PUMAsim 0.3 mW x 100 ns / 16384 cells).
        shift_add_pj: one 16-bit shift-and-add of an ADC result, 0.021 pJ (ISAAC components).
        digital_op_pj: one element op of a non-crossbar op (8-bit add 0.03 pJ, Horowitz ISSCC'14).
        digital_ops_per_cycle: element ops the digital units retire per clock (assumed 128: one
            lane per crossbar column; no published figure in cim-parameters.md).
        buffer_pj_per_bit: eDRAM buffer access (20.45 pJ per 256-bit access; ISAAC components).
        dram_kind: "HBM2", "GDDR5" (DNN+NeuroSim DRAM.cpp) or "custom"; a named kind fixes the
            two DRAM numbers below.
        dram_pj_per_bit: DRAM access energy (HBM2 3.9 pJ/bit; NeuroSim DRAM.cpp).
        dram_bandwidth_gbps: DRAM bandwidth in Gbit/s (HBM2 15.2 Tbit/s; same source).
        crossbar_cycle_ns: one crossbar read (100 ns; PUMAsim xbar latency for ISAAC).
        clock_ghz: digital clock; ``_cycles`` fields count its cycles (1 GHz; NeuroSim clkFreq).
        weights_resident: all weights stay programmed in the crossbars (ISAAC: True); when
            False every weight matrix is loaded from DRAM and programmed once per inference.
        weight_program_pj_per_cell: programming one cell (assumed 2 pJ: a ReRAM SET/RESET pulse
            of 2 V x 100 uA x 10 ns; no row in cim-parameters.md).
        array_units: crossbars that compute at the same time (0: every crossbar a group maps
            computes in parallel, ISAAC-style). With ``n`` > 0 the crossbar tiles of a matrix take
            turns on ``n`` arrays (ZigZag's single AIMC macro: 1; Stream's quad core: 4), and the
            stages of a ``stream`` group share them unless all their tiles fit at once.
        overlap_memory_compute: DRAM transfers overlap computation (double buffering: cycles =
            max(compute, memory)); False adds them (Stream's per-layer schedule).
        weight_reload: when weights are not resident and a matrix needs more crossbars than
            ``n_crossbars``, count the DRAM re-reads of a tiled schedule (``reload_bytes``,
            ZigZag-style): output tiles whose input and partial sums fit ``buffer_bytes``, each
            re-loading the weights, and output-channel chunks, each re-reading the input. False
            keeps the load-once idealisation.
        psum_bits: precision of partial sums kept in the buffer (0: they stay in the array
            periphery). With ``array_units``, the row tiles of a matrix that take turns pass
            their partial sums through the buffer (written and read back once per extra turn);
            ``weight_reload`` sizes its tiles with them (ZigZag: 16 = 2 x 8-bit activations).
        buffer_tech: technology of the activation buffer, ``edram`` (ISAAC's, the default) or
            ``sram``; it sets the buffer's area per KiB (:mod:`fusiontune.sim.area`) and
            nothing else: the access energy is ``buffer_pj_per_bit``, given per preset.
        cores: cores of the chip (``docs/cores.md``), each with ``n_crossbars / cores``
            crossbars and ``buffer_bytes / cores`` of buffer (both must divide). 1 (the
            default) is the flat model: one pool of crossbars and one buffer, no network.
            ISAAC: 168 tiles; PUMA: 138 tiles.
        topology: the network between the cores, ``mesh``, ``cmesh`` or ``bus``
            (:data:`TOPOLOGIES`); hops are Manhattan distances between routers on a (c)mesh,
            1 between any two cores on a bus.
        mesh_width: routers per row of a (c)mesh; 0 (default) takes the most square shape
            (the least divisor of the router count that is at least its square root).
        concentration: cores per router (``cmesh``; 1 on a ``mesh``; ISAAC and PUMAsim: 4).
            Cores under one router are 0 hops apart.
        noc_pj_per_bit_hop: energy of one bit through one router, 0.081 pJ (Accelergy
            ``isaac_router``: 20.74 pJ per 256 bits).
        noc_link_bytes_per_cycle: bytes a link carries per clock, 32 (Accelergy's ISAAC
            router: the tile's 256-bit eDRAM bandwidth); a group's busiest link bounds its
            ``cycles`` (``docs/cores.md``, "NoC bandwidth").
        global_buffer_bytes: a buffer shared by all cores (0: none, as on ISAAC); described,
            not yet used by placement.
    """

    name: str = "isaac_reram_flat"
    crossbar_rows: int = 128
    crossbar_cols: int = 128
    cell_bits: int = 2
    weight_bits: int = 8
    act_bits: int = 8
    dac_bits: int = 1
    adc_bits: int = 8
    cols_per_adc: int = 8
    n_crossbars: int = ISAAC_TILES * ISAAC_CROSSBARS_PER_TILE
    buffer_bytes: int = ISAAC_TILES * ISAAC_EDRAM_PER_TILE_BYTES
    adc_pj_by_bits: tuple[tuple[int, float], ...] = ACCELERGY_ADC_PJ_BY_BITS
    adc_conversion_ns: float = 1.0 / ADC_SAMPLE_RATE_GSPS
    dac_pj_per_drive: float = 0.417
    cell_op_pj: float = CELL_OP_PJ
    shift_add_pj: float = 0.021
    digital_op_pj: float = 0.03
    digital_ops_per_cycle: int = 128
    buffer_pj_per_bit: float = EDRAM_ACCESS_PJ / EDRAM_PORT_BITS
    dram_kind: str = "HBM2"
    dram_pj_per_bit: float = DRAM_KINDS["HBM2"][0]
    dram_bandwidth_gbps: float = DRAM_KINDS["HBM2"][1]
    crossbar_cycle_ns: float = 100.0
    clock_ghz: float = 1.0
    weights_resident: bool = True
    weight_program_pj_per_cell: float = 2.0
    array_units: int = 0
    overlap_memory_compute: bool = True
    weight_reload: bool = False
    psum_bits: int = 0
    buffer_tech: str = "edram"
    cores: int = 1
    topology: str = "mesh"
    mesh_width: int = 0
    concentration: int = 1
    noc_pj_per_bit_hop: float = ISAAC_ROUTER_PJ / ISAAC_ROUTER_BITS
    noc_link_bytes_per_cycle: int = ISAAC_ROUTER_BITS // BITS_PER_BYTE
    global_buffer_bytes: int = 0

    def __post_init__(self) -> None:
        """Refuse out-of-range or contradictory values however the config was built (a direct
        ``HardwareConfig(adc_bits=3)`` fails here, not later inside the simulator)."""
        for key, (kind, low, high) in _RULES.items():
            value = getattr(self, key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind in (_INT, _FLOAT) and numeric and not low <= value <= high:
                raise ConfigError(
                    f"{_DIRECT}: key '{key}' = {value} is out of range; "
                    f"allowed {_fmt(low)} .. {_fmt(high)}"
                )
        _adc_table(self.adc_pj_by_bits, _DIRECT)
        _check_consistent(self, _DIRECT)

    # ---- derived ----------------------------------------------------------------------
    @property
    def act_bytes(self) -> int:
        """Bytes per activation element (DESIGN §6)."""
        return math.ceil(self.act_bits / BITS_PER_BYTE)

    @property
    def weight_slices(self) -> int:
        """Cell columns per weight (bit slicing)."""
        return math.ceil(self.weight_bits / self.cell_bits)

    @property
    def input_slices(self) -> int:
        """Crossbar cycles per input vector (bit-serial inputs through the DACs)."""
        return math.ceil(self.act_bits / self.dac_bits)

    @property
    def adc_pj_per_conversion(self) -> float:
        return dict(self.adc_pj_by_bits)[self.adc_bits]

    @property
    def slice_cycles(self) -> int:
        """Clock cycles per input bit-slice: the crossbar read or the shared ADC, the slower."""
        slice_ns = max(self.crossbar_cycle_ns, self.cols_per_adc * self.adc_conversion_ns)
        return math.ceil(slice_ns * self.clock_ghz - 1e-9)

    @property
    def core_crossbars(self) -> int:
        """Crossbars of one core (``n_crossbars / cores``)."""
        return self.n_crossbars // self.cores

    @property
    def core_buffer_bytes(self) -> int:
        """Buffer of one core (``buffer_bytes / cores``)."""
        return self.buffer_bytes // self.cores

    @property
    def routers(self) -> int:
        """Routers of the network (``cores / concentration``; 1 on a bus)."""
        return 1 if self.topology == "bus" else self.cores // self.concentration

    @property
    def mesh_shape(self) -> tuple[int, int]:
        """``(width, height)`` of the router mesh (``(1, 1)`` on a bus)."""
        n = self.routers
        width = self.mesh_width or next(w for w in range(1, n + 1) if n % w == 0 and w * w >= n)
        return width, n // width

    def weight_bytes(self, n_weights: int) -> int:
        """Bytes of ``n_weights`` weights at ``weight_bits`` each."""
        return math.ceil(n_weights * self.weight_bits / BITS_PER_BYTE)

    # ---- (de)serialisation ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict (YAML/JSON friendly); the ADC table becomes ``{bits: pJ}``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["adc_pj_by_bits"] = {int(b): float(e) for b, e in self.adc_pj_by_bits}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "hardware") -> HardwareConfig:
        """Validate ``data`` (partial: missing keys keep their defaults) and build a config.

        Raises:
            ConfigError: unknown key, wrong type, out-of-range or contradictory value.
        """
        return _build(dict(data), source)

    @cached_property
    def hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the parameters (``name`` excluded)."""
        d = self.to_dict()
        d.pop("name")
        for key, default in _HASHED_ONLY_WHEN_SET.items():
            if d[key] == default:
                d.pop(key)  # configs that leave the knob at its default keep their hash
        d["adc_pj_by_bits"] = sorted(d["adc_pj_by_bits"].items())
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> HardwareConfig:
        """A validated copy with some fields changed (``overrides`` of :func:`load_hardware`).

        Changing ``dram_kind`` to a named kind takes that kind's DRAM numbers; changing a DRAM
        number without naming a kind makes the kind ``custom``.
        """
        data = self.to_dict()
        dram_keys = ("dram_pj_per_bit", "dram_bandwidth_gbps")
        if "dram_kind" in changes:
            for key in dram_keys:
                data.pop(key)
        elif any(key in changes for key in dram_keys):
            data["dram_kind"] = DRAM_CUSTOM
        data.update(changes)
        return _build(data, "overrides")


# ---- validation ---------------------------------------------------------------------------
# key -> (type, low, high); "bits" ranges may depend on other keys (checked afterwards).
_INT, _FLOAT, _BOOL, _STR = "an int", "a number", "true or false", "a string"
_RULES: dict[str, tuple[str, float, float]] = {
    "crossbar_rows": (_INT, 1, MAX_CROSSBAR_DIM),
    "crossbar_cols": (_INT, 1, MAX_CROSSBAR_DIM),
    "cell_bits": (_INT, 1, MAX_CELL_BITS),
    "weight_bits": (_INT, 1, MAX_INT_BITS),
    "act_bits": (_INT, 1, MAX_INT_BITS),
    "dac_bits": (_INT, 1, MAX_INT_BITS),
    "adc_bits": (_INT, 1, MAX_INT_BITS),
    "cols_per_adc": (_INT, 1, MAX_CROSSBAR_DIM),
    "n_crossbars": (_INT, 1, MAX_COUNT),
    "buffer_bytes": (_INT, 1, MAX_BUFFER_BYTES),
    "adc_conversion_ns": (_FLOAT, 1e-6, MAX_TIME_NS),
    "dac_pj_per_drive": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "cell_op_pj": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "shift_add_pj": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "digital_op_pj": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "digital_ops_per_cycle": (_INT, 1, MAX_COUNT),
    "buffer_pj_per_bit": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "dram_pj_per_bit": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "dram_bandwidth_gbps": (_FLOAT, 1e-3, 1e9),
    "crossbar_cycle_ns": (_FLOAT, 1e-3, MAX_TIME_NS),
    "clock_ghz": (_FLOAT, 1e-3, 1e3),
    "weight_program_pj_per_cell": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "weights_resident": (_BOOL, 0, 1),
    "array_units": (_INT, 0, MAX_COUNT),
    "overlap_memory_compute": (_BOOL, 0, 1),
    "weight_reload": (_BOOL, 0, 1),
    "psum_bits": (_INT, 0, 2 * MAX_INT_BITS),
    "name": (_STR, 0, 0),
    "dram_kind": (_STR, 0, 0),
    "buffer_tech": (_STR, 0, 0),
    "cores": (_INT, 1, MAX_COUNT),
    "topology": (_STR, 0, 0),
    "mesh_width": (_INT, 0, MAX_COUNT),
    "concentration": (_INT, 1, MAX_COUNT),
    "noc_pj_per_bit_hop": (_FLOAT, 0.0, MAX_ENERGY_PJ),
    "noc_link_bytes_per_cycle": (_INT, 1, MAX_COUNT),
    "global_buffer_bytes": (_INT, 0, MAX_BUFFER_BYTES),
}
_KEYS = tuple(f.name for f in fields(HardwareConfig))
_HASHED_ONLY_WHEN_SET: dict[str, Any] = {
    "array_units": HardwareConfig.array_units,
    "overlap_memory_compute": HardwareConfig.overlap_memory_compute,
    "weight_reload": HardwareConfig.weight_reload,
    "psum_bits": HardwareConfig.psum_bits,
    "buffer_tech": HardwareConfig.buffer_tech,
    "cores": HardwareConfig.cores,
    "topology": HardwareConfig.topology,
    "mesh_width": HardwareConfig.mesh_width,
    "concentration": HardwareConfig.concentration,
    "noc_pj_per_bit_hop": HardwareConfig.noc_pj_per_bit_hop,
    "noc_link_bytes_per_cycle": HardwareConfig.noc_link_bytes_per_cycle,
    "global_buffer_bytes": HardwareConfig.global_buffer_bytes,
}
"""Knobs whose default reproduces the model before they existed: hashed only when changed, so
every earlier config keeps its :attr:`HardwareConfig.hash` (stored results stay comparable)."""
_DIRECT = "HardwareConfig"
"""Source named by errors of a config built directly (not from a file or overrides)."""


def _fmt(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _check_scalar(key: str, value: Any, source: str) -> Any:
    kind, low, high = _RULES[key]
    ok = {
        _INT: isinstance(value, int) and not isinstance(value, bool),
        _FLOAT: isinstance(value, (int, float)) and not isinstance(value, bool),
        _BOOL: isinstance(value, bool),
        _STR: isinstance(value, str),
    }[kind]
    if not ok:
        raise ConfigError(
            f"{source}: key '{key}' must be {kind}, got {type(value).__name__} {value!r}"
        )
    if kind in (_INT, _FLOAT) and not low <= value <= high:
        raise ConfigError(
            f"{source}: key '{key}' = {value} is out of range; allowed {_fmt(low)} .. {_fmt(high)}"
        )
    return float(value) if kind == _FLOAT else value


def _adc_table(value: Any, source: str) -> tuple[tuple[int, float], ...]:
    """The ADC energy table as sorted (bits, pJ) pairs: integer bits in 1 .. 32, finite pJ in
    0 .. MAX_ENERGY_PJ (NaN or infinity would poison every energy total)."""
    shape_error = ConfigError(
        f"{source}: key 'adc_pj_by_bits' must map ADC bits (int) to pJ per conversion "
        f"(number), got {value!r}"[:300]
    )
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(b, e) for b, e in items]
    except (TypeError, ValueError):
        raise shape_error from None
    table = []
    for b, e in pairs:
        if isinstance(b, str) and b.strip().isdigit():
            b = int(b)  # JSON keys are strings (hw_json of a stored trial)
        numeric = isinstance(e, (int, float)) and not isinstance(e, bool)
        if isinstance(b, bool) or not isinstance(b, int) or not numeric:
            raise shape_error
        if not 1 <= b <= MAX_INT_BITS or not (math.isfinite(e) and 0 <= e <= MAX_ENERGY_PJ):
            raise ConfigError(
                f"{source}: key 'adc_pj_by_bits' entry {b}: {e} is out of range; allowed bits "
                f"1 .. {MAX_INT_BITS} and pJ 0 .. {MAX_ENERGY_PJ:g} (finite)"
            )
        table.append((b, float(e)))
    if not table:
        raise ConfigError(f"{source}: key 'adc_pj_by_bits' needs at least one entry")
    return tuple(sorted(table))


def _build(data: dict[str, Any], source: str) -> HardwareConfig:
    check_keys(data, _KEYS, source, label="allowed keys")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "adc_pj_by_bits":
            values[key] = _adc_table(value, source)
        else:
            values[key] = _check_scalar(key, value, source)
    _resolve_dram(values, data, source)
    try:
        return dataclasses.replace(HardwareConfig(), **values)
    except ConfigError as exc:  # __post_init__ names no file: name ours
        raise ConfigError(source + str(exc).removeprefix(_DIRECT)) from None


def _resolve_dram(values: dict[str, Any], given: Mapping[str, Any], source: str) -> None:
    kind = values.get("dram_kind", HardwareConfig.dram_kind)
    if kind == DRAM_CUSTOM:
        return
    if kind not in DRAM_KINDS:
        allowed = [*DRAM_KINDS, DRAM_CUSTOM]
        raise ConfigError(
            f"{source}: key 'dram_kind' = '{kind}' is not one of {', '.join(allowed)}"
            f"{closest(str(kind), allowed)}"
        )
    pj, gbps = DRAM_KINDS[kind]
    for key, expected in (("dram_pj_per_bit", pj), ("dram_bandwidth_gbps", gbps)):
        if key in given and "dram_kind" in given and not math.isclose(values[key], expected):
            raise ConfigError(
                f"{source}: key '{key}' = {values[key]:g} contradicts dram_kind '{kind}' "
                f"({expected:g}); set dram_kind: custom to use your own DRAM numbers"
            )
        if key not in given or "dram_kind" in given:
            values[key] = expected
        elif not math.isclose(values[key], expected):
            values["dram_kind"] = DRAM_CUSTOM  # numbers changed on a named kind's base


def _check_consistent(hw: HardwareConfig, source: str) -> None:
    if hw.buffer_tech not in BUFFER_TECHS:
        raise ConfigError(
            f"{source}: key 'buffer_tech' = {hw.buffer_tech!r} is not one of "
            f"{', '.join(BUFFER_TECHS)}{closest(str(hw.buffer_tech), BUFFER_TECHS)}"
        )
    if hw.cell_bits > hw.weight_bits:
        raise ConfigError(
            f"{source}: key 'cell_bits' = {hw.cell_bits} exceeds weight_bits = {hw.weight_bits}; "
            f"allowed 1 .. weight_bits"
        )
    if hw.dac_bits > hw.act_bits:
        raise ConfigError(
            f"{source}: key 'dac_bits' = {hw.dac_bits} exceeds act_bits = {hw.act_bits}; "
            f"allowed 1 .. act_bits"
        )
    if hw.cols_per_adc > hw.crossbar_cols:
        raise ConfigError(
            f"{source}: key 'cols_per_adc' = {hw.cols_per_adc} exceeds crossbar_cols = "
            f"{hw.crossbar_cols}; allowed 1 .. crossbar_cols"
        )
    if hw.weight_slices > hw.crossbar_cols:
        raise ConfigError(
            f"{source}: key 'weight_bits' = {hw.weight_bits} needs {hw.weight_slices} columns of "
            f"{hw.cell_bits}-bit cells, more than crossbar_cols = {hw.crossbar_cols}"
        )
    _check_chip(hw, source)
    table = dict(hw.adc_pj_by_bits)
    if hw.adc_bits not in table:
        raise ConfigError(
            f"{source}: key 'adc_bits' = {hw.adc_bits} has no energy in adc_pj_by_bits; "
            f"allowed {', '.join(str(b) for b in sorted(table))}"
        )


def _check_chip(hw: HardwareConfig, source: str) -> None:
    """The many-core keys (``docs/cores.md``): a chip the placement model can lay out."""
    if hw.topology not in TOPOLOGIES:
        raise ConfigError(
            f"{source}: key 'topology' = {hw.topology!r} is not one of "
            f"{', '.join(TOPOLOGIES)}{closest(str(hw.topology), TOPOLOGIES)}"
        )
    for key in ("n_crossbars", "buffer_bytes"):
        total = getattr(hw, key)
        if total % hw.cores or total < hw.cores:
            raise ConfigError(
                f"{source}: key 'cores' = {hw.cores} does not divide {key} = {total}; each "
                f"core holds {key} / cores, so cores must divide it"
            )
    if hw.topology == "bus":
        if hw.mesh_width or hw.concentration != 1:
            raise ConfigError(
                f"{source}: key 'topology' = 'bus' takes no mesh_width or concentration "
                f"(got mesh_width {hw.mesh_width}, concentration {hw.concentration}); allowed "
                f"mesh_width 0 and concentration 1"
            )
        return
    if hw.topology == "mesh" and hw.concentration != 1:
        raise ConfigError(
            f"{source}: key 'concentration' = {hw.concentration} needs topology 'cmesh'; a "
            f"'mesh' has one core per router (allowed concentration 1)"
        )
    if hw.cores % hw.concentration:
        raise ConfigError(
            f"{source}: key 'concentration' = {hw.concentration} does not divide cores = "
            f"{hw.cores}; a {hw.topology} needs width x height x concentration = cores"
        )
    routers = hw.cores // hw.concentration
    if hw.mesh_width and routers % hw.mesh_width:
        raise ConfigError(
            f"{source}: key 'mesh_width' = {hw.mesh_width} does not divide the {routers} "
            f"routers (cores {hw.cores} / concentration {hw.concentration}); a "
            f"{hw.topology} needs width x height x concentration = cores"
        )


# ---- presets ------------------------------------------------------------------------------
def presets_dir() -> Traversable:
    """The folder of the shipped presets, ``fusiontune/presets/hardware`` (package data)."""
    return presets.hardware_dir()


def preset_names() -> tuple[str, ...]:
    folder = presets_dir()
    if not folder.is_dir():
        return ()
    return tuple(sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if _is_preset(p)))


def _is_preset(entry: Traversable) -> bool:
    return entry.name.endswith(".yaml") and entry.is_file()


def load_hardware(
    path_or_preset: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> HardwareConfig:
    """Load a hardware config from a preset name or a YAML file, then apply ``overrides``.

    Args:
        path_or_preset: ``None`` for the embedded default (:class:`HardwareConfig`), a preset
            name (``isaac_reram_flat``, ``sram_edge``, ``isaac_hbm``, ``isaac_ddr``,
            ``zigzag_aimc``, ``stream_tpu_like``; many-core: ``isaac_reram`` = ``isaac_168``,
            ``puma_138``:
            ``fusiontune/presets/hardware/<name>.yaml``) or a YAML path.
            A YAML file lists any subset of the fields; the rest keep their defaults.
        overrides: field values applied on top (validated the same way).

    Raises:
        ConfigError: the file or preset is missing, is not a YAML mapping, or a key is invalid.
    """
    if path_or_preset is None:
        base = HardwareConfig()
    else:
        found = _resolve(path_or_preset)
        if found is None:
            base = HardwareConfig()  # the embedded default preset
        else:
            data = _parse_yaml(found.text, found.source, found.stem)
            data.setdefault("name", found.stem)
            base = _build(data, found.source)
    return base.replace(**overrides) if overrides else base


class _Found(NamedTuple):
    """A hardware YAML found by :func:`_resolve`."""

    source: str
    """How errors name it: a user's file as given, a preset as ``fusiontune/presets/...``."""
    stem: str
    """The file name without ``.yaml`` (the config's name unless the file sets one)."""
    text: str


def _resolve(path_or_preset: str | Path) -> _Found | None:
    """A user's YAML file or a shipped preset (package data, maybe in a wheel or a zip).

    ``None``: the name of the embedded default with no preset file of that name.
    """
    text = str(path_or_preset)
    if not text.strip():
        raise ConfigError(
            f"hardware {text!r} is empty; give a preset ({', '.join(preset_names())}) or the "
            "path of a YAML file"
        )
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in text or "\\" in text:
        if not path.is_file():
            raise ConfigError(f"{text}: hardware file not found")
        return _Found(text, path.stem, _read_file(path))
    preset = presets_dir() / f"{text}.yaml"
    if preset.is_file():
        shown = presets.shown_name(f"{presets.HARDWARE_DIR}/{preset.name}")
        return _Found(shown, text, preset.read_text(encoding="utf-8"))
    if text == HardwareConfig.name:
        return None
    names = preset_names()
    raise ConfigError(
        f"hardware preset '{text}' not found{closest(text, names)}; "
        f"presets: {', '.join(names) or '(none installed)'}, or give a YAML file"
    )


def _read_file(path: Path) -> str:
    from fusiontune.fileio import read_text

    return read_text(path, ConfigError, "hardware file")


def _parse_yaml(text: str, source: str, stem: str) -> dict[str, Any]:
    """The mapping of a hardware file; an alias bomb is validated as :func:`_build` would."""
    from fusiontune.fileio import parse_yaml

    def check(data: Any) -> None:
        mapping = _as_mapping(data, source)
        mapping.setdefault("name", stem)
        _build(mapping, source)

    return _as_mapping(parse_yaml(text, source, ConfigError, check), source)


def _as_mapping(data: Any, source: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of hardware keys, got {type(data).__name__}"
        )
    return data
