"""When each deployment held how many GPUs: its GPU-hours, from its own status history.

Evaluations' cost pages price these hours and set them against what tenants were billed
(``evaluations.selectors.gpu_costs``); deployments only says when its GPUs were held.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import NamedTuple

from deployments.constants import EventKind, ScalingMode, Status
from deployments.models import Deployment, DeploymentEvent

# From a status change into one of these until the next change out of them, a deployment holds
# ``GPUs per replica × replicas`` GPUs (what evaluations' cost pages price as GPU-hours).
GPU_HOLDING_STATUSES = frozenset(
    {Status.DEPLOYING, Status.RUNNING, Status.UNHEALTHY, Status.UNKNOWN, Status.DELETING}
)


class GpuSpan(NamedTuple):
    """A stretch of time in which one deployment held a number of GPUs."""

    deployment_id: int
    start: dt.datetime
    end: dt.datetime
    gpus: int


def _configured_replicas(d: Deployment) -> int:
    """Replicas at a change that reported none running (Ray starting them): the fixed count, or an
    autoscaled deployment's minimum, which is what Ray starts with. Not the count running now: that
    would price a past span at today's replicas (the events carry the counts Ray reported)."""
    return d.num_replicas if d.scaling_mode == ScalingMode.FIXED else max(1, d.min_replicas)


def _spans(d: Deployment, events: list[DeploymentEvent], until: dt.datetime) -> list[GpuSpan]:
    spans, open_at, gpus = [], None, 0
    per_replica = d.gpus_per_replica
    for e in events:
        status = (e.after or {}).get("status")
        if status is None:
            continue
        replicas = (e.after or {}).get("running_replicas") or _configured_replicas(d)
        if open_at is not None:
            spans.append(GpuSpan(d.pk, open_at, e.created_at, gpus))
            open_at = None
        if status in GPU_HOLDING_STATUSES:
            open_at, gpus = e.created_at, per_replica * max(1, replicas)
    if open_at is not None:
        spans.append(GpuSpan(d.pk, open_at, until, gpus))
    return spans


def deployment_gpu_spans(*, until: dt.datetime) -> tuple[dict[int, Deployment], list[GpuSpan]]:
    """Every deployment (by id, with its GPU type) and the spans in which it held GPUs before ``until``.

    The spans come from each deployment's own status history (its append-only events): replicas as
    the reconciler observed them at each change, else as configured. A span still open ends at
    ``until`` or now, whichever is earlier.
    """
    end = min(until, dt.datetime.now(dt.UTC))
    # A rehearsal's deployments are simulated: they never held a GPU.
    deployments = {d.pk: d for d in Deployment.objects.filter(rehearsal=False).select_related("gpu_type")}
    events: dict[int, list[DeploymentEvent]] = defaultdict(list)
    kinds = (EventKind.STATUS, EventKind.REPLICAS)  # a replica count moving splits a span
    for e in DeploymentEvent.objects.filter(kind__in=kinds, created_at__lt=until).order_by(
        "created_at", "id"
    ):
        events[e.deployment_id].append(e)
    spans = [
        span
        for dep_id, evs in events.items()
        if dep_id in deployments
        for span in _spans(deployments[dep_id], evs, end)
    ]
    return deployments, spans
