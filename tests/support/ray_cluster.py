"""The ``ray_cluster`` fixture: a private Ray head per test module (see ``governor.ray_local``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from governor.ray_local import (  # noqa: F401  (re-exported for tests)
    RayTestCluster,
    free_port,
    ray_test_cluster,
    start_ray_cluster,
    stop_ray_cluster,
)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayTestCluster]:
    """A private Ray head (2 CPUs, dashboard) for the tests of one module."""
    with ray_test_cluster() as cluster:
        yield cluster
