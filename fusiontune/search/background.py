"""A backend started and closed off the driver's main thread.

Starting a local Ray takes seconds (``ray.init`` spawns the GCS server and the raylet, then
waits for them), and so does ``ray.shutdown``; during both the driver only waits. The search
has work that needs no backend meanwhile: the start plans (greedy, TVM-like, unfused) before
the first trial, the baselines, the exact oracle and the tables after the last.

:class:`BackendThread` runs ``backend.start`` in a thread and keeps that thread alive until
the backend is closed, then closes it from the same thread. The thread must outlive the
backend: Ray's node processes are started with ``PR_SET_PDEATHSIG``, which fires when the
*thread* that spawned them ends, so a thread that returned after ``ray.init`` would take the
GCS server with it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.search.backends import Backend


class BackendThread:
    """Start ``backend`` in the background; :meth:`ready` waits for it, :meth:`release`
    closes it in the background, :meth:`join` waits for the close.

    Lifecycle: :meth:`begin` once, then :meth:`ready` (raises what ``start`` raised), then
    :meth:`release` and :meth:`join` (also after errors; both may be called more than once).
    """

    def __init__(self, backend: Backend, graph: Graph) -> None:
        self.backend = backend
        self._graph = graph
        self._started = threading.Event()
        self._release = threading.Event()
        self._error: BaseException | None = None
        self._close_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"fusiontune-{backend.name}", daemon=True
        )

    def begin(self) -> None:
        """Start the backend in the background thread."""
        self._thread.start()

    def _run(self) -> None:
        try:
            self.backend.start(self._graph)
        except BaseException as exc:  # handed to the main thread by ready()
            self._error = exc
        finally:
            self._started.set()
        self._release.wait()
        try:
            self.backend.close()
        except BaseException as exc:
            self._close_error = exc

    def ready(self) -> None:
        """Wait until the backend has started; raise what its ``start`` raised."""
        self._started.wait()
        if self._error is not None:
            raise self._error

    def release(self) -> None:
        """Close the backend in the background (no more tasks will be submitted)."""
        self._release.set()

    def join(self) -> None:
        """Release the backend and wait until it is closed; raise what ``close`` raised."""
        self.release()
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join()
        error, self._close_error = self._close_error, None
        if error is not None:
            raise error
