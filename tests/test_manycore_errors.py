"""A chip the placement model cannot lay out (docs/cores.md "The objects", "Topology and
hops"): one clear error naming the file, the key and what is allowed — from a hardware YAML
(``load_hardware``), from the command line (``simulate --hw``, exit 2, no traceback) and from a
search space's knobs.

Each case starts from the ``isaac_168`` preset (168 cores, 16,128 crossbars, 64 KiB a core,
a cmesh of 4 cores per router on 7 x 6 routers) and breaks one rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fusiontune.cli.main import main
from fusiontune.errors import ConfigError
from fusiontune.sim.hardware import load_hardware, presets_dir

EXIT_USER_ERROR = 2
"""Exit code of a FusiontuneError (cli/main.py)."""

CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("cores-not-dividing-crossbars", {"cores": 160}, "cores",
     "does not divide n_crossbars = 16128"),
    ("cores-not-dividing-buffer", {"buffer_bytes": 168 * 65536 + 1}, "cores",
     "does not divide buffer_bytes = 11010049"),
    ("cores-above-crossbars", {"n_crossbars": 84}, "cores", "does not divide n_crossbars = 84"),
    ("cores-zero", {"cores": 0}, "cores", "allowed 1 .. "),
    ("cores-negative", {"cores": -4}, "cores", "allowed 1 .. "),
    ("cores-not-int", {"cores": 168.5}, "cores", "must be an int"),
    ("topology-unknown", {"topology": "torus"}, "topology", "is not one of mesh, cmesh, bus"),
    ("topology-not-str", {"topology": 3}, "topology", "must be a string"),
    ("concentration-not-dividing-cores", {"concentration": 5}, "concentration",
     "does not divide cores = 168"),
    ("concentration-zero", {"concentration": 0}, "concentration", "allowed 1 .. "),
    ("concentration-on-mesh", {"topology": "mesh"}, "concentration",
     "needs topology 'cmesh'; a 'mesh' has one core per router (allowed concentration 1)"),
    ("width-not-dividing-routers", {"mesh_width": 5}, "mesh_width",
     "does not divide the 42 routers (cores 168 / concentration 4); a cmesh needs width x "
     "height x concentration = cores"),
    ("width-negative", {"mesh_width": -1}, "mesh_width", "allowed 0 .. "),
    ("bus-with-mesh-keys", {"topology": "bus"}, "topology",
     "takes no mesh_width or concentration (got mesh_width 7, concentration 4); allowed "
     "mesh_width 0 and concentration 1"),
]  # fmt: skip
"""(id, changes to isaac_168, key named, what the message must say is allowed)."""

IDS = [c[0] for c in CASES]


def _chip_file(tmp: Path, changes: dict[str, Any]) -> Path:
    data = yaml.safe_load((presets_dir() / "isaac_168.yaml").read_text())
    data.update(changes)
    path = tmp / "chip.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_base_chip_is_valid(tmp_path: Path) -> None:
    """Every case below breaks only its own key: the unchanged file loads."""
    hw = load_hardware(str(_chip_file(tmp_path, {})))
    assert (hw.cores, hw.topology, hw.concentration, hw.mesh_width) == (168, "cmesh", 4, 7)


@pytest.mark.parametrize(("case", "changes", "key", "allowed"), CASES, ids=IDS)
def test_yaml_file_names_file_and_key(
    tmp_path: Path, case: str, changes: dict[str, Any], key: str, allowed: str
) -> None:
    path = _chip_file(tmp_path, changes)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: key '{key}'")) as err:
        load_hardware(str(path))
    assert allowed in str(err.value)


@pytest.mark.parametrize(("case", "changes", "key", "allowed"), CASES, ids=IDS)
def test_cli_prints_one_line_and_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    changes: dict[str, Any],
    key: str,
    allowed: str,
) -> None:
    path = _chip_file(tmp_path, changes)
    code = main(["simulate", "mlp_relu", "--hw", str(path)])
    out, err = capsys.readouterr()
    assert code == EXIT_USER_ERROR, (out, err)
    assert "Traceback" not in err
    line = err.strip()
    assert "\n" not in line
    assert f"{path}: key '{key}'" in line and allowed in line


@pytest.mark.parametrize(
    ("knob", "choices", "key"),
    [("cores", [168, 160], "cores"), ("topology", ["cmesh", "torus"], "topology"),
     ("concentration", [4, 5], "concentration"), ("mesh_width", [7, 5], "mesh_width")],
)  # fmt: skip
def test_space_knob_choice_that_cannot_be_placed(
    tmp_path: Path, knob: str, choices: list[Any], key: str
) -> None:
    """A categorical knob is checked value by value before any trial runs."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space(
        {"hardware": "isaac_168", "trials": 1, "knobs": {knob: {"choices": choices}}}, "s.yaml"
    )
    bad = choices[-1]
    with pytest.raises(ConfigError, match=re.escape(f"knobs.{knob} = {bad!r}: ")) as err:
        search("mlp_relu", out=tmp_path, study="e", backend="serial", space=space)
    assert f"key '{key}' = {bad!r}" in str(err.value)
    assert not (tmp_path / "mlp_relu" / "trials.parquet").exists()


@pytest.mark.parametrize(
    ("knob", "spec", "message"),
    [("cores", {"low": 84, "high": 168}, "knobs.cores = 85 (inside 84 .. 168): key 'cores' = 85 "
      "does not divide n_crossbars = 16128"),
     ("concentration", {"low": 1, "high": 8}, "knobs.concentration = 5 (inside 1 .. 8): key "
      "'concentration' = 5 does not divide cores = 168"),
     ("n_crossbars", {"low": 168, "high": 16128, "log": True}, "knobs.n_crossbars spans 15961 "
      "values; a many-core layout key is valid only where cores divides n_crossbars")],
)  # fmt: skip
def test_space_knob_range_that_cannot_be_placed_inside(
    tmp_path: Path, knob: str, spec: dict[str, Any], message: str
) -> None:
    """A range whose ends are valid but whose inside is not fails before any trial runs, naming
    the space file and the first bad value (not ``overrides:`` in the middle of a search)."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space({"hardware": "isaac_168", "trials": 1, "knobs": {knob: spec}}, "s.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"s.yaml: {message}")):
        search("mlp_relu", out=tmp_path, study="e", backend="serial", space=space)
    assert not (tmp_path / "mlp_relu" / "trials.parquet").exists()


def test_space_knob_range_with_a_valid_step_runs(tmp_path: Path) -> None:
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    knobs = {"cores": {"low": 84, "high": 168, "step": 84}}  # 84 and 168 both divide the chip
    space = parse_space(
        {"hardware": "isaac_168", "trials": 2, "sampler": "random", "knobs": knobs}, "s.yaml"
    )
    result = search("mlp_relu", out=tmp_path, study="ok", backend="serial", space=space, seed=1)
    assert set(result.trials["hw.cores"]) <= {84, 168}
