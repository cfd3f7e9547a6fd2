"""Autoscaling from goodput: what a deployment's Ray Serve bounds should be, and what autoscaling cost.

``autoscaling_suggestion`` derives an autoscaled deployment's settings from what was measured, each
number with where it came from (the console shows it beside the scaling form and can apply it):

- **target per replica**: 0, i.e. 80 % of the requests in flight at which its SLA held in its latest
  measured capacity benchmark (``Deployment.capacity_inflight``), so Ray adds a replica before the
  gateways' admission limit queues requests;
- **max replicas**: the capacity planner's replicas for the peak of the route it serves: the latest
  finished plan with a row for its model version × GPU type × TP, its exact GPUs (peak tokens/s ÷
  per-GPU goodput × redundancy) times the deployment's share of its route's weight, over TP, rounded
  up (capped at ``MAX_REPLICAS``);
- **min replicas**: kept (at least 1: an engine's cold start takes minutes), never above the max;
- **delays**: kept; they are a policy, not a measurement.

``observed_replicas`` is the other half: how many replicas deployments of a plan's candidate ran over
a window, from their replica events (the same spans GPU-hours and idle cost read), so a plan sized for
the peak can be set against what autoscaling actually held.
"""

from __future__ import annotations

import datetime as dt
import math

from deployments.constants import MAX_REPLICAS, ScalingMode
from deployments.selectors.gpu_hours import deployment_gpu_spans
from evaluations.models import CapacityPlan
from evaluations.services.planner import HOURS_PER_MONTH

PLANS_SCANNED = 50


def _plan_row(deployment) -> tuple[CapacityPlan | None, dict | None]:
    """The latest finished plan with an answer for the deployment's version × GPU type × TP."""
    key = (deployment.model_version_id, deployment.gpu_type_id, deployment.tensor_parallel_size)
    for plan in CapacityPlan.objects.filter(status="done").order_by("-created_at", "-id")[:PLANS_SCANNED]:
        for row in plan.rows or []:
            if (
                row.get("ok")
                and (row.get("model_version_id"), row.get("gpu_type_id"), row.get("tensor_parallel")) == key
            ):
                return plan, row
    return None, None


def _route_share(deployment) -> tuple[float, str]:
    """The largest share of a route's weight the deployment carries, and which route that is."""
    best, name = None, ""
    for target in deployment.route_targets.select_related("route"):
        total = sum(t.weight for t in target.route.targets.filter(deployment__deleted_at__isnull=True))
        share = target.weight / total if total else 0.0
        if best is None or share > best:
            best, name = share, target.route.public_name
    if best is None:
        return 1.0, ""
    return best, name


def autoscaling_suggestion(*, deployment) -> dict:
    """``values``: a complete scale request (what "apply" posts); ``rows``: one per number, with its
    source; ``changes``: whether applying would change anything."""
    values = {
        "scaling_mode": ScalingMode.AUTOSCALING,
        "min_replicas": deployment.min_replicas,
        "max_replicas": deployment.max_replicas,
        "target_ongoing_requests": deployment.target_ongoing_requests,
        "upscale_delay_s": deployment.upscale_delay_s,
        "downscale_delay_s": deployment.downscale_delay_s,
        "look_back_period_s": deployment.look_back_period_s,
    }
    rows = []
    if deployment.capacity_inflight:
        values["target_ongoing_requests"] = 0
        rows.append({
            "field": "target_ongoing_requests", "value": deployment.measured_target,
            "source": f"80 % of {deployment.capacity_inflight} requests in flight per replica, the concurrency "
                      f"at which its SLA held in benchmark #{deployment.capacity_run_id} (stored as 0: it follows "
                      "the next measured benchmark)",
            "run_id": deployment.capacity_run_id,
        })  # fmt: skip
    else:
        rows.append({"field": "target_ongoing_requests", "value": None,
                     "source": "no measured capacity benchmark yet: run one to derive the target"})  # fmt: skip
    plan, row = _plan_row(deployment)
    if row is not None:
        share, route = _route_share(deployment)
        tp = max(1, int(row.get("tensor_parallel") or 1))
        needed = max(1, math.ceil(row["gpus_exact"] * share / tp - 1e-9))
        values["max_replicas"] = min(MAX_REPLICAS, needed)
        where = f"{share:.0%} of route {route}'s weight" if route else "not on a route: the plan's whole peak"
        rows.append({
            "field": "max_replicas", "value": values["max_replicas"],
            "source": f"capacity plan “{plan.name}”: peak {plan.inputs.get('peak_qps'):g} req/s needs "
                      f"{row['gpus_exact']:.2f} GPUs at {row['per_gpu_goodput']:.0f} tokens/s per GPU "
                      f"({row.get('label')}) × redundancy {plan.inputs.get('redundancy'):g}; {where}; TP {tp}"
                      + (f"; capped at {MAX_REPLICAS}" if needed > MAX_REPLICAS else ""),
            "plan_token": str(plan.token),
        })  # fmt: skip
    else:
        rows.append({"field": "max_replicas", "value": None,
                     "source": "no finished capacity plan has this model version × GPU type × TP: plan one "
                               "for the route's peak to derive the maximum"})  # fmt: skip
    values["min_replicas"] = min(max(1, deployment.min_replicas), values["max_replicas"])
    rows.append({"field": "min_replicas", "value": values["min_replicas"],
                 "source": "kept (at least one replica stays warm: an engine's cold start takes minutes)"})  # fmt: skip
    current = {k: getattr(deployment, k) for k in values}
    return {
        "values": values,
        "rows": rows,
        "derived": any(r["value"] is not None for r in rows if r["field"] != "min_replicas"),
        "changes": values != current,
    }


def observed_replicas(*, rows: list[dict], days: int = 7, until: dt.datetime | None = None) -> dict:
    """Per plan row (by candidate key): what deployments of that candidate held over the last ``days``
    days, from their replica events: mean replicas and GPUs, and a month at that mean, beside the
    plan's month at its peak replicas."""
    until = until or dt.datetime.now(dt.UTC)
    since = until - dt.timedelta(days=days)
    deployments, spans = deployment_gpu_spans(until=until)
    hours = (until - since).total_seconds() / 3600.0
    gpu_hours: dict[tuple, float] = {}
    names: dict[tuple, set] = {}
    for dep_id, start, end, gpus in spans:
        d = deployments[dep_id]
        a, b = max(start, since), min(end, until)
        if b <= a:
            continue
        key = (d.model_version_id, d.gpu_type_id, d.tensor_parallel_size)
        gpu_hours[key] = gpu_hours.get(key, 0.0) + gpus * (b - a).total_seconds() / 3600.0
        names.setdefault(key, set()).add(d.slug)
    out = {}
    for row in rows:
        if not row.get("ok"):
            continue
        key = (row.get("model_version_id"), row.get("gpu_type_id"), row.get("tensor_parallel"))
        if key not in gpu_hours:
            continue
        tp = max(1, int(row.get("tensor_parallel") or 1))
        mean_gpus = gpu_hours[key] / hours
        out[row["candidate"]] = {
            "deployments": sorted(names.get(key, ())),
            "mean_gpus": mean_gpus,
            "mean_replicas": mean_gpus / tp,
            "monthly_usd": mean_gpus * row["usd_per_gpu_hour"] * HOURS_PER_MONTH,
            "days": days,
        }
    return out
