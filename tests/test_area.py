"""Area model by buffer technology (``sim/area.py``): hand-computed areas of a small chip,
the ``buffer_tech`` field's validation and hashing, and that the technology changes the area
only. ISAAC's 168-tile check against Table 6 (1 %) is in ``test_codesign.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusiontune.errors import ConfigError
from fusiontune.sim.area import area_breakdown, chip_area_mm2
from fusiontune.sim.hardware import HardwareConfig, load_hardware

EXACT = 1e-12
"""Relative tolerance of a hand-computed sum of a few products (float rounding only)."""

SMALL = {"n_crossbars": 8, "buffer_bytes": 4096}
"""Eight ISAAC crossbars (128 x 128, 8-bit ADC, one ADC each: 128 columns / 100 ns = 1.28 GS/s)
and a 4 KiB buffer."""

# Per crossbar, from ISAAC Table 6 (per IMA of 8 crossbars, per tile of 96):
# ADC 0.0096/8 = 0.0012; DAC 128 x 0.00017/1024 = 0.00002125; S&H 128 x 0.00004/1024 =
# 0.000005; array 0.0002/8 = 0.000025; IMA registers (0.00024 + 0.0021 + 0.00077)/8 =
# 0.00038875; tile digital (0.090 + 0.151/4 + 0.0006 + 0.00006 + 0.00024 + 0.0032)/96 =
# 0.13185/96 = 0.001373437 5. Sum 0.003013437 5 mm², x 8 crossbars:
SMALL_CROSSBARS_AND_DIGITAL_MM2 = 0.0241075
SMALL_EDRAM_MM2 = 4 * 0.083 / 64
"""4 KiB at ISAAC's 0.083 mm² per 64 KB = 0.0051875 mm²."""
SMALL_SRAM_MM2 = 4 * 8192 * 0.171 / 0.7 / 1e6
"""4 KiB of 0.171 µm² bitcells over 0.7 array efficiency = 0.00800475... mm²."""


@pytest.mark.parametrize(
    ("tech", "buffer_mm2"), [("edram", SMALL_EDRAM_MM2), ("sram", SMALL_SRAM_MM2)]
)
def test_small_chip_area_by_hand(tech: str, buffer_mm2: float) -> None:
    hw = HardwareConfig(**SMALL, buffer_tech=tech)  # type: ignore[arg-type]
    area = area_breakdown(hw)
    assert area.buffer_mm2 == pytest.approx(buffer_mm2, rel=EXACT)
    assert area.crossbar_mm2 + area.tile_digital_mm2 == pytest.approx(
        SMALL_CROSSBARS_AND_DIGITAL_MM2, rel=EXACT
    )
    assert chip_area_mm2(hw) == pytest.approx(
        SMALL_CROSSBARS_AND_DIGITAL_MM2 + buffer_mm2, rel=EXACT
    )


def test_sram_costs_more_per_kib_than_edram() -> None:
    edram = area_breakdown(HardwareConfig(**SMALL)).buffer_mm2  # type: ignore[arg-type]
    sram = area_breakdown(HardwareConfig(**SMALL, buffer_tech="sram")).buffer_mm2  # type: ignore[arg-type]
    assert sram / edram == pytest.approx(8192 * 0.171 / 0.7 / 1e6 / (0.083 / 64), rel=EXACT)
    assert 1.5 < sram / edram < 1.6


def test_buffer_tech_default_keeps_every_hash_and_is_hashed_when_set() -> None:
    base = HardwareConfig()
    assert base.buffer_tech == "edram"
    assert base.hash == "f39c14947c3d8b31"  # as before the field existed
    sram = base.replace(buffer_tech="sram")
    assert sram.hash != base.hash
    assert sram.replace(buffer_tech="edram").hash == base.hash
    for preset in ("isaac_reram", "isaac_reram_flat", "isaac_hbm", "isaac_ddr"):
        assert load_hardware(preset).buffer_tech == "edram"


def test_sram_presets_use_sram_area() -> None:
    for preset in ("sram_edge", "zigzag_aimc", "stream_tpu_like"):
        hw = load_hardware(preset)
        assert hw.buffer_tech == "sram"
        assert area_breakdown(hw).buffer_mm2 == pytest.approx(
            hw.buffer_bytes / 1024 * 8192 * 0.171 / 0.7 / 1e6, rel=EXACT
        )


def test_bad_buffer_tech_names_the_key_and_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'buffer_tech' = 'sramm'.*edram, sram.*'sram'"):
        HardwareConfig(buffer_tech="sramm")
    path = tmp_path / "hw.yaml"
    path.write_text("buffer_tech: dram\n")
    with pytest.raises(ConfigError, match=r"hw.yaml: key 'buffer_tech' = 'dram'"):
        load_hardware(path)
    path.write_text("buffer_tech: 1\n")
    with pytest.raises(ConfigError, match=r"key 'buffer_tech' must be a string"):
        load_hardware(path)


def test_buffer_tech_changes_the_area_only() -> None:
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.greedy import greedy_plan

    graph = build_zoo("lenet5")
    sram = load_hardware("sram_edge")
    edram = sram.replace(buffer_tech="edram")
    plan = greedy_plan(graph, hw=sram)
    a, b = simulate(graph, plan, sram), simulate(graph, plan, edram)
    for field in ("traffic_bytes", "energy_pj", "cycles", "buffer_needed_bytes"):
        assert getattr(a, field) == getattr(b, field)
    delta = area_breakdown(sram).buffer_mm2 - area_breakdown(edram).buffer_mm2
    assert a.area_mm2 - b.area_mm2 == pytest.approx(delta, rel=1e-9)
    assert delta > 0
