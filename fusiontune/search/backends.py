"""Evaluation backends: where plans are simulated (DESIGN §8).

A backend takes batches of :class:`EvalTask` and hands back :class:`EvalOutcome` objects as
batches finish. Two implement the same small interface:

- :class:`SerialBackend` evaluates in-process, one batch at a time (tests, ``--workers 1``).
- :class:`RayBackend` ships the graph once with ``ray.put``, runs several plans per Ray task,
  keeps ``2 x workers`` batches in flight and streams results with ``ray.wait``. A task that
  dies turns into failed outcomes for its plans; the search goes on.

The driver calls :meth:`Backend.submit` while :meth:`Backend.has_room` and then
:meth:`Backend.wait` for at least one finished batch.
"""

from __future__ import annotations

import os
import socket
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.hardware import HardwareConfig

BATCHES_PER_WORKER = 2
"""Batches kept in flight per worker (DESIGN §8: 2x workers' batches) so no worker idles."""

DEFAULT_PLANS_PER_TASK = 4
"""Plans evaluated per Ray task: amortises the ~1 ms task overhead over several simulations."""


@dataclass(frozen=True)
class EvalTask:
    """One plan to simulate on one hardware configuration.

    Attributes:
        trial: Optuna trial number (``-1`` for baselines).
        plan: the repaired, legal plan.
        hw: hardware configuration.
    """

    trial: int
    plan: Plan
    hw: HardwareConfig


@dataclass(frozen=True)
class EvalOutcome:
    """Result of one :class:`EvalTask`.

    Attributes:
        trial: trial number of the task.
        metrics: scalar fields of ``Metrics.as_dict()`` (empty when failed).
        feasible: the plan fits the hardware.
        violations: human-readable capacity violations.
        groups: one dict per group: scalar fields of ``GroupMetrics.as_dict()``.
        eval_s: wall seconds spent simulating.
        worker: ``host:pid`` of the process that simulated it.
        error: why the evaluation failed (empty when it succeeded).
    """

    trial: int
    metrics: dict[str, float] = field(default_factory=dict)
    feasible: bool = False
    violations: tuple[str, ...] = ()
    groups: tuple[dict[str, Any], ...] = ()
    eval_s: float = 0.0
    worker: str = ""
    error: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error)


def _scalars(data: dict[str, Any]) -> dict[str, Any]:
    """Keep the scalar (number, bool, string) entries of an ``as_dict()``."""
    return {
        k: (v.item() if hasattr(v, "item") else v)
        for k, v in data.items()
        if isinstance(v, (int, float, bool, str)) or hasattr(v, "item")
    }


def evaluate_one(graph: Graph, task: EvalTask) -> EvalOutcome:
    """Simulate one plan (the fast analytic path) and package the numbers."""
    from fusiontune.sim.cost import simulate

    start = time.perf_counter()
    metrics = simulate(graph, task.plan, task.hw)
    data = _scalars(metrics.as_dict())
    groups = tuple(_scalars(g.as_dict()) for g in metrics.groups)
    return EvalOutcome(
        trial=task.trial,
        metrics=data,
        feasible=bool(metrics.feasible),
        violations=tuple(str(v) for v in metrics.violations),
        groups=groups,
        eval_s=time.perf_counter() - start,
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )


def evaluate_batch(graph: Graph, tasks: Sequence[EvalTask]) -> list[EvalOutcome]:
    """Simulate several plans; one failing plan fails only itself."""
    out = []
    for task in tasks:
        try:
            out.append(evaluate_one(graph, task))
        except Exception as exc:  # a simulator bug on one plan must not stop the search
            out.append(EvalOutcome(task.trial, error=f"{type(exc).__name__}: {exc}"))
    return out


class Backend(ABC):
    """Where batches of plans are simulated.

    Lifecycle: :meth:`start` once with the graph, then any number of :meth:`submit` (while
    :meth:`has_room`) and :meth:`wait` calls, then :meth:`close`.
    """

    name: str = "backend"
    plans_per_task: int = 1

    @abstractmethod
    def start(self, graph: Graph) -> None:
        """Called once before the first batch: make the graph available to evaluators."""

    @abstractmethod
    def submit(self, tasks: Sequence[EvalTask]) -> None:
        """Queue one batch of tasks."""

    @abstractmethod
    def has_room(self) -> bool:
        """Whether another batch may be submitted now."""

    @abstractmethod
    def wait(self) -> list[EvalOutcome]:
        """Block until at least one batch has finished and return its outcomes (in-flight
        batches only; empty when nothing is in flight)."""

    @abstractmethod
    def close(self) -> None:
        """Release resources (called once, also after errors)."""


