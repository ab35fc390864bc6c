"""Hardware config: defaults with sources, presets, YAML validation and exact error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusiontune.errors import ConfigError
from fusiontune.sim.hardware import HardwareConfig, load_hardware, preset_names


def test_defaults_are_the_isaac_chip_of_design_7() -> None:
    hw = HardwareConfig()
    assert (hw.crossbar_rows, hw.crossbar_cols, hw.cell_bits, hw.weight_bits) == (128, 128, 2, 8)
    assert (hw.act_bits, hw.dac_bits, hw.adc_bits, hw.cols_per_adc) == (8, 1, 8, 8)
    assert (hw.weight_slices, hw.input_slices, hw.act_bytes) == (4, 8, 1)
    assert hw.adc_pj_per_conversion == 1.67 and hw.dac_pj_per_drive == 0.417
    assert hw.cell_op_pj == pytest.approx(1.831e-3, rel=1e-3)  # 0.3 mW x 100 ns / 16384
    assert hw.buffer_pj_per_bit == pytest.approx(0.0799, rel=1e-3)  # 20.45 pJ / 256 bit
    assert (hw.dram_kind, hw.dram_pj_per_bit, hw.dram_bandwidth_gbps) == ("HBM2", 3.9, 15_200.0)
    assert hw.n_crossbars == 168 * 96 and hw.buffer_bytes == 168 * 64 * 1024
    assert hw.slice_cycles == 100 and hw.weights_resident


def test_presets_load_and_differ_where_they_should() -> None:
    assert set(preset_names()) >= {"isaac_reram", "isaac_reram_flat", "sram_edge", "isaac_hbm",
                                   "isaac_ddr"}  # fmt: skip
    assert load_hardware("isaac_reram_flat") == HardwareConfig() == load_hardware()
    hbm, ddr = load_hardware("isaac_hbm"), load_hardware("isaac_ddr")
    assert (hbm.dram_pj_per_bit, ddr.dram_pj_per_bit) == (3.9, 14.0)
    assert (hbm.dram_bandwidth_gbps, ddr.dram_bandwidth_gbps) == (15_200.0, 4_288.0)
    assert not hbm.weights_resident and hbm.hash != ddr.hash
    edge = load_hardware("sram_edge")
    assert edge.buffer_bytes == 32 * 1024 and edge.cell_bits == 1 and edge.dram_kind == "custom"
    assert edge.buffer_bytes < HardwareConfig().buffer_bytes


def test_round_trip_and_stable_hash(tmp_path: Path) -> None:
    hw = load_hardware("sram_edge")
    assert HardwareConfig.from_dict(hw.to_dict()) == hw
    assert HardwareConfig().hash == "f39c14947c3d8b31"  # changes only when a default changes
    assert HardwareConfig(name="other").hash == HardwareConfig().hash  # the name is a label
    assert HardwareConfig().replace(buffer_bytes=1).hash != HardwareConfig().hash
    import yaml

    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(hw.to_dict()))
    assert load_hardware(path) == hw and load_hardware(str(path)) == hw


def test_isaac_reram_is_the_168_tile_chip_and_the_flat_pool_is_kept() -> None:
    """issue 21: ``isaac_reram`` is ISAAC's 168 tiles (96 crossbars and 64 KiB eDRAM each, on a
    concentrated mesh); ``isaac_reram_flat`` is the one-pool chip it was (the same hash as
    before, so stored results reproduce); ``isaac_168`` is an alias of ``isaac_reram``."""
    many, flat = load_hardware("isaac_reram"), load_hardware("isaac_reram_flat")
    assert (many.cores, many.core_crossbars, many.core_buffer_bytes) == (168, 96, 64 * 1024)
    assert (many.topology, many.concentration, many.mesh_shape) == ("cmesh", 4, (7, 6))
    assert flat.cores == 1 and flat.hash == "f39c14947c3d8b31"  # the hash results carry
    assert many.replace(cores=1, topology="mesh", concentration=1, mesh_width=0).hash == flat.hash
    alias = load_hardware("isaac_168")
    assert alias.hash == many.hash and alias.replace(name="isaac_reram") == many


def test_overrides_and_dram_kinds() -> None:
    hw = load_hardware("isaac_reram_flat", {"buffer_bytes": 4096, "dram_kind": "GDDR5"})
    assert hw.buffer_bytes == 4096 and hw.dram_pj_per_bit == 14.0
    custom = load_hardware(None, {"dram_pj_per_bit": 5.0})
    assert custom.dram_kind == "custom" and custom.dram_pj_per_bit == 5.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"bufer_bytes": 1}, "overrides: unknown key 'bufer_bytes' (did you mean 'buffer_bytes'?)"),
        ({"buffer_bytes": 0}, "overrides: key 'buffer_bytes' = 0 is out of range; allowed 1 .. "
         "1099511627776"),
        ({"adc_bits": 0}, "overrides: key 'adc_bits' = 0 is out of range; allowed 1 .. 32"),
        ({"adc_bits": 3}, "overrides: key 'adc_bits' = 3 has no energy in adc_pj_by_bits; "
         "allowed 4, 5, 6, 7, 8, 9, 10"),
        ({"cell_bits": 4, "weight_bits": 2}, "overrides: key 'cell_bits' = 4 exceeds "
         "weight_bits = 2; allowed 1 .. weight_bits"),
        ({"dac_bits": 9}, "overrides: key 'dac_bits' = 9 exceeds act_bits = 8; "
         "allowed 1 .. act_bits"),
        ({"adc_bits": "8"}, "overrides: key 'adc_bits' must be an int, got str '8'"),
        ({"weights_resident": 1}, "overrides: key 'weights_resident' must be true or false, "
         "got int 1"),
        ({"dram_kind": "HBM"}, "overrides: key 'dram_kind' = 'HBM' is not one of HBM2, GDDR5, "
         "custom (did you mean 'HBM2'?)"),
    ],
)  # fmt: skip
def test_invalid_values_raise_one_clear_error(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_hardware(None, overrides)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_invalid_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("crossbar_rows: 128\ndram_kind: GDDR5\ndram_pj_per_bit: 3.9\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: key 'dram_pj_per_bit' = 3\.9 contradicts "
                       r"dram_kind 'GDDR5' \(14\); set dram_kind: custom"):  # fmt: skip
        load_hardware(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: expected a mapping of hardware keys, got"):
        load_hardware(listing)
    with pytest.raises(ConfigError, match=r"missing\.yaml: hardware file not found"):
        load_hardware(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"hardware preset 'sram_edg' not found \(did you mean "
                       r"'sram_edge'\?\)"):  # fmt: skip
        load_hardware("sram_edg")
    floaty = tmp_path / "f.yaml"
    floaty.write_text("n_crossbars: 12.5\n")
    with pytest.raises(ConfigError, match=r"f\.yaml: key 'n_crossbars' must be an int, got float"):
        load_hardware(floaty)


def test_preset_errors_name_the_preset_file(tmp_path: Path, monkeypatch) -> None:
    """Presets are package data; errors name them by their path inside the package."""
    from fusiontune.sim import hardware

    (tmp_path / "broken.yaml").write_text("adc_bits: 11\n")
    monkeypatch.setattr(hardware, "presets_dir", lambda: tmp_path)
    with pytest.raises(ConfigError) as info:
        load_hardware("broken")
    assert str(info.value) == (
        "fusiontune/presets/hardware/broken.yaml: key 'adc_bits' = 11 has no energy in "
        "adc_pj_by_bits; allowed 4, 5, 6, 7, 8, 9, 10"
    )
