"""Evaluation backends: where plans are simulated (DESIGN §8).

A backend takes batches of :class:`EvalTask` and hands back :class:`EvalOutcome` objects as
batches finish. A task either names its plan (plan-level search) or asks the worker to solve
the plan exactly for its hardware (bilevel co-design: ``solve``), in which case the outcome
carries the plan and its certificate. Two implement the same small interface:

- :class:`SerialBackend` evaluates in-process, one batch at a time (tests, ``--workers 1``).
- :class:`RayBackend` ships the graph once with ``ray.put``, warms every worker slot (graph
  fetched, solver imported) while the driver opens its study, runs several plans per Ray task,
  keeps ``2 x workers`` batches in flight and streams results with ``ray.wait`` (the driver
  sleeps there, leaving the cores to the workers). A task that dies turns into failed
  outcomes for its plans; the search goes on.

The driver calls :meth:`Backend.submit` while :meth:`Backend.has_room` and then
:meth:`Backend.wait` for at least one finished batch.

Faults (issue 7): an evaluation that raises fails only its own plan (the message is kept);
an evaluation longer than ``eval_timeout_s`` fails as timed out (an in-process alarm, and for
Ray also a driver-side deadline that cancels the task); a Ray task whose worker process dies
is retried once plan by plan, so only the plan that kills its worker fails.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan
    from fusiontune.search.problem import SolveSpec
    from fusiontune.sim.hardware import HardwareConfig

BATCHES_PER_WORKER = 2
"""Batches kept in flight per worker (DESIGN §8: 2x workers' batches) so no worker idles."""

DEFAULT_PLANS_PER_TASK = 4
"""Plans evaluated per Ray task: amortises the ~1 ms task overhead over several simulations."""

DEFAULT_EVAL_TIMEOUT_S = 600.0
"""Per-plan evaluation limit: generous, the analytic simulation of the largest zoo model takes
well under a second; only a hung evaluation reaches it."""

RAY_DEADLINE_GRACE_S = 30.0
"""Extra seconds before the driver cancels an overdue Ray task (worker start-up, graph fetch)."""

ADDRESS_PROBE_S = 3.0
"""Seconds to wait for a TCP connection to ``--address`` before calling it unreachable."""

RAY_ERROR_CHARS = 300
"""Characters of a Ray error kept in a failed trial's message (Ray's include tracebacks)."""

MAX_WORKERS_PER_CORE = 4
"""Most local evaluation processes per CPU core: more only adds start-up and memory."""

WORKER_DIED = "worker process died"
"""Error of a plan whose Ray worker died twice (once in its batch, once on its own)."""


@dataclass(frozen=True)
class EvalTask:
    """One plan to simulate on one hardware configuration.

    Attributes:
        trial: Optuna trial number (``-1`` for baselines).
        plan: the repaired, legal plan (``None`` with ``solve``).
        hw: hardware configuration.
        solve: solve the plan exactly for ``hw`` on the worker instead (bilevel co-design).
        replication: replicate the plan's weights by this strategy
            (:data:`fusiontune.sim.replication.STRATEGIES`) before placing and pricing it, and
            record the throughput columns; ``None``: neither.
    """

    trial: int
    plan: Plan | None
    hw: HardwareConfig
    solve: SolveSpec | None = None
    replication: str | None = None


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
        plan: the plan the worker solved (tasks with ``solve``; ``None`` otherwise). When no
            plan fits the hardware (proven) it is the unfused plan, reported infeasible.
        solver: the solver's certificate for that plan (``status``, ``proven``, ``gap``,
            ``value``, ``solve_s``; empty for tasks without ``solve``).
    """

    trial: int
    metrics: dict[str, float] = field(default_factory=dict)
    feasible: bool = False
    violations: tuple[str, ...] = ()
    groups: tuple[dict[str, Any], ...] = ()
    eval_s: float = 0.0
    worker: str = ""
    error: str = ""
    plan: Plan | None = None
    solver: dict[str, Any] = field(default_factory=dict)

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
    """Simulate one plan (the fast analytic path) and package the numbers; with
    ``task.solve``, first solve the plan exactly for the task's hardware; with
    ``task.replication``, replicate its weights, place the copies (a many-core chip) and add
    the throughput columns (``PlanThroughput.as_dict``)."""
    from fusiontune.sim.cost import simulate

    start = time.perf_counter()
    plan = task.plan
    solver: dict[str, Any] = {}
    if task.solve is not None:
        plan, solver = solve_plan(graph, task.hw, task.solve)
    assert plan is not None, "an EvalTask names a plan or asks for one to be solved"
    if task.replication is None:
        metrics = simulate(graph, plan, task.hw)
        data = _scalars(metrics.as_dict())
    else:
        from fusiontune.sim.replication import simulate_replicated

        metrics, throughput = simulate_replicated(graph, plan, task.hw, task.replication)
        data = _scalars(metrics.as_dict()) | throughput.as_dict()
    groups = tuple(_scalars(g.as_dict()) for g in metrics.groups)
    return EvalOutcome(
        trial=task.trial,
        metrics=data,
        feasible=bool(metrics.feasible),
        violations=tuple(str(v) for v in metrics.violations),
        groups=groups,
        eval_s=time.perf_counter() - start,
        worker=_worker_name(),
        plan=plan if task.solve is not None else None,
        solver=solver,
    )


def solve_plan(graph: Graph, hw: HardwareConfig, spec: SolveSpec) -> tuple[Plan, dict[str, Any]]:
    """The exact optimal plan of ``graph`` on ``hw`` and its certificate. When no plan fits
    (proven), the unfused plan stands in: simulated, it reports the violations that make the
    design infeasible (a constraint of the trial, not a failure)."""
    from fusiontune.planner.baselines import unfused_plan
    from fusiontune.search.optimize import optimal_plan

    answer = optimal_plan(graph, hw, spec.objective, config=spec.config)
    solver = {
        "status": answer.status,
        "proven": answer.proven,
        "gap": answer.gap,
        "value": answer.value,
        "solve_s": answer.solve_s,
    }
    return (answer.plan if answer.plan is not None else unfused_plan(graph)), solver


Evaluator = Callable[["Graph", EvalTask], EvalOutcome]
"""Simulates one task (default :func:`evaluate_one`); module-level, so Ray can ship it."""


class EvalTimeoutError(Exception):
    """An evaluation ran past its time limit (raised by the alarm of :func:`_time_limit`)."""


@contextmanager
def _time_limit(timeout_s: float | None) -> Iterator[None]:
    """Raise :class:`EvalTimeoutError` in the block after ``timeout_s`` seconds (SIGALRM; only
    in a process's main thread, elsewhere a no-op: the Ray driver's deadline still applies)."""
    usable = (
        timeout_s is not None
        and timeout_s > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise EvalTimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def evaluate_batch(
    graph: Graph,
    tasks: Sequence[EvalTask],
    evaluate: Evaluator = evaluate_one,
    timeout_s: float | None = None,
) -> list[EvalOutcome]:
    """Simulate several plans; one failing or timed-out plan fails only itself."""
    out = []
    for task in tasks:
        try:
            with _time_limit(timeout_s):
                out.append(evaluate(graph, task))
        except EvalTimeoutError:
            out.append(EvalOutcome(task.trial, error=_timeout_error(timeout_s)))
        except Exception as exc:  # a simulator bug on one plan must not stop the search
            out.append(EvalOutcome(task.trial, error=f"{type(exc).__name__}: {exc}"))
    return out


def _timeout_error(timeout_s: float | None) -> str:
    return f"evaluation timed out after {timeout_s:g} s (--eval-timeout)"


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

    def __init__(
        self,
        plans_per_task: int = 1,
        eval_timeout_s: float | None = DEFAULT_EVAL_TIMEOUT_S,
        evaluate: Evaluator = evaluate_one,
    ) -> None:
        self.plans_per_task = plans_per_task
        self.eval_timeout_s = eval_timeout_s
        self.evaluate = evaluate
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
        return evaluate_batch(
            self._graph, self._queue.popleft(), self.evaluate, self.eval_timeout_s
        )

    def close(self) -> None:
        self._queue.clear()


_WORKER_GRAPHS: dict[str, Graph] = {}
"""Graphs already fetched by this Ray worker process, by object id (at most one kept)."""


def _worker_graph(ref: Any) -> Graph:
    """The graph behind ``ref``, fetched and deserialised once per worker process. Keeping
    the same object also keeps the process's caches keyed by it warm across tasks: replayed
    group peaks (hardware-free), group models, the planner's static tables."""
    import ray

    key = ref.hex()
    graph = _WORKER_GRAPHS.get(key)
    if graph is None:
        _WORKER_GRAPHS.clear()
        graph = _WORKER_GRAPHS[key] = ray.get(ref)
    return graph


