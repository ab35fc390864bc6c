"""Search-space YAML: the embedded default, the shipped files, and precise validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusiontune.errors import ConfigError
from fusiontune.search.space import (
    DEFAULT_SPACE_YAML,
    DEFAULT_TRIALS,
    Constraint,
    Knob,
    load_space,
    parse_space,
    with_overrides,
)

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"


PACKAGED = Path(__file__).resolve().parents[1] / "fusiontune" / "presets" / "spaces"


def test_a_space_without_hardware_takes_the_default_chip(tmp_path: Path) -> None:
    left_out, flat = tmp_path / "left_out.yaml", tmp_path / "null.yaml"
    left_out.write_text("sampler: random\n")
    flat.write_text("hardware: null\n")
    assert load_space(left_out).hardware == load_space().hardware == "isaac_reram"
    assert load_space(flat).hardware is None  # the simulator's default, isaac_reram_flat


def test_default_space_is_package_data() -> None:
    space = load_space()
    assert (space.objective, space.sampler, space.trials) == ("traffic", "local", DEFAULT_TRIALS)
    assert space.knobs == () and space.constraints == () and space.hardware == "isaac_reram"
    assert (PACKAGED / "default.yaml").read_text() == DEFAULT_SPACE_YAML
    shipped = load_space(PACKAGED / "default.yaml")
    assert shipped.to_dict() == space.to_dict()


def test_every_example_space_loads_and_none_copies_a_packaged_one() -> None:
    files = sorted(SPACES.glob("*.yaml"))
    assert {p.name for p in files} >= {"codesign.yaml", "codesign_multi.yaml", "multi.yaml"}
    for path in files:
        load_space(path)
    packaged = {p.name for p in PACKAGED.glob("*.yaml")}
    assert packaged == {"default.yaml"}
    assert not packaged & {p.name for p in files}, "one copy of each space (package data)"
    assert not (SPACES / "hardware").exists(), "hardware presets live in fusiontune/presets"


def test_knob_kinds_and_constraints() -> None:
    space = parse_space(
        {
            "knobs": {
                "buffer_bytes": {"low": 1024, "high": 65536, "log": True},
                "dac_pj_per_drive": {"low": 0.1, "high": 0.5},
                "adc_bits": {"choices": [6, 8]},
            },
            "constraints": {"energy_pj": {"max": 1e9}},
            "objective": "multi",
        }
    )
    assert space.knobs == (
        Knob("buffer_bytes", "int", 1024.0, 65536.0, None, True),
        Knob("dac_pj_per_drive", "float", 0.1, 0.5, None, False),
        Knob("adc_bits", "categorical", choices=(6, 8)),
    )
    assert space.constraints == (Constraint("energy_pj", 1e9),)
    assert space.n_objectives == 3
    assert parse_space(space.to_dict()).to_dict() == space.to_dict()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"objectve": "traffic"}, "unknown key 'objectve' (did you mean 'objective'?)"),
        ({"objective": "trafic"}, "objective 'trafic' is not allowed (did you mean 'traffic'?)"),
        ({"sampler": "cmaes"}, "allowed: tpe, random, nsga2, bruteforce"),
        ({"trials": 0}, "trials must be a positive integer, got 0"),
        ({"trials": "many"}, "trials must be a positive integer"),
        ({"knobs": {"buffer_bytes": {"low": 10}}}, "knobs.buffer_bytes needs 'choices' or both"),
        ({"knobs": {"buffer_bytes": {"low": 9, "high": 3}}}, "low (9) must not exceed high (3)"),
        (
            {"knobs": {"buffer_bytes": {"low": 0, "high": 3, "log": True}}},
            "log scale needs low > 0",
        ),
        ({"knobs": {"adc_bits": {"choices": []}}}, "knobs.adc_bits.choices must be a non-empty"),
        (
            {"knobs": {"adc_bits": {"choice": [1]}}},
            "unknown key 'choice' (did you mean 'choices'?)",
        ),
        (
            {"knobs": {"buffer_byte": {"low": 1, "high": 2}}},
            "knobs.buffer_byte is not a hardware field",
        ),
        ({"constraints": {"energy_pj": 5}}, "constraints.energy_pj must be {max: <number>}"),
        (["traffic"], "expected a mapping"),
    ],
)
def test_validation_errors_name_file_key_and_allowed(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_space(data, source="spaces/x.yaml")
    assert str(info.value).startswith("spaces/x.yaml")
    assert message in str(info.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="search space file not found"):
        load_space(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("objective: [traffic\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML at line 2"):
        load_space(bad)


def test_overrides_are_validated() -> None:
    space = with_overrides(load_space(), objective="energy", sampler="random", trials=7)
    assert (space.objective, space.sampler, space.trials) == ("energy", "random", 7)
    with pytest.raises(ConfigError, match="--objective: objective 'speed' is not allowed"):
        with_overrides(load_space(), objective="speed")


def test_knob_values_the_hardware_refuses_fail_before_the_search(tmp_path: Path) -> None:
    from fusiontune.search.api import search

    space = parse_space({"knobs": {"adc_bits": {"choices": [3, 8]}}}, source="spaces/adc.yaml")
    with pytest.raises(ConfigError, match=r"^spaces/adc.yaml: knobs.adc_bits = 3: .*adc_bits"):
        search("mlp_relu", space=space, out=tmp_path)
    assert not (tmp_path / "mlp_relu" / "study.db").exists()


def test_bruteforce_refuses_a_huge_grid(tmp_path: Path) -> None:
    from fusiontune.search.api import search

    points = 2**76  # resnet18 has 76 candidate fusion edges
    with pytest.raises(ConfigError, match=f"^<default>: sampler bruteforce would walk {points} "):
        search("resnet18", sampler="bruteforce", out=tmp_path)
