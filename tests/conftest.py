"""Shared fixtures. One local Ray instance for the whole session, shut down at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A local Ray with 2 CPUs and no dashboard, shared by every test that needs one."""
    import ray

    if not ray.is_initialized():
        # address="local": always a new local instance, never a stale cluster on this machine
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield None
    ray.shutdown()
