"""What the GPUs behind deployments cost, how much of it tenants were billed, and the idle remainder.

GPU-hours come from each deployment's own history (its append-only events): from a status change
into DEPLOYING, RUNNING, UNHEALTHY, UNKNOWN or DELETING until the next change out of them, the
deployment holds ``GPUs per replica × replicas`` GPUs (replicas as the reconciler observed them at
that change, else as configured). An hour of a GPU costs the GPU cost version in force for its type
and pool *before* the target-utilization divisor: idle time is shown here explicitly instead of
being spread over prices. Billed = what tenants' usage on the deployment was charged (billing's
rollups); idle (unallocated) = GPU cost − billed, when positive.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

from billing.selectors.costs import billed_by_deployment_day
from catalog.selectors import gpu_cost_in_force
from catalog.services import gpu_hourly_cost
from deployments.constants import EventKind, ScalingMode, Status
from deployments.models import Deployment, DeploymentEvent

HOLDING = {Status.DEPLOYING, Status.RUNNING, Status.UNHEALTHY, Status.UNKNOWN, Status.DELETING}


def _configured_replicas(d: Deployment) -> int:
    return (
        d.num_replicas
        if d.scaling_mode == ScalingMode.FIXED
        else max(d.min_replicas, d.running_replicas or 0)
    )


def _intervals(
    d: Deployment, events: list[DeploymentEvent], until: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime, int]]:
    """(start, end, GPUs held) spans of a deployment, from its status history."""
    spans, open_at, gpus = [], None, 0
    per_replica = d.gpus_per_replica
    for e in events:
        status = (e.after or {}).get("status")
        if status is None:
            continue
        replicas = (e.after or {}).get("running_replicas") or _configured_replicas(d)
        if open_at is not None:
            spans.append((open_at, e.created_at, gpus))
            open_at = None
        if status in HOLDING:
            open_at, gpus = e.created_at, per_replica * max(1, replicas)
    if open_at is not None:
        spans.append((open_at, until, gpus))
    return spans


def _split_by_day(start: dt.datetime, end: dt.datetime):
    cur = start
    while cur < end:
        next_day = dt.datetime(cur.year, cur.month, cur.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
        stop = min(end, next_day)
        yield next_day - dt.timedelta(days=1), (stop - cur).total_seconds() / 3600.0
        cur = stop


def _hourly_rate(d: Deployment, at: dt.datetime) -> tuple[Decimal, int | None]:
    v = gpu_cost_in_force(gpu_type_id=d.gpu_type_id, pool=d.pool, at=at)
    if v is not None:
        return Decimal(v.terms.get("before_utilization") or v.usd_per_gpu_hour), v.pk
    return gpu_hourly_cost(d.gpu_type), None


def gpu_cost_by_deployment_day(*, since: dt.datetime, until: dt.datetime) -> list[dict]:
    """One row per deployment × UTC day: GPU-hours, their cost, billed, idle. Oldest day first."""
    now = min(until, dt.datetime.now(dt.UTC))
    deployments = {d.pk: d for d in Deployment.objects.select_related("gpu_type")}
    events = defaultdict(list)
    for e in DeploymentEvent.objects.filter(kind=EventKind.STATUS, created_at__lt=until).order_by(
        "created_at", "id"
    ):
        events[e.deployment_id].append(e)
    billed = billed_by_deployment_day(since=since, until=until)
    rows: dict[tuple[int, dt.datetime], dict] = {}
    for dep_id, evs in events.items():
        d = deployments.get(dep_id)
        if d is None:
            continue
        for start, end, gpus in _intervals(d, evs, now):
            start, end = max(start, since), min(end, until)
            if end <= start:
                continue
            for day, hours in _split_by_day(start, end):
                row = rows.setdefault(
                    (dep_id, day), {"deployment": d, "day": day, "gpu_hours": 0.0, "cost_usd": Decimal(0)}
                )
                rate, version_id = _hourly_rate(d, day)
                row["gpu_hours"] += hours * gpus
                row["cost_usd"] += rate * Decimal(str(hours * gpus))
                row["usd_per_gpu_hour"], row["gpu_cost_version_id"] = rate, version_id
    for dep_id, day in billed:
        if dep_id in deployments and (dep_id, day) not in rows:
            rows[(dep_id, day)] = {
                "deployment": deployments[dep_id],
                "day": day,
                "gpu_hours": 0.0,
                "cost_usd": Decimal(0),
            }
    out = []
    for (dep_id, day), row in rows.items():
        row["billed_usd"] = Decimal(billed.get((dep_id, day), 0)) / Decimal(1_000_000_000)
        row["idle_usd"] = max(Decimal(0), row["cost_usd"] - row["billed_usd"])
        row["pool"] = row["deployment"].pool
        out.append(row)
    return sorted(out, key=lambda r: (r["day"], r["deployment"].slug))


def gpu_cost_summary(*, since: dt.datetime, until: dt.datetime) -> dict:
    """Totals by deployment, by pool and by day, for the admin cost page and the overview."""
    rows = gpu_cost_by_deployment_day(since=since, until=until)

    def total(keyf):
        acc: dict = {}
        for r in rows:
            k = keyf(r)
            t = acc.setdefault(
                k,
                {"gpu_hours": 0.0, "cost_usd": Decimal(0), "billed_usd": Decimal(0), "idle_usd": Decimal(0)},
            )
            for f in ("gpu_hours", "cost_usd", "billed_usd", "idle_usd"):
                t[f] += r[f]
        return acc

    by_dep = total(lambda r: r["deployment"])
    return {
        "rows": rows,
        "by_deployment": sorted(by_dep.items(), key=lambda kv: -kv[1]["cost_usd"]),
        "by_pool": sorted(total(lambda r: r["pool"]).items()),
        "by_day": sorted(total(lambda r: r["day"]).items()),
        "total": total(lambda r: "all").get(
            "all",
            {"gpu_hours": 0.0, "cost_usd": Decimal(0), "billed_usd": Decimal(0), "idle_usd": Decimal(0)},
        ),
    }