def _remote_evaluate(
    graph_box: list[Any],
    tasks: list[EvalTask],
    evaluate: Evaluator = evaluate_one,
    timeout_s: float | None = None,
) -> list[EvalOutcome]:
    """Ray task body. The graph reference comes boxed in a list so Ray does not resolve it
    for every task (:func:`_worker_graph` fetches it once per worker)."""
    return evaluate_batch(_worker_graph(graph_box[0]), tasks, evaluate, timeout_s)


def _remote_warm_up(graph_box: list[Any]) -> dict[str, Any]:
    """Ray task body run once per worker slot by :meth:`RayBackend.start`: fetch the graph,
    import the simulator and the exact optimizer and build the graph's static tables, while
    the driver opens its study; the first trials then find warm workers. Returns where it
    ran and what each step cost (``experiments/exp_scale.py`` reports them)."""
    start = time.perf_counter()
    from fusiontune.search.optimize import optimal_plan  # noqa: F401  (the import is the work)
    from fusiontune.sim.groupmodel import group_model
    from fusiontune.sim.hardware import HardwareConfig

    imported = time.perf_counter()
    graph = _worker_graph(graph_box[0])
    fetched = time.perf_counter()
    group_model(graph, HardwareConfig())  # the hardware-free structure, cached by the graph
    return {
        "worker": _worker_name(),
        "import_s": imported - start,
        "fetch_s": fetched - imported,
        "tables_s": time.perf_counter() - fetched,
    }


