"""Sampler factory: the Optuna sampler for a sampler name of the search space."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError

if TYPE_CHECKING:
    import optuna

NSGA2_POPULATION = 20
"""NSGA-II population: small enough for several generations within a few hundred trials."""


def make_sampler(
    name: str, seed: int | None, parallel: bool = False
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for a name of :data:`fusiontune.search.space.SAMPLERS`.

    Constraints reach every sampler through ``trial.set_constraint`` (Optuna 5).

    ``parallel``: several trials may be in flight at once (the driver asks a new trial while
    others are evaluated). TPE then uses the constant liar (Optuna 5's
    ``TPESampler(constant_liar=True)``: running trials count as bad ones, so the next ask
    moves away from what is already being evaluated); serially it is off, which gives the
    same suggestions without re-reading the study at every ask. NSGA-II draws each child
    from the parents of its generation at random and the local sampler never proposes an
    assignment twice (in flight or finished), so neither needs more; random samplers draw
    independently anyway.
    """
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=parallel)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=NSGA2_POPULATION, seed=seed)
    if name == "bruteforce":
        return _bruteforce_sampler(seed)
    if name in ("local", "local-tpe"):
        from fusiontune.search.samplers import LocalSearchSampler

        knobs = (
            optuna.samplers.TPESampler(seed=seed, constant_liar=parallel)
            if name == "local-tpe"
            else None
        )
        return LocalSearchSampler(seed=seed, independent_sampler=knobs)
    from fusiontune.search.space import SAMPLERS

    raise ConfigError(f"sampler '{name}' is not known; allowed: {', '.join(SAMPLERS)}")


def _bruteforce_class() -> type:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

        class AskTellBruteForce(optuna.samplers.BruteForceSampler):
            """BruteForceSampler for ask/tell: when the grid is exhausted Optuna calls
            ``study.stop()``, which raises outside ``optimize``; record it instead (the trial is
            already stored, Optuna sets its state in a ``finally``)."""

            exhausted = False

            def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
                try:
                    super().after_trial(study, trial, state, values)
                except RuntimeError as exc:
                    if "Study.stop" not in str(exc):
                        raise
                    self.exhausted = True

    return AskTellBruteForce


def _bruteforce_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _bruteforce_class()(seed=seed)
