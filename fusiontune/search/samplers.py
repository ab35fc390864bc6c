"""A local-search sampler for fusion plans (``sampler: local``).

A fusion plan is one categorical fuse/no-fuse choice per candidate edge, often more than a
hundred of them; a good plan differs from a better one in a few nearby edges. TPE models each
parameter independently and barely moves from the warm start on such spaces. This sampler
walks from the incumbent (the best feasible trial so far) through its neighbourhood, most
promising moves first, and takes the first improvement:

1. *translations* of moves that improved before: DNNs repeat blocks, so a move that helped
   ``features.5`` is tried on ``features.6``, ``features.4``, ... (numbers in the parameter
   names shifted; numbers glued to letters, as in ``relu6``, are kept);
2. *sibling* moves: one value for every parameter with the same name up to its numbers (fuse,
   or cut, the same edge in every block at once);
3. every single change, changes of the incumbent's rarest values first (cheap to sweep: in a
   greedy plan, the few unfused edges);
4. pairs of changes at most ``WINDOW`` apart in the parameter order (edges are listed in
   topological order, so these are nearby edges: move a group boundary = cut one edge and
   fuse another);
5. once the neighbourhood is exhausted, ``1 + Poisson(rate)`` random changes in a window,
   ``rate`` doubling every ``patience`` proposals; after ``restart_after`` trials without
   improvement the walk starts from a uniform crossover of the best and another elite trial.

An assignment already proposed is not proposed again. Infeasible trials (a constraint set by
``trial.set_constraint`` > 0) become the incumbent only while no trial is feasible (then the
least violating one). With several objectives the first one ranks the trials. Numeric
parameters (hardware knobs) go to the independent sampler: random by default, TPE in the hybrid
``local-tpe``. Deterministic for a fixed seed and order of results (the serial backend).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

if TYPE_CHECKING:
    from optuna.study import Study

Params = dict[str, Any]
Move = tuple[tuple[str, Any], ...]

WINDOW = 16
"""Largest distance, in parameter order, between the two changes of a pair (about two
inverted-residual blocks of MobileNetV2; pairs cost ``n * WINDOW`` trials to sweep)."""

MAX_SHIFT = 24
"""Largest shift of the block numbers when translating an improving move."""

N_TEMPLATES = 8
"""Most recent improving moves that are translated."""

BASE_RATE = 0.5
"""Poisson rate of extra random changes once the neighbourhood is exhausted."""

PATIENCE = 25
"""Random proposals without improvement after which the rate doubles."""

RESTART_FACTOR = 2
"""Default restart: after this many trials per parameter without improvement."""

N_ELITES = 5
"""Distinct best values among which a restart picks the crossover partner."""

MAX_RETRIES = 20
"""Random draws before a proposal already made is accepted again."""

_NUMBER = re.compile(r"(?<![A-Za-z\d])\d+(?![A-Za-z\d])")
"""A number standing alone in a name (``features.5.add``), not glued to letters (``relu6``)."""


class LocalSearchSampler(optuna.samplers.BaseSampler):
    """Iterated first-improvement local search over categorical parameters (module docstring).

    Args:
        seed: seed of the random generator (and of the default independent sampler).
        independent_sampler: samples numeric parameters, and every parameter before the first
            completed trial; default ``RandomSampler(seed)``.
        patience: random proposals without improvement per doubling of the change rate.
        restart_after: trials without improvement before crossover restarts; default
            ``RESTART_FACTOR`` times the number of categorical parameters.
    """

    def __init__(
        self,
        seed: int | None = None,
        independent_sampler: optuna.samplers.BaseSampler | None = None,
        patience: int = PATIENCE,
        restart_after: int | None = None,
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._independent = independent_sampler or optuna.samplers.RandomSampler(seed=seed)
        self._patience = patience
        self._restart_after = restart_after
        self._proposed: set[Move] = set()
        self._templates: list[Move] = []  # improving moves, newest first
        self._origin: dict[int, tuple[tuple[float, float], Params]] = {}
        self._walk: tuple[int, Iterator[Params]] | None = None  # (incumbent, its neighbours)
        self._looked: set[Move] = set()  # moves that did not improve ("don't look" bits)
        self._position: dict[str, int] = {}
        self._random_proposals = 0
        self._ranking: tuple[int, int, list[FrozenTrial]] | None = None  # (study, n, ranked)

    def _ranked(self, study: Study) -> list[FrozenTrial]:
        """:func:`_ranked`, remembered until another trial completes (an ask ranks twice:
        search space, then sample; a completed trial never changes)."""
        n = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        if self._ranking is None or self._ranking[:2] != (id(study), n):
            self._ranking = (id(study), n, _ranked(study))
        return self._ranking[2]

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._independent.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        ranked = self._ranked(study)
        if not ranked:
            return {}
        return {
            name: dist
            for name, dist in ranked[0].distributions.items()
            if isinstance(dist, CategoricalDistribution) and len(dist.choices) > 1
        }

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> Params:
        ranked = self._ranked(study)
        best = ranked[0] if ranked else None
        names = [] if best is None else _local_names(best, search_space)
        out = {
            n: self._independent.sample_independent(study, trial, n, d)
            for n, d in search_space.items()
            if n not in names
        }
        if best is None or not names:
            return out
        base = {n: best.params[n] for n in names}
        self._position = {n: i for i, n in enumerate(names)}
        if self._walk is None or self._walk[0] != best.number:
            self._walk = (best.number, self._neighbours(base, names, search_space))
            self._random_proposals = 0
            for t in study.get_trials(deepcopy=False):  # enqueued or resumed ones included
                if all(n in t.params for n in names):
                    self._proposed.add(_key({n: t.params[n] for n in names}))
        stall = _stall(study, best)
        restart_after = self._restart_after or RESTART_FACTOR * len(names)
        proposal = next((p for p in self._walk[1] if _key(p) not in self._proposed), None)
        if proposal is None:
            elites = _elites(ranked)
            if stall >= restart_after and len(elites) > 1:
                partner = elites[int(self._rng.integers(1, len(elites)))].params
                base = {
                    n: partner.get(n, v) if self._rng.random() < 0.5 else v for n, v in base.items()
                }
            rate = BASE_RATE * 2.0 ** (self._random_proposals // self._patience)
            self._random_proposals += 1
            for _ in range(MAX_RETRIES):
                proposal = self._mutate(base, names, search_space, min(rate, WINDOW / 2))
                if _key(proposal) not in self._proposed:
                    break
                rate *= 2
        assert proposal is not None
        self._proposed.add(_key(proposal))
        self._origin[trial.number] = (_rank_key(best, _sign(study)), base)
        return {**out, **proposal}

    def _neighbours(
        self, base: Params, names: list[str], space: dict[str, BaseDistribution]
    ) -> Iterator[Params]:
        """Moves around ``base``, most promising first (steps 1-4 of the module docstring)."""

        def others(name: str) -> list[Any]:
            return [c for c in _choices(space[name]) if c != base[name]]

        for move in list(self._templates):
            for shift in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=abs)[1:]:
                moved = {_shifted(n, shift): v for n, v in move}
                if moved.keys() == dict(move).keys():
                    break  # no numbers to shift
                if all(n in base and v in others(n) for n, v in moved.items()):
                    yield {**base, **moved}
        siblings: dict[str, list[str]] = {}
        for name in names:
            siblings.setdefault(_NUMBER.sub("#", name), []).append(name)
        for group in (g for g in siblings.values() if len(g) > 1):
            for choice in _choices(space[group[0]]):
                moved = {n: choice for n in group if choice in others(n)}
                if moved:
                    yield {**base, **moved}
        kinds = [_choices(space[n]) for n in names]
        share, size = Counter(zip(kinds, base.values())), Counter(kinds)
        rarity = [share[k, base[n]] / size[k] for k, n in zip(kinds, names)]  # value's share
        rank = self._rng.permutation(len(names))
        order = sorted(  # singles, then pairs by distance; rarest incumbent values first
            (j != i, rarity[i], abs(j - i), rank[i], i, j)
            for i in range(len(names))
            for j in range(max(0, i - WINDOW), min(len(names), i + WINDOW + 1))
        )
        moves = [
            tuple(sorted({names[i]: a, names[j]: b}.items()))
            for *_, i, j in order
            for a in others(names[i])
            for b in (others(names[j]) if j != i else [a])
        ]
        yield from ({**base, **dict(m)} for m in moves if m not in self._looked)
        yield from ({**base, **dict(m)} for m in moves if m in self._looked)

    def _mutate(
        self, base: Params, names: list[str], space: dict[str, BaseDistribution], rate: float
    ) -> Params:
        """``base`` with ``1 + Poisson(rate)`` random changes inside one window."""
        n_changes = min(len(names), 1 + int(self._rng.poisson(rate)))
        width = min(len(names), max(WINDOW, 2 * n_changes))
        start = int(self._rng.integers(0, len(names) - width + 1))
        out = dict(base)
        for i in self._rng.choice(width, size=n_changes, replace=False) + start:
            name = names[int(i)]
            choices = [c for c in _choices(space[name]) if c != base[name]]
            out[name] = choices[int(self._rng.integers(len(choices)))]
        return out

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._independent.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._independent.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        """Learn from the move the trial made (:meth:`_learn`), then let the independent
        sampler see the trial."""
        origin = self._origin.pop(trial.number, None)
        if origin is not None:
            improved = (
                state == TrialState.COMPLETE
                and values is not None
                and (_violation(trial), _sign(study) * values[0]) < origin[0]
            )
            base = origin[1]
            self._learn(
                tuple(sorted((n, v) for n, v in trial.params.items() if base.get(n, v) != v)),
                improved,
            )
        self._independent.after_trial(study, trial, state, values)

    def _learn(self, move: Move, improved: bool) -> None:
        """An improving move is kept to be translated and wakes up the moves near it; any
        other move is marked looked-at (tried last from now on: "don't look" bits)."""
        if not improved:
            self._looked.add(move)
            return
        if move and move not in self._templates:
            self._templates = [move, *self._templates][:N_TEMPLATES]
        changed = [self._position[n] for n, _ in move if n in self._position]
        near = {n for n, i in self._position.items() if any(abs(i - c) <= WINDOW for c in changed)}
        self._looked = {m for m in self._looked if not any(n in near for n, _ in m)}


def _local_names(best: FrozenTrial, space: dict[str, BaseDistribution]) -> list[str]:
    """The parameters searched locally: categorical ones of the incumbent with a choice left
    (its value still allowed), in the incumbent's order (edges in topological order)."""
    return [
        name
        for name, value in best.params.items()
        if isinstance(dist := space.get(name), CategoricalDistribution)
        and len(dist.choices) > 1
        and value in dist.choices
    ]