def _worker_name() -> str:
    """``host:pid`` of this process (the ``worker`` field of a trial)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class RayBackend(Backend):
    """Ray tasks, ``plans_per_task`` plans each, ``2 x workers`` batches in flight.

    Args:
        workers: CPUs of the local Ray started here (ignored with ``address``).
        address: join an existing Ray cluster (``"auto"`` or ``host:port``); without it Ray
            starts local-only (``address="local"``) with the dashboard off.
        plans_per_task: plans simulated per Ray task.
        eval_timeout_s: per-plan time limit (``None``: none).
        evaluate: the per-plan evaluator (a module-level function).
    """

    name = "ray"

    def __init__(
        self,
        workers: int = 2,
        address: str | None = None,
        plans_per_task: int = DEFAULT_PLANS_PER_TASK,
        eval_timeout_s: float | None = DEFAULT_EVAL_TIMEOUT_S,
        evaluate: Evaluator = evaluate_one,
    ) -> None:
        self.workers = max(1, workers)
        self.address = address
        self.plans_per_task = plans_per_task
        self.eval_timeout_s = eval_timeout_s
        self.evaluate = evaluate
        self._started_ray = False
        self._reaper: Any = None
        self._graph_ref: Any = None
        self._remote: Any = None
        self._in_flight: dict[Any, tuple[list[EvalTask], float]] = {}  # ref -> (tasks, deadline)
        self.warm_ups: list[Any] = []  # refs of the start-up tasks (their reports)
        self._retried: set[int] = set()

    def start(self, graph: Graph) -> None:
        import ray

        if self.address:
            check_ray_address(self.address)
        if not ray.is_initialized():
            self._started_ray = True
            if self.address:
                try:
                    ray.init(address=self.address, runtime_env=_runtime_env(), log_to_driver=False)
                except (ConnectionError, ValueError, RuntimeError) as exc:
                    raise _address_error(self.address, exc) from exc
            else:
                from fusiontune.search.ray_reaper import Reaper

                self._reaper = Reaper()
                self._reaper.start()  # the local Ray dies with this process, however it ends
                ray.init(
                    address="local",  # a new local instance, never a stale default cluster
                    num_cpus=self.workers,
                    include_dashboard=False,
                    runtime_env=_runtime_env(),
                    log_to_driver=False,
                    logging_level=logging.ERROR,  # Ray's start-up chatter would bury the summary
                )
        if self.address:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", self.workers)))
        self._graph_ref = ray.put(graph)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_remote_evaluate)
        # one warm-up per worker slot, not awaited: it overlaps the driver's study set-up
        warm = ray.remote(num_cpus=1, max_retries=0)(_remote_warm_up)
        self.warm_ups = [warm.remote([self._graph_ref]) for _ in range(self.workers)]

    def submit(self, tasks: Sequence[EvalTask]) -> None:
        ref = self._remote.remote(
            [self._graph_ref], list(tasks), self.evaluate, self.eval_timeout_s
        )
        self._in_flight[ref] = (list(tasks), self._deadline(len(tasks)))

    def _deadline(self, n_plans: int) -> float:
        """Monotonic time after which the task is cancelled: its plans' limits, doubled for
        the batch queued ahead of it on the same worker, plus a grace period."""
        if self.eval_timeout_s is None:
            return math.inf
        budget_s = self.eval_timeout_s * n_plans * BATCHES_PER_WORKER + RAY_DEADLINE_GRACE_S
        return time.monotonic() + budget_s

    def has_room(self) -> bool:
        return len(self._in_flight) < BATCHES_PER_WORKER * self.workers

    def wait(self) -> list[EvalOutcome]:
        """Outcomes of at least one finished task (or none when nothing is in flight).

        A task whose worker died is resubmitted plan by plan once; a plan that kills its
        worker again fails. A task past its deadline is cancelled and its plans fail."""
        import ray

        outcomes: list[EvalOutcome] = []
        while self._in_flight and not outcomes:
            soonest = min(deadline for _, deadline in self._in_flight.values())
            timeout = None if math.isinf(soonest) else max(0.0, soonest - time.monotonic())
            ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=timeout)
            for ref in ready:
                tasks, _ = self._in_flight.pop(ref)
                try:
                    outcomes.extend(ray.get(ref))
                except ray.exceptions.RayError as exc:  # worker died or task failed
                    outcomes.extend(self._retry_or_fail(tasks, exc))
            now = time.monotonic()
            for ref, (tasks, deadline) in list(self._in_flight.items()):
                if deadline <= now:
                    del self._in_flight[ref]
                    ray.cancel(ref, force=True)
                    error = _timeout_error(self.eval_timeout_s)
                    outcomes.extend(EvalOutcome(t.trial, error=error) for t in tasks)
        return outcomes

    def _retry_or_fail(self, tasks: list[EvalTask], exc: Exception) -> list[EvalOutcome]:
        import ray

        if not isinstance(exc, ray.exceptions.WorkerCrashedError):
            detail = " ".join(str(exc).split())[:RAY_ERROR_CHARS]
            reason = f"ray task failed: {type(exc).__name__}: {detail}"
            return [EvalOutcome(t.trial, error=reason) for t in tasks]
        failed = []
        for task in tasks:
            if task.trial in self._retried:
                error = f"{WORKER_DIED} (ray task failed: {type(exc).__name__}), twice"
                failed.append(EvalOutcome(task.trial, error=error))
            else:
                self._retried.add(task.trial)
                self.submit([task])
        return failed

    def close(self) -> None:
        """Stop. A Ray connection this backend made (a local Ray, or ``--address``) is shut
        down, and the tasks in flight end with the driver's job; on a Ray the caller started
        they are cancelled. Not cancelled before a shutdown: cancelling a task that is just
        finishing can abort the driver inside Ray (``task_manager.cc``: "Tried to complete
        task that was not pending", a cancel/completion race), which turned Ctrl-C's exit
        130 into an exit 1."""
        import ray

        if not self._started_ray:
            for ref in list(self._in_flight):
                ray.cancel(ref, force=True)
        self._in_flight.clear()
        self.warm_ups.clear()
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        if self._reaper is not None:
            self._reaper.stop()
            self._reaper = None


def check_ray_address(address: str) -> None:
    """Refuse a ``host:port`` Ray address nobody listens on, within :data:`ADDRESS_PROBE_S`
    (``ray.init`` would otherwise retry for a long time). ``auto`` is left to Ray."""
    from fusiontune.errors import ConfigError

    if address == "auto":
        return
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--address {address}: expected 'auto', HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=ADDRESS_PROBE_S).close()
    except OSError as exc:
        raise _address_error(address, exc) from exc
    if "://" not in address:
        _check_ray_auth(address, f"{host}:{port}")


def _check_ray_auth(address: str, target: str) -> None:
    """Connect to the cluster's GCS once, as Ray's own client does: a cluster that wants a
    token refuses at once, where ``ray.init`` would retry for ~20 s and then blame the address.
    Only when this process would send no token (``RAY_AUTH_MODE`` is not ``token``: Ray never
    sends its token to an explicit address otherwise). A probe that has not answered within
    :data:`ADDRESS_PROBE_S` is left to ``ray.init``."""
    from fusiontune.errors import ConfigError

    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return
    failure: list[BaseException] = []

    def probe() -> None:
        try:
            from ray._raylet import GcsClient  # type: ignore[attr-defined]

            GcsClient(address=target)
        except Exception as exc:
            failure.append(exc)

    thread = threading.Thread(target=probe, daemon=True)
    with _quiet_stderr():  # Ray's C++ client logs each refused attempt
        thread.start()
        thread.join(ADDRESS_PROBE_S)
    if failure and type(failure[0]).__name__ == "AuthenticationError":
        raise ConfigError(
            f"--address {address}: the Ray cluster there requires token authentication and "
            "this driver sends no token; run with RAY_AUTH_MODE=token (the token comes from "
            "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), or start the head with "
            "RAY_AUTH_MODE=disabled on a private network"
        )


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the block (C++ logging bypasses sys.stderr)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _address_error(address: str, exc: BaseException) -> Exception:
    from fusiontune.errors import ConfigError

    reason = " ".join(str(exc).split()) or type(exc).__name__
    return ConfigError(
        f"--address {address}: cannot join a Ray cluster there ({reason}); "
        "give the address `ray start --head` printed, 'auto', or leave --address out"
    )


def _runtime_env() -> dict[str, Any]:
    """Let local Ray workers import this copy of fusiontune even when it is not installed,
    and make every worker ignore Ctrl-C (:func:`worker_setup`)."""
    import fusiontune

    root = os.path.dirname(os.path.dirname(os.path.abspath(fusiontune.__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {
        "env_vars": {"PYTHONPATH": path},
        "worker_process_setup_hook": f"{__name__}.{worker_setup.__name__}",
    }


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook``, run in each worker process before its first
    task: SIGINT is ignored, so a Ctrl-C sent to the terminal's process group (or to the
    workers of a cluster started from that terminal) reaches only the driver, which saves
    the trials and ends the workers itself. Named by its dotted path: the workers import it.
    Consequence: ``ray.cancel(force=False)`` (Ray's ``interrupt_main``) does nothing on these
    workers; the backend cancels with ``force=True`` only."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def max_workers() -> int:
    """Most ``workers`` accepted on this machine (:data:`MAX_WORKERS_PER_CORE` per core)."""
    return (os.cpu_count() or 1) * MAX_WORKERS_PER_CORE


def check_workers(workers: object, label: str = "workers") -> int:
    """``workers`` as an int in ``1 .. max_workers()``.

    Raises:
        ConfigError: naming ``label``, the value and the allowed range.
    """
    from fusiontune.errors import ConfigError

    high = max_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= high:
        raise ConfigError(
            f"{label} = {workers!r} is out of range; allowed 1 .. {high} "
            f"({MAX_WORKERS_PER_CORE} per CPU core, {os.cpu_count() or 1} cores here)"
        )
    return workers


def make_backend(
    name: str,
    workers: int = 1,
    address: str | None = None,
    plans_per_task: int | None = None,
    eval_timeout_s: float | None = DEFAULT_EVAL_TIMEOUT_S,
) -> Backend:
    """Build a backend by name (``ray`` or ``serial``)."""
    from fusiontune.errors import ConfigError, closest

    if name == "serial":
        return SerialBackend(plans_per_task or 1, eval_timeout_s)
    if name == "ray":
        return RayBackend(
            workers, address, plans_per_task or DEFAULT_PLANS_PER_TASK, eval_timeout_s
        )
    raise ConfigError(
        f"--backend '{name}' is not known{closest(name, ('ray', 'serial'))}; allowed: ray, serial"
    )