class SerialBackend(Backend):
    """In-process evaluation, one batch in flight: deterministic for a fixed seed."""

    name = "serial"

    def __init__(self, plans_per_task: int = 1) -> None:
        self.plans_per_task = plans_per_task
        self._graph: Graph | None = None
        self._queue: deque[list[EvalTask]] = deque()

    def start(self, graph: Graph) -> None:
        self._graph = graph

    def submit(self, tasks: Sequence[EvalTask]) -> None:
        self._queue.append(list(tasks))

    def has_room(self) -> bool:
        return not self._queue

    def wait(self) -> list[EvalOutcome]:
        if not self._queue:
            return []
        assert self._graph is not None, "start() not called"
        return evaluate_batch(self._graph, self._queue.popleft())

    def close(self) -> None:
        self._queue.clear()


_WORKER_GRAPHS: dict[str, Graph] = {}
"""Graphs already fetched by this Ray worker process, by object id (at most one kept)."""


def _remote_evaluate(graph_box: list[Any], tasks: list[EvalTask]) -> list[EvalOutcome]:
    """Ray task body. The graph reference comes boxed in a list so Ray does not resolve it
    for every task: each worker process fetches and deserialises the graph once, which
    also keeps its group-cost cache (keyed by the graph) warm across tasks."""
    import ray

    ref = graph_box[0]
    key = ref.hex()
    graph = _WORKER_GRAPHS.get(key)
    if graph is None:
        _WORKER_GRAPHS.clear()
        graph = _WORKER_GRAPHS[key] = ray.get(ref)
    return evaluate_batch(graph, tasks)


class RayBackend(Backend):
    """Ray tasks, ``plans_per_task`` plans each, ``2 x workers`` batches in flight.

    Args:
        workers: CPUs of the local Ray started here (ignored with ``address``).
        address: join an existing Ray cluster (``"auto"`` or ``host:port``).
        plans_per_task: plans simulated per Ray task.
    """

    name = "ray"

    def __init__(
        self,
        workers: int = 2,
        address: str | None = None,
        plans_per_task: int = DEFAULT_PLANS_PER_TASK,
    ) -> None:
        self.workers = max(1, workers)
        self.address = address
        self.plans_per_task = plans_per_task
        self._started_ray = False
        self._graph_ref: Any = None
        self._remote: Any = None
        self._in_flight: dict[Any, list[EvalTask]] = {}

    def start(self, graph: Graph) -> None:
        import ray

        if not ray.is_initialized():
            self._started_ray = True
            if self.address:
                try:
                    ray.init(address=self.address, runtime_env=_runtime_env(), log_to_driver=False)
                except ConnectionError as exc:
                    from fusiontune.errors import ConfigError

                    raise ConfigError(
                        f"--address {self.address}: cannot join a Ray cluster there ({exc}); "
                        "give the address `ray start --head` printed, or 'auto'"
                    ) from exc
            else:
                ray.init(
                    address="local",  # a new local instance, never a stale default cluster
                    num_cpus=self.workers,
                    include_dashboard=False,
                    runtime_env=_runtime_env(),
                    log_to_driver=False,
                )
        if self.address:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", self.workers)))
        self._graph_ref = ray.put(graph)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_remote_evaluate)

    def submit(self, tasks: Sequence[EvalTask]) -> None:
        ref = self._remote.remote([self._graph_ref], list(tasks))
        self._in_flight[ref] = list(tasks)

    def has_room(self) -> bool:
        return len(self._in_flight) < BATCHES_PER_WORKER * self.workers

    def wait(self) -> list[EvalOutcome]:
        import ray

        if not self._in_flight:
            return []
        ready, _ = ray.wait(list(self._in_flight), num_returns=1)
        outcomes: list[EvalOutcome] = []
        for ref in ready:
            tasks = self._in_flight.pop(ref)
            try:
                outcomes.extend(ray.get(ref))
            except Exception as exc:  # worker died or task raised: fail its plans, go on
                reason = f"ray task failed: {type(exc).__name__}"
                outcomes.extend(EvalOutcome(t.trial, error=reason) for t in tasks)
        return outcomes

    def close(self) -> None:
        import ray

        for ref in list(self._in_flight):
            ray.cancel(ref, force=True)
        self._in_flight.clear()
        if self._started_ray and ray.is_initialized():
            ray.shutdown()


def _runtime_env() -> dict[str, Any]:
    """Let local Ray workers import this copy of fusiontune even when it is not installed."""
    import fusiontune

    root = os.path.dirname(os.path.dirname(os.path.abspath(fusiontune.__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def make_backend(
    name: str, workers: int = 1, address: str | None = None, plans_per_task: int | None = None
) -> Backend:
    """Build a backend by name (``ray`` or ``serial``)."""
    from fusiontune.errors import ConfigError, closest

    if name == "serial":
        return SerialBackend(plans_per_task or 1)
    if name == "ray":
        return RayBackend(workers, address, plans_per_task or DEFAULT_PLANS_PER_TASK)
    raise ConfigError(
        f"--backend '{name}' is not known{closest(name, ('ray', 'serial'))}; allowed: ray, serial"
    )
