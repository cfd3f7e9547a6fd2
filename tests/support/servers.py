"""The local servers the tests start live in the product (``loadtest.local_servers``), so that the
benchmarks can use them too without importing ``tests``."""

from loadtest.local_servers import (
    ROOT,
    engines_fixed_server,
    free_port,
    paced_server,
    prefix_router,
    simulated_engine,
    wait_http,
)

__all__ = [
    "ROOT",
    "engines_fixed_server",
    "free_port",
    "paced_server",
    "prefix_router",
    "simulated_engine",
    "wait_http",
]
