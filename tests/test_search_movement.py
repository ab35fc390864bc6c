"""The ``movement`` objective: DRAM bytes plus NoC byte-hops at their energy ratio.

``mlp_relu`` (74 crossbars) on ISAAC's 168 tiles cut to 8 crossbars a tile, so every plan spans
ten cores on three routers and moves bytes over the network. The serial backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fusiontune.errors import ConfigError
from fusiontune.search.api import search
from fusiontune.search.space import ADDITIVE_OBJECTIVES, OBJECTIVE_METRICS, parse_space
from fusiontune.sim.hardware import presets_dir

CROSSBARS_PER_CORE = 8
"""mlp_relu's 74 crossbars then fill 10 cores (3 routers of 4): byte-hops > 0."""


def _chip(tmp: Path) -> Path:
    data = yaml.safe_load((presets_dir() / "isaac_168.yaml").read_text())
    data.update(name="isaac_168_small", n_crossbars=168 * CROSSBARS_PER_CORE)
    path = tmp / "chip.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_movement_space_is_accepted_and_not_additive() -> None:
    space = parse_space({"objective": "movement"}, "<t>")
    assert space.objective == "movement" and space.n_objectives == 1
    assert OBJECTIVE_METRICS["movement"] == ("movement_bytes",)
    assert "movement" not in ADDITIVE_OBJECTIVES  # no exact solver claims it
    with pytest.raises(ConfigError, match=r"objective 'movment'.*did you mean 'movement'"):
        parse_space({"objective": "movment"}, "<t>")


def test_movement_search_minimises_movement_bytes(tmp_path: Path) -> None:
    space = parse_space(
        {"hardware": str(_chip(tmp_path)), "objective": "movement", "sampler": "random",
         "trials": 4},
        "<t>",
    )  # fmt: skip
    result = search("mlp_relu", out=tmp_path / "out", study="mv", seed=3, backend="serial",
                    space=space)  # fmt: skip
    rows = result.trials[result.trials["state"] == "COMPLETE"]
    assert (rows["noc_byte_hops"] > 0).all()
    assert (rows["movement_bytes"] > rows["traffic_bytes"]).all()
    assert list(rows["value_0"]) == pytest.approx(list(rows["movement_bytes"]))
    search_rows = rows[rows["source"] == "search"]
    assert len(search_rows) == 4
    best = result.summary["best"]
    assert best["values"] == [pytest.approx(search_rows["movement_bytes"].min())]
    assert result.summary["objective"] == "movement"
