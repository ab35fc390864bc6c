"""Several trials in flight: the samplers do not re-propose what is being evaluated, and the
stored trial numbers stay Optuna's.

The backend here is Ray-like but in-process and deterministic: it keeps ``N`` tasks in flight
and finishes a random one of them at each ``wait`` (out of order, as Ray does).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fusiontune.frontend.loader import load_model
from fusiontune.ir.graph import Graph
from fusiontune.search.backends import Backend, EvalOutcome, EvalTask, evaluate_batch
from fusiontune.search.loop import run_trials
from fusiontune.search.problem import Problem
from fusiontune.search.records import RECORD_ATTR
from fusiontune.search.space import parse_space
from fusiontune.search.storage import open_study, storage_for
from fusiontune.search.store import StudyStore
from fusiontune.sim.hardware import load_hardware

IN_FLIGHT = 4
TRIALS = 60
KNOBS = {  # 24 designs: small enough for TPE to concentrate, and to repeat itself if let
    "adc_bits": {"choices": [6, 7, 8]},
    "dram_kind": {"choices": ["HBM2", "GDDR5"]},
    "buffer_bytes": {"choices": [65536, 262144, 1048576, 4194304]},
}


class OutOfOrderBackend(Backend):
    """Keeps up to ``n`` tasks in flight; each ``wait`` finishes a random one of them."""

    name = "out-of-order"

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.plans_per_task = 1
        self._rng = random.Random(seed)
        self.in_flight: list[list[EvalTask]] = []
        self.most_in_flight = 0
        self._graph: Graph | None = None

    def start(self, graph: Graph) -> None:
        self._graph = graph

    def submit(self, tasks: Sequence[EvalTask]) -> None:
        self.in_flight.append(list(tasks))
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))

    def has_room(self) -> bool:
        return len(self.in_flight) < self.n

    def wait(self) -> list[EvalOutcome]:
        if not self.in_flight:
            return []
        assert self._graph is not None
        batch = self.in_flight.pop(self._rng.randrange(len(self.in_flight)))
        return evaluate_batch(self._graph, batch)

    def close(self) -> None:
        self.in_flight.clear()

    def flying(self, key: Any) -> set[Any]:
        return {key(t) for batch in self.in_flight for t in batch}


def _codesign_problem(sampler: str) -> Problem:
    space = parse_space(
        {
            "hardware": "isaac_reram_flat",
            "objective": "energy",
            "sampler": sampler,
            "trials": TRIALS,
            "knobs": KNOBS,
        },
        source="test",
    )
    return Problem.build(load_model("mlp_relu"), space, load_hardware(space.hardware))


def _run_in_flight(
    tmp_path: Path, problem: Problem, parallel: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[StudyStore, list[bool]]:
    """Run the study with ``IN_FLIGHT`` trials in flight; for each ask, whether its design
    equals one being evaluated at that moment."""
    tmp_path.mkdir()
    backend = OutOfOrderBackend(IN_FLIGHT)
    backend.start(problem.graph)
    repeats: list[bool] = []
    decode = Problem.decode_hardware

    def watched(self: Problem, trial: Any) -> Any:
        hw = decode(self, trial)
        repeats.append(hw.hash in backend.flying(lambda t: t.hw.hash))
        return hw

    monkeypatch.setattr(Problem, "decode_hardware", watched)
    store = open_study("s", storage_for(None, tmp_path), problem, 0, False, parallel=parallel)
    run_trials(store, problem, backend, TRIALS)
    assert backend.most_in_flight == IN_FLIGHT
    return store, repeats


def _assert_numbers_are_optunas(store: StudyStore) -> None:
    """Stored trials carry the mirror's (Optuna's) numbers, parameters and values."""
    memory = {t.number: t for t in store.memory.get_trials()}
    stored = store.persistent.get_trials()
    assert [t.number for t in stored] == sorted(memory)
    for t in stored:
        asked = memory[t.number].params
        assert t.user_attrs[RECORD_ATTR]["params"] == asked  # the record of that very trial
        assert t.params == {k: v for k, v in asked.items() if k.startswith("hw:")}  # knobs
        assert t.values == memory[t.number].values
    assert [r.trial for r in store.stored_records()] == sorted(memory)


def test_tpe_with_trials_in_flight_does_not_repeat_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = _codesign_problem("tpe")
    store, repeats = _run_in_flight(tmp_path / "liar", problem, True, monkeypatch)
    assert store.memory.sampler._constant_liar  # type: ignore[attr-defined]
    assert sum(repeats) <= 3, f"{sum(repeats)} of {len(repeats)} asks repeat a running design"
    _assert_numbers_are_optunas(store)
    store.close()
    # the same study without the liar (the serial setting) asks what is already running
    serial, serial_repeats = _run_in_flight(tmp_path / "serial", problem, False, monkeypatch)
    assert sum(serial_repeats) >= 15 > 3
    serial.close()


@pytest.mark.parametrize("sampler", ["local", "nsga2", "random"])
def test_other_samplers_with_trials_in_flight_propose_distinct_assignments(
    tmp_path: Path, sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plan-level: an ask never repeats the assignment of a running trial (the local sampler
    never proposes one twice; NSGA-II and random draw), and numbers stay Optuna's."""
    space = parse_space({"objective": "traffic", "sampler": sampler, "trials": 40}, "test")
    problem = Problem.build(load_model("resnet18"), space, load_hardware(space.hardware))
    backend = OutOfOrderBackend(IN_FLIGHT)
    backend.start(problem.graph)
    flying: list[dict[str, Any]] = []  # params of the trials asked and not yet told
    repeats = []
    decode = Problem.decode

    def watched(self: Problem, trial: Any) -> Any:
        out = decode(self, trial)
        repeats.append(trial.params in flying)
        flying.append(trial.params)
        return out

    monkeypatch.setattr(Problem, "decode", watched)
    store = open_study("s", storage_for(None, tmp_path), problem, 0, False, parallel=True)
    run_trials(store, problem, backend, 40, on_record=lambda r: flying.remove(r.params))
    assert backend.most_in_flight == IN_FLIGHT
    assert not any(repeats)
    _assert_numbers_are_optunas(store)
    store.close()
