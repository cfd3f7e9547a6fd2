"""What the GPUs behind deployments cost, how much of it tenants were billed, and the idle remainder.

GPU-hours come from each deployment's own history, read through deployments' selector
(``deployment_gpu_spans``): from a status change into DEPLOYING, RUNNING, UNHEALTHY, UNKNOWN or
DELETING until the next change out of them, the deployment holds ``GPUs per replica × replicas``
GPUs (replicas as the reconciler observed them at that change, else as configured). An hour of a
GPU costs the GPU cost version in force for its type and pool *before* the target-utilization
divisor: idle time is shown here explicitly instead of being spread over prices. Billed = what tenants' usage on the deployment was charged (billing's
rollups); idle (unallocated) = GPU cost − billed, when positive.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import TYPE_CHECKING

from billing.selectors.costs import billed_by_deployment_day
from catalog.selectors import gpu_cost_in_force
from catalog.services import gpu_hourly_cost
from deployments.selectors.gpu_hours import deployment_gpu_spans

if TYPE_CHECKING:
    from deployments.models import Deployment


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
    deployments, spans = deployment_gpu_spans(until=until)
    billed = billed_by_deployment_day(since=since, until=until)
    rows: dict[tuple[int, dt.datetime], dict] = {}
    for dep_id, span_start, span_end, gpus in spans:
        d = deployments[dep_id]
        start, end = max(span_start, since), min(span_end, until)
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