def _violation(trial: FrozenTrial) -> float:
    """Total constraint violation (0 when feasible)."""
    return float(sum(max(0.0, v) for v in trial.constraints.values()))


def _sign(study: Study) -> float:
    """+1 when the (first) objective is minimised, -1 when maximised."""
    return 1.0 if study.directions[0] == optuna.study.StudyDirection.MINIMIZE else -1.0


def _rank_key(trial: FrozenTrial, sign: float) -> tuple[float, float]:
    """Sort key of a completed trial: violation, then the signed first objective."""
    return (_violation(trial), sign * trial.values[0])


def _ranked(study: Study) -> list[FrozenTrial]:
    """Completed trials, best first (by :func:`_rank_key`), oldest first among ties."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    sign = _sign(study)
    return sorted(trials, key=lambda t: (*_rank_key(t, sign), t.number))


def _elites(ranked: list[FrozenTrial]) -> list[FrozenTrial]:
    """The first trial of each of the ``N_ELITES`` best distinct (violation, value) keys."""
    out: dict[tuple[float, float], FrozenTrial] = {}
    for t in ranked:
        out.setdefault(_rank_key(t, 1.0), t)
        if len(out) == N_ELITES:
            break
    return list(out.values())


def _stall(study: Study, best: FrozenTrial) -> int:
    """Completed trials since ``best`` (the first trial as good as the best)."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sum(1 for t in trials if t.number > best.number)


def _choices(dist: BaseDistribution) -> tuple[Any, ...]:
    """The choices of a distribution of the relative space (categorical only, as
    ``infer_relative_search_space`` builds it)."""
    if not isinstance(dist, CategoricalDistribution):
        raise TypeError(f"expected a categorical distribution, got {dist!r}")
    return tuple(dist.choices)


def _key(params: Params) -> Move:
    return tuple(sorted(params.items()))


def _shifted(name: str, shift: int) -> str:
    """``name`` with every stand-alone number increased by ``shift``."""
    return _NUMBER.sub(lambda m: str(int(m.group()) + shift), name)
