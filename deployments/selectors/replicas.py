"""How many replicas a deployment ran over time, from its own append-only events.

The reconciler writes a ``status`` event when Ray's status changes and a ``replicas`` event when
Ray's running replica count moves while the status does not (an autoscaled deployment adding or
dropping a replica). Both carry ``running_replicas`` as Ray reported it, so the count over any
window is a step function of those events: the console's replica chart draws it, and the mean
over a window is what an autoscaled deployment cost in replicas (the planner sets it beside the
peak it sized for). GPU-hours read the same events (``deployments.selectors.gpu_hours``).
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from deployments.constants import EventKind
from deployments.models import Deployment
from deployments.selectors.gpu_hours import GPU_HOLDING_STATUSES


class ReplicaHistory(NamedTuple):
    """``points``: (time, replicas running from then on), the first at ``since``, the last at
    ``until`` repeating the count then; ``replica_hours`` and ``mean`` over the window."""

    points: list[tuple[dt.datetime, int]]
    replica_hours: float
    mean: float
    peak: int


def _running(after: dict, current: int) -> int | None:
    status = after.get("status")
    if status is None:
        return None
    if status not in GPU_HOLDING_STATUSES:
        return 0
    return int(after.get("running_replicas", current) or 0)


def replica_history(*, deployment: Deployment, since: dt.datetime, until: dt.datetime) -> ReplicaHistory:
    """Replicas Ray reported running between ``since`` and ``until`` (0 while stopped or failed)."""
    until = min(until, dt.datetime.now(dt.UTC))
    since = min(since, until)
    events = deployment.events.filter(
        kind__in=(EventKind.STATUS, EventKind.REPLICAS), created_at__lt=until
    ).order_by("created_at", "id")
    current, points = 0, []
    for e in events.only("created_at", "after"):
        n = _running(e.after or {}, current)
        if n is None:
            continue
        if e.created_at > since:
            if not points:
                points.append((since, current))
            if n != points[-1][1]:
                points.append((e.created_at, n))
        current = n
    if not points:
        points.append((since, current))
    points.append((until, current))
    replica_hours = sum(
        n * (b - a).total_seconds() / 3600.0 for (a, n), (b, _) in zip(points, points[1:], strict=False)
    )
    hours = (until - since).total_seconds() / 3600.0
    return ReplicaHistory(
        points=points,
        replica_hours=replica_hours,
        mean=replica_hours / hours if hours > 0 else float(current),
        peak=max(n for _, n in points),
    )


def replica_chart(history: ReplicaHistory) -> dict:
    """The console's stepped chart: ISO times and counts (``deployments/replicas.js`` draws it)."""
    return {
        "times": [t.isoformat() for t, _ in history.points],
        "replicas": [n for _, n in history.points],
    }
