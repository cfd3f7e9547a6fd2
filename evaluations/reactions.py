"""Evaluations' reactions to events (registered in ``settings.GOVERNOR_REACTIONS``, ADR 0030).

Each enqueues the Celery task of a queued run. Delivery is at least once, and so is the enqueue:
a second task for the same run claims nothing (``core.lifecycle.run_claim`` moves queued →
running once; a cross-check claims its queued state under a row lock).
"""

from __future__ import annotations

from evaluations.services import benchmarks, evals, gates, planner, routing
from events.services import coalescing


def benchmark_run_enqueue(event) -> None:
    benchmarks._enqueue(event.payload["run"])


def cross_check_enqueue(event) -> None:
    benchmarks._enqueue_cross_check(event.payload["run"])


def eval_run_enqueue(event) -> None:
    evals._enqueue(event.payload["run"])


def gate_run_enqueue(event) -> None:
    gates._enqueue(event.payload["run"])


def capacity_plan_enqueue(event) -> None:
    planner._enqueue(event.payload["plan"])


@coalescing
def routers_publish(event) -> None:
    """A router policy was activated or retired: publish the gateway's ``routers`` section."""
    routing.routers_section_publish()
