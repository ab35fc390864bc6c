"""Our conventions against the figures peer tools report (../shared/reference/peers.md).

Stream 2.1.1 (layer-fused scheduling): two 3x3 convolutions 64->64->64 at 56x56, pad 1, int8
activations and weights, batch 1, weights read from DRAM once. Layer by layer it reads the
input (200,704 B) + each weight set (36,864 B) + the intermediate read back (200,704 B) and
writes the intermediate and the output; fused, the intermediate never leaves the chip.

ZigZag 3.9.1 (AIMC macro, 128x128, 8-bit ADC): array energy incl. ADC per MAC 0.208 pJ at
full array use to 0.54 pJ at 19 % use.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.cost import simulate
from fusiontune.sim.hardware import HardwareConfig, load_hardware

ZIGZAG_ARRAY_PJ_PER_MAC = (0.2, 0.54)


@pytest.fixture(scope="module")
def conv_pair() -> Graph:
    b = GraphBuilder("stream_pair")
    x = b.input("x", (1, 64, 56, 56))
    y = b.conv(x, 64, 3, pad=1, bias=False, name="conv1")
    b.conv(y, 64, 3, pad=1, bias=False, name="conv2")
    return b.build()


def test_stream_layer_by_layer_and_fused_dram_bytes(conv_pair: Graph) -> None:
    hw = HardwareConfig(weights_resident=False)  # int8 weights loaded once
    unfused = Plan((Group(("conv1",), Mode.SINGLE), Group(("conv2",), Mode.SINGLE)))
    fused = Plan((Group(("conv1", "conv2"), Mode.STREAM),))
    m = simulate(conv_pair, unfused, hw)
    assert (m.dram_read_bytes, m.dram_write_bytes) == (475_136, 401_408)
    f = simulate(conv_pair, fused, hw)
    assert (f.dram_read_bytes, f.dram_write_bytes) == (274_432, 200_704)
    assert f.weight_load_bytes == 2 * 36_864
    assert f.traffic_bytes == f.lower_bound_bytes  # fused reaches the compulsory traffic
    # at its peak the fused pair holds 6 rows of 64 ch x 56 columns: 2 rows of x for conv1's
    # next window, 3 rows of the intermediate for conv2's window and conv2's new row
    assert f.buffer_needed_bytes == 6 * 64 * 56


def test_array_energy_per_mac_against_zigzag(conv_pair: Graph) -> None:
    """A 3x3 64->64 layer: rows 576 (5 row tiles, the last half used), 64 x 4 = 256 columns.

    Per vector and bit-slice: 576 x 256 cell ops, 5 x 256 conversions, 576 x 2 row drives,
    for 576 x 64 MACs; 8 bit-slices with ISAAC's 1-bit DACs.
    cells: 576*256*8*1.831e-3 / 36864 = 0.0586 pJ/MAC; ADC: 1280*8*1.67 / 36864 = 0.4639;
    cells + ADC = 0.5225 pJ/MAC: inside ZigZag's range. With ISAAC's 1-bit DACs the drives
    add 1152*8*0.417 / 36864 = 0.1043 -> 0.627 pJ/MAC, above the range: ZigZag's aimc drives
    2 input bits per cycle, halving slices (hence conversions and drives); with dac_bits=2
    the whole array incl. DACs is 0.313 pJ/MAC, inside the range.
    """
    plan = Plan((Group(("conv1",), Mode.SINGLE), Group(("conv2",), Mode.SINGLE)))
    m = simulate(conv_pair, plan, HardwareConfig()).groups[0]
    low, high = ZIGZAG_ARRAY_PJ_PER_MAC
    assert m.macs == 56 * 56 * 576 * 64
    cells_adc = (m.cell_pj + m.adc_pj) / m.macs
    assert cells_adc == pytest.approx(0.5225, abs=5e-4) and low <= cells_adc <= high
    with_dac = (m.cell_pj + m.adc_pj + m.dac_pj) / m.macs
    assert with_dac == pytest.approx(0.6268, abs=5e-4) and with_dac > high
    z = simulate(conv_pair, plan, HardwareConfig(dac_bits=2)).groups[0]
    zigzag_like = (z.cell_pj + z.adc_pj + z.dac_pj) / z.macs
    assert zigzag_like == pytest.approx(0.3134, abs=5e-4) and low <= zigzag_like <= high


# ---- equivalent-macro presets ---------------------------------------------------------------
VDD2 = 0.9**2  # ZigZag imc_unit.py TECH_PARAM_28NM vdd 0.9 V
PRESET_DIR = Path(__file__).resolve().parents[1] / "fusiontune" / "presets" / "hardware"


@pytest.mark.parametrize("preset", ["zigzag_aimc", "stream_tpu_like"])
def test_equivalent_presets_load_and_cite_a_peer_file_on_every_key(preset: str) -> None:
    hw = load_hardware(preset)
    assert hw.name == preset and not hw.weights_resident
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    keys = [line for line in text.splitlines() if line and not line.lstrip().startswith("#")]
    assert len(keys) >= 20
    for line in keys:
        if line.startswith(" "):
            continue  # continuation of the comment above
        assert re.search(r"#\s*\[[A-Z]\]", line), f"{preset}: no cited source on '{line}'"
    # the legend names the installed peer package files and versions
    assert ("zigzag-dse 3.9.1" if preset == "zigzag_aimc" else "stream-dse 2.1.1") in text


def test_zigzag_aimc_numbers_follow_zigzag_formulas() -> None:
    hw = load_hardware("zigzag_aimc")
    # imc_array.py get_adc_cost / get_dac_cost / get_tclk at 8-bit ADC, 2-bit DAC, 128 rows
    assert hw.adc_pj_per_conversion == pytest.approx((100 * 8 + 0.001 * 4**8) * VDD2 / 1e3, 1e-5)
    assert hw.dac_pj_per_drive == pytest.approx(50e-3 * 2 * VDD2)
    assert hw.adc_conversion_ns == pytest.approx(8 * (0.00653 * 128 + 0.640))
    adder, reg = (3 * 0.7e-3 + 2 * 1.05e-3) * VDD2, 3 * 0.7e-3 * VDD2
    per_column = 0.35e-3 * VDD2 * 128 + 76 * adder / 8 + 24 * (adder + reg) / 8
    assert hw.shift_add_pj == pytest.approx(per_column, 1e-5)
    # one 128 x 128 macro of 8-bit weights in 1-bit cells, 4 input slices, 1 clock per slice
    assert (hw.crossbar_rows, hw.crossbar_cols, hw.weight_slices) == (128, 1024, 8)
    assert (hw.input_slices, hw.slice_cycles, hw.n_crossbars, hw.array_units) == (4, 1, 1, 1)
    assert hw.dram_bandwidth_gbps / hw.clock_ghz == pytest.approx(64, 1e-6)  # 64-bit port


def test_stream_tpu_like_partial_sum_cost_is_the_sram_round_trip() -> None:
    hw = load_hardware("stream_tpu_like")
    assert hw.shift_add_pj == pytest.approx(32 * (416.16 + 378.4) / 2048)
    assert hw.adc_pj_per_conversion == 0 and hw.dac_pj_per_drive == 0
    assert hw.dram_pj_per_bit == 1000 / 64 and not hw.overlap_memory_compute


# ---- the knobs the presets use: hand counts on conv2_x (64->64, 3x3, 56x56) -----------------
def _single(name: str) -> Plan:
    return Plan((Group((name,), Mode.SINGLE),))


def test_new_knobs_at_default_keep_the_hash_and_change_it_when_set() -> None:
    base = HardwareConfig()
    for change in ({"array_units": 4}, {"overlap_memory_compute": False},
                   {"weight_reload": True}, {"psum_bits": 16}):  # fmt: skip
        changed = base.replace(**change)
        assert changed.hash != base.hash
        assert changed.replace(**{k: getattr(base, k) for k in change}).hash == base.hash


def test_array_units_time_multiplex_the_tiles(conv_pair: Graph) -> None:
    """576 rows x 64 cols of 8-bit weights in 1-bit cells: 5 row tiles x 1 column tile of
    128 x 1024; one macro computes them in 5 turns of 3136 vectors x 4 input slices."""
    hw = load_hardware("zigzag_aimc")
    m = simulate(conv_pair, _single("conv1"), hw).groups[0]
    assert m.crossbars_needed == 5
    assert m.compute_cycles == 3136 * 4 * 5
    free = simulate(conv_pair, _single("conv1"), hw.replace(array_units=0)).groups[0]
    assert free.compute_cycles == 3136 * 4


def test_stream_groups_share_the_arrays_and_memory_adds_without_overlap(conv_pair: Graph) -> None:
    hw = load_hardware("stream_tpu_like")
    g = simulate(conv_pair, Plan((Group(("conv1", "conv2"), Mode.STREAM),)), hw).groups[0]
    # each layer: 18 x 2 tiles of 32 x 32 take 9 turns on 4 arrays; the two stages share them
    assert g.compute_cycles == 2 * 3136 * 9
    assert g.memory_cycles == (2 * 200_704 + 2 * 36_864) * 8 // 64
    assert g.cycles == g.compute_cycles + g.memory_cycles
    plan = Plan((Group(("conv1", "conv2"), Mode.STREAM),))
    overlapped = simulate(conv_pair, plan, hw.replace(overlap_memory_compute=True)).groups[0]
    assert overlapped.cycles == max(g.compute_cycles, g.memory_cycles)


def test_psum_round_trips_and_weight_reload_on_zigzag_aimc(conv_pair: Graph) -> None:
    """conv2_x on one macro with a 32 KiB SRAM: weights 36,864 B, input and output 200,704 B,
    16-bit partial sums 401,408 B. Cheapest tiling: 13 spatial tiles (weights loaded 13x) and
    2 output-channel chunks (input read twice): 12 x 36,864 + 200,704 = 643,072 B re-read;
    12 spatial tiles would need 3 chunks, 19 tiles re-read 663,552 B."""
    hw = load_hardware("zigzag_aimc")
    g = simulate(conv_pair, _single("conv1"), hw).groups[0]
    assert g.reload_bytes == 12 * 36_864 + 200_704
    assert g.traffic_bytes == 2 * 200_704 + 36_864 + g.reload_bytes
    assert g.programmed_cells == 13 * 576 * 64 * 8
    # buffer: vectors x rows input reads + output + staging + input re-read, and the 16-bit
    # partial sums of 5 row tiles in 5 turns written and read back 4 times
    psum = 2 * 4 * 3136 * 64 * 2
    assert g.buffer_access_bytes == 3136 * 576 + 200_704 + 2 * 200_704 + 200_704 + psum
    off = simulate(conv_pair, _single("conv1"), hw.replace(weight_reload=False, psum_bits=0))
    assert off.groups[0].reload_bytes == 0
    assert off.groups[0].buffer_access_bytes == g.buffer_access_bytes - 200_704 - psum


# ---- exp_peers against the committed peer figures --------------------------------------------
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture(scope="module")
def exp_peers() -> ModuleType:
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    return importlib.import_module("exp_peers")


def test_committed_peer_figures_are_real_runs_of_the_pinned_versions(exp_peers: ModuleType) -> None:
    figures = exp_peers.load_figures()
    assert figures["zigzag"]["version"] == exp_peers.ZIGZAG[1] == "3.9.1"
    assert figures["stream"]["version"] == exp_peers.STREAM[1] == "2.1.1"
    assert figures["command"].startswith("python experiments/exp_peers.py")
    assert [layer["layer"] for layer in figures["zigzag"]["layers"]] == [
        "conv1", "conv2_x", "conv3_x", "conv4_x", "conv5_x",
    ]  # fmt: skip
    # the figures peers.md quotes for these runs (Stream, ZigZag conv1 and conv2_x)
    st = {s["schedule"]: s for s in figures["stream"]["schedules"]}
    assert st["layer_by_layer"]["energy_pj"] / 1e6 == pytest.approx(258.0, abs=0.05)
    assert st["fused"]["energy_pj"] / 1e6 == pytest.approx(207.9, abs=0.05)
    assert (st["layer_by_layer"]["cycles"], st["fused"]["cycles"]) == (190_480, 148_240)
    zz = {layer["layer"]: layer for layer in figures["zigzag"]["layers"]}
    assert zz["conv2_x"]["energy_total_pj"] / 1e6 == pytest.approx(282.4, abs=0.05)
    assert (zz["conv1"]["cycles"], zz["conv2_x"]["cycles"]) == (226_642, 300_432)
    assert all(layer["wall_s"] > 0 for layer in figures["zigzag"]["layers"])


def test_exp_peers_table_compares_against_the_committed_figures(exp_peers: ModuleType) -> None:
    figures = exp_peers.load_figures()
    tables = exp_peers.build_tables(figures)
    long = tables["long"]
    zz = {layer["layer"]: layer for layer in figures["zigzag"]["layers"]}
    for r in long:
        if r["peer"] == "zigzag" and r["metric"] == "total":
            assert r["peer_value"] == zz[r["workload"]]["energy_total_pj"] / 1e6
            assert r["ratio"] == pytest.approx(r["fusiontune"] / r["peer_value"])
    # ZigZag's DRAM bytes are its 64-bit DRAM words, operand by operand
    conv2 = next(t for t in tables["dram_terms"] if t["layer"] == "conv2_x")
    assert conv2["zigzag_weight_reads"] == 49 and conv2["ft_weight_loads"] == 13
    assert conv2["zigzag_dram_B"] == (225_792 + 39_200 + 25_088) * 8
    # Stream: bytes exact in both schedules; energy ratio within 10 %
    met = {t["target"]: t["met"] for t in tables["targets"]}
    assert all(v for k, v in met.items() if "bytes exact" in k) and len(met) == 16
    assert met["Stream fused/unfused energy ratio within 10 %"]
    assert sum(met.values()) >= 12  # the misses are named in the notes
    assert any("conv4_x" in n and "partial sums in DRAM" in n for n in tables["notes"])
    assert tables["speed"][0]["peer"].startswith("ZigZag 3.9.1")
    assert all(r["speedup"] > 1000 for r in tables["speed"])


def test_exp_peers_without_the_peers_uses_the_committed_figures(
    exp_peers: ModuleType, tmp_path: Path
) -> None:
    assert exp_peers.peer_python("zigzag-dse", "3.9.1", "zigzag_not_here", [sys.executable]) is None
    figures = tmp_path / "figures.json"
    figures.write_text(exp_peers.FIGURES.read_text())
    exp_peers.main(["--no-run", "--figures", str(figures), "--out-dir", str(tmp_path)])
    assert figures.read_text() == exp_peers.FIGURES.read_text()  # figures untouched
    md = (tmp_path / "exp_peers.md").read_text()
    committed = (exp_peers.RESULTS_DIR / "exp_peers.md").read_text()
    assert md.split("## Notes")[0] == committed.split("## Notes")[0]  # the committed table
    assert (tmp_path / "exp_peers.csv").read_text().startswith("peer,workload,metric,unit,")
