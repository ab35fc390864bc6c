"""The local-search sampler (``sampler: local`` / ``local-tpe``).

Optuna's own sampler conformance suites run first (every value inside its distribution, Python
types, single and multi objective); then behaviour on toy objectives and on small zoo models.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
)

from fusiontune.errors import ConfigError
from fusiontune.search.api import search
from fusiontune.search.sampler_factory import make_sampler
from fusiontune.search.samplers import LocalSearchSampler
from fusiontune.search.space import SAMPLERS, load_space, parse_space

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_BITS = 24
"""Binary parameters of the toy objectives (as many as a small CNN has candidate edges)."""

SMALL_MODELS = ("mlp_relu", "lenet5")
"""Zoo models with an exhaustive baseline."""

LOCAL_BUDGET = 30
"""Trials within which the local sampler must reach the exhaustive optimum (no greedy start)."""


class TestOptunaConformance(
    BasicSamplerTestCase, RelativeSamplerTestCase, MultiObjectiveSamplerTestCase
):
    @pytest.fixture
    def sampler(self) -> Any:
        return lambda: LocalSearchSampler(seed=0)


def _bits(trial: optuna.trial.Trial) -> list[int]:
    return [int(trial.suggest_categorical(f"b{i:02d}", (0, 1))) for i in range(N_BITS)]


def _target_distance(trial: optuna.trial.Trial) -> float:
    """Hamming distance to a fixed target pattern (optimum 0)."""
    return float(sum(b != (i % 3 == 0) for i, b in enumerate(_bits(trial))))


def _params(sampler: optuna.samplers.BaseSampler, n_trials: int) -> list[dict[str, Any]]:
    study = optuna.create_study(sampler=sampler)
    study.optimize(_target_distance, n_trials=n_trials)
    return [t.params for t in study.trials]


def test_same_seed_same_trials_other_seed_other_trials() -> None:
    a = _params(LocalSearchSampler(seed=3), 60)
    assert a == _params(LocalSearchSampler(seed=3), 60)
    assert a != _params(LocalSearchSampler(seed=4), 60)


def test_descends_to_the_optimum_of_a_separable_objective() -> None:
    # first trial random (~N_BITS/2 wrong), then single changes: N_BITS proposals per sweep
    study = optuna.create_study(sampler=LocalSearchSampler(seed=0))
    study.optimize(_target_distance, n_trials=3 * N_BITS)
    assert study.best_value == 0.0
    keys = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(set(keys)) == len(keys)  # never proposes an assignment twice


def test_translates_an_improving_move_to_sibling_blocks() -> None:
    # 8 blocks of 3 bits; the objective only improves when a block's two bits change together
    n_blocks = 8

    def objective(trial: optuna.trial.Trial) -> float:
        cost = 0.0
        for b in range(n_blocks):
            x = trial.suggest_categorical(f"block.{b}.x", (0, 1))
            y = trial.suggest_categorical(f"block.{b}.y", (0, 1))
            trial.suggest_categorical(f"block.{b}.z", (0, 1))
            cost += 0.0 if (x, y) == (1, 1) else 1.0 + 0.5 * (x + y)  # single changes hurt
        return cost

    study = optuna.create_study(sampler=LocalSearchSampler(seed=0))
    study.enqueue_trial({f"block.{b}.{v}": 0 for b in range(n_blocks) for v in "xyz"})
    study.optimize(objective, n_trials=120)
    assert study.best_value == 0.0


def test_sets_a_parameter_in_every_block_at_once() -> None:
    # fusing one block alone costs a little; fusing the edge in all 8 blocks pays off
    n_blocks = 8

    def objective(trial: optuna.trial.Trial) -> float:
        fused = [
            trial.suggest_categorical(f"fuse:b.{b}.conv->b.{b}.relu", (0, 1))
            for b in range(n_blocks)
        ]
        others = [
            trial.suggest_categorical(f"fuse:b.{b}.relu->b.{b + 1}.conv", (0, 1))
            for b in range(n_blocks)
        ]
        return 0.1 * sum(fused) + 0.1 * sum(others) - (10.0 if all(fused) else 0.0)

    study = optuna.create_study(sampler=LocalSearchSampler(seed=0))
    study.enqueue_trial({p: 0 for p in _block_params(n_blocks)})
    study.optimize(objective, n_trials=4)  # the start, then sibling moves come first
    assert study.best_value == pytest.approx(-10.0 + 0.1 * n_blocks)


def _block_params(n_blocks: int) -> list[str]:
    return [f"fuse:b.{b}.conv->b.{b}.relu" for b in range(n_blocks)] + [
        f"fuse:b.{b}.relu->b.{b + 1}.conv" for b in range(n_blocks)
    ]


def test_values_stay_inside_mixed_distributions() -> None:
    dists = {
        "cat": CategoricalDistribution(("a", "b", "c")),
        "flag": CategoricalDistribution((True, False)),
        "n": IntDistribution(2, 64, log=True),
        "step": IntDistribution(0, 12, step=3),
        "x": FloatDistribution(1e-3, 1.0, log=True),
        "q": FloatDistribution(-1.0, 1.0, step=0.25),
    }

    def objective(trial: optuna.trial.Trial) -> float:
        p = {name: trial._suggest(name, d) for name, d in dists.items()}
        return math.log(p["n"]) * p["x"] + p["q"] ** 2 + (p["cat"] != "b") + p["flag"]

    study = optuna.create_study(sampler=LocalSearchSampler(seed=1))
    study.optimize(objective, n_trials=80)
    for t in study.trials:
        for name, d in dists.items():
            assert d._contains(d.to_internal_repr(t.params[name])), (name, t.params[name])
    assert len({t.params["n"] for t in study.trials}) > 10  # numeric knobs keep moving


def test_infeasible_trials_never_become_the_incumbent() -> None:
    # more ones is better, but more than 4 ones is infeasible
    sampler = LocalSearchSampler(seed=2)
    bases: list[tuple[float, float]] = []

    def objective(trial: optuna.trial.Trial) -> float:
        bits = _bits(trial)
        trial.set_constraint("ones", float(sum(bits) - 4))
        bases.append(sampler._origin[trial.number][0] if trial.number in sampler._origin else ())
        return -float(sum(bits))

    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({f"b{i:02d}": 0 for i in range(N_BITS)})  # feasible start
    study.optimize(objective, n_trials=80)
    feasible = [t for t in study.trials if all(v <= 0 for v in t.constraints.values())]
    assert min(t.value for t in feasible) == -4.0  # type: ignore[type-var]
    assert any(t.value < -4.0 for t in study.trials)  # type: ignore[operator]
    # every proposal after the first started from a feasible trial (violation 0)
    assert len(bases) == 80 and all(b[0] == 0.0 for b in bases[1:])


def test_least_violating_trial_leads_while_none_is_feasible() -> None:
    def objective(trial: optuna.trial.Trial) -> float:
        bits = _bits(trial)
        trial.set_constraint("ones", float(N_BITS // 2 - sum(bits)))  # feasible: half ones
        return float(sum(bits))

    study = optuna.create_study(sampler=LocalSearchSampler(seed=0))
    study.enqueue_trial({f"b{i:02d}": 0 for i in range(N_BITS)})  # violation N_BITS / 2
    study.optimize(objective, n_trials=4 * N_BITS)
    best = min(t.value for t in study.trials if all(v <= 0 for v in t.constraints.values()))
    assert best == N_BITS // 2


def test_registered_in_the_space_and_the_driver() -> None:
    assert {"local", "local-tpe"} <= set(SAMPLERS)
    assert parse_space({"sampler": "local-tpe"}).sampler == "local-tpe"
    # the default (measured better than tpe in results/bench_search.json), file and embedded
    shipped = Path(__file__).resolve().parents[1] / "fusiontune/presets/spaces/default.yaml"
    assert load_space(None).sampler == load_space(shipped).sampler == parse_space({}).sampler
    assert parse_space({}).sampler == "local"
    plain, hybrid = make_sampler("local", 0), make_sampler("local-tpe", 0)
    assert isinstance(plain, LocalSearchSampler) and isinstance(hybrid, LocalSearchSampler)
    assert isinstance(plain._independent, optuna.samplers.RandomSampler)
    assert isinstance(hybrid._independent, optuna.samplers.TPESampler)
    with pytest.raises(ConfigError, match=r"sampler 'loca' is not known; allowed: .*local"):
        make_sampler("loca", 0)
    with pytest.raises(ConfigError, match="did you mean 'local'"):
        parse_space({"sampler": "locale"}, source="<test>")


@pytest.mark.parametrize("model", SMALL_MODELS)
def test_reaches_the_exhaustive_optimum_on_small_models(tmp_path: Path, model: str) -> None:
    result = search(
        model,
        trials=LOCAL_BUDGET,
        sampler="local",
        seed=0,
        backend="serial",
        out=tmp_path,
        start_from_greedy=False,
    )
    base = result.trials.set_index("source")
    assert float(base.loc["exhaustive", "value_0"]) == float(base.loc["oracle", "value_0"])
    assert result.best_over_optimum == 1.0
    assert result.summary["sampler"] == "local"


@pytest.mark.parametrize("sampler", ["local", "local-tpe"])
def test_co_searches_hardware_knobs_under_a_cap(tmp_path: Path, sampler: str) -> None:
    space = parse_space(
        {
            "hardware": "isaac_reram_flat",  # one pool: any buffer size is a chip
            "objective": "energy",
            "knobs": {
                "buffer_bytes": {"low": 4096, "high": 11010048, "log": True},
                "adc_bits": {"choices": [6, 7, 8]},
            },
            "constraints": {"cycles": {"max": 1.0e12}},
            "trials": 40,
        },
        source="<test>",
    )
    a = search("lenet5", space=space, sampler=sampler, seed=5, backend="serial", out=tmp_path / "a")
    b = search("lenet5", space=space, sampler=sampler, seed=5, backend="serial", out=tmp_path / "b")
    rows = a.trials[a.trials["source"] == "search"]
    assert len(rows) == 40 and set(rows["state"]) == {"COMPLETE"}
    assert rows["hw.buffer_bytes"].between(4096, 11010048).all()
    assert set(rows["hw.adc_bits"]) <= {6, 7, 8} and rows["hw.buffer_bytes"].nunique() > 5
    assert list(rows["plan_hash"]) == list(b.trials[b.trials["source"] == "search"]["plan_hash"])
    assert a.best_plan == b.best_plan
