"""Real engine processes for the tests: the product's own helpers (``engines.local``, ``procs``)."""

from engines.local import engines_fixed_server, paced_server, prefix_router, simulated_engine
from procs import ROOT, free_port, wait_http

__all__ = [
    "ROOT",
    "engines_fixed_server",
    "free_port",
    "paced_server",
    "prefix_router",
    "simulated_engine",
    "wait_http",
]
