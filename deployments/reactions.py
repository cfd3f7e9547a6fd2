"""Deployments' reactions to events (registered in ``settings.GOVERNOR_REACTIONS``, ADR 0030).

Each runs at least once per event, so each is idempotent: a reconcile compiles the whole desired
state, a publish sends the whole routing table, and a rollout step or an analysis run acts on the
row's state now (the controller locks the rollout; an analysis with a verdict is left alone).
"""

from __future__ import annotations

from deployments import services
from events.services import coalescing


@coalescing
def reconcile(event) -> None:
    """A deployment's desired state changed: ask a worker to make Ray Serve follow it."""
    from deployments.tasks import reconcile as reconcile_task

    reconcile_task.delay(trigger=event.kind.removeprefix("deployment.")[:32])


@coalescing
def routes_publish(event) -> None:
    """Routes, weights or what the gateway may route to changed: publish the ``routes`` section."""
    services.routes_section_publish()


def rollout_kick(event) -> None:
    """A rollout started or resumed: run its steps now rather than at the controller's next tick."""
    from deployments.tasks import rollout_advance_task

    rollout_advance_task.delay(int(event.payload["object_id"]))


def analysis_enqueue(event) -> None:
    """An analysis window closed: measure it (the controller re-enqueues a run whose task was lost)."""
    from deployments.tasks import analysis_run_task

    analysis_run_task.delay(int(event.payload["analysis_run"]))
