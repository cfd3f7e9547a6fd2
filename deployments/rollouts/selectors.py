"""Rollout reads for pages, the API and the charts."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet
from django.utils import timezone

from billing.selectors.usage import usage_request_samples
from deployments.models import AnalysisRun, ModelRoute, Rollout
from deployments.rollouts import analysis as A
from deployments.rollouts.plan import METRICS, describe_check, describe_step

# The charts show at most this much history, in buckets sized to give ~60 points.
CHART_SPAN_S = 3600
CHART_POINTS = 60


def rollout_list(*, phase: str | None = None, route: ModelRoute | None = None) -> QuerySet[Rollout]:
    qs = Rollout.objects.select_related("route", "stable", "canary", "created_by")
    if phase:
        qs = qs.filter(phase=phase)
    if route is not None:
        qs = qs.filter(route=route)
    return qs.order_by("-created_at", "-id")


def rollout_get(*, pk: int) -> Rollout:
    return Rollout.objects.select_related(
        "route", "stable__model_version__model", "canary__model_version__model", "created_by"
    ).get(pk=pk)


def rollout_analysis_runs(*, rollout: Rollout, limit: int = 50) -> list[AnalysisRun]:
    """The newest analysis runs, each with ``rows``: its results formatted for the page."""
    runs = list(rollout.analysis_runs.order_by("-window_start", "-id")[:limit])
    for run in runs:
        run.rows = A.display_rows(run.results or [])
    return runs


def rollout_plan_rows(*, rollout: Rollout) -> list[dict]:
    """The plan as shown: each step described, with done / current / pending."""
    rows = []
    for i, step in enumerate(rollout.steps):
        if i < rollout.step_index:
            state = "done"
        elif i == rollout.step_index and rollout.is_active:
            state = "current"
        else:
            state = "skipped" if not rollout.is_active and i >= rollout.step_index else "pending"
        rows.append({"n": i + 1, "text": describe_step(step), "state": state, "kind": step["kind"]})
    return rows


def rollout_check_rows(*, rollout: Rollout) -> list[str]:
    return [describe_check(c) for c in rollout.checks]


def rollout_chart_data(*, rollout: Rollout, now: dt.datetime | None = None) -> dict:
    """Per-side series of every checked metric since the rollout started, with each check's limit.

    ``{"t0", "bucket_s", "metrics": {key: {"label", "unit", "stable": [[t, v]], "canary": [[t, v]],
    "limits": [{"relative", "limit"}]}}, "windows": [[start, end, verdict]]}``; t in seconds since
    the rollout started. Relative limits are drawn as stable × limit per bucket.
    """
    now = now or timezone.now()
    start = rollout.created_at
    end = min(now, rollout.finished_at + dt.timedelta(seconds=30)) if rollout.finished_at else now
    start = max(start, end - dt.timedelta(seconds=CHART_SPAN_S))
    span = max((end - start).total_seconds(), 1)
    bucket_s = max(2.0, round(span / CHART_POINTS))
    samples = usage_request_samples(
        deployment_ids=[rollout.stable_id, rollout.canary_id], since=start, until=end
    )
    t0 = rollout.created_at.timestamp()
    sides = {}
    for side, dep_id in (("stable", rollout.stable_id), ("canary", rollout.canary_id)):
        sides[side] = A.series(
            [s for s in samples if s["deployment_id"] == dep_id],
            start=t0,
            bucket_s=bucket_s,
            sla_ttft_ms=rollout.sla_ttft_ms,
            sla_tpot_ms=rollout.sla_tpot_ms,
        )
    checked = {c["metric"] for c in rollout.checks} or set(METRICS)
    metrics = {}
    for key in METRICS:
        if key not in checked:
            continue
        m = METRICS[key]
        scale = 100 if m.unit == "%" else 1
        metrics[key] = {
            "label": m.label,
            "unit": m.unit,
            "stable": [[p["t"], _scaled(p["values"][key], scale)] for p in sides["stable"]],
            "canary": [[p["t"], _scaled(p["values"][key], scale)] for p in sides["canary"]],
            "limits": [
                {"relative": c["relative"], "limit": c["limit"] if c["relative"] else c["limit"] * scale}
                for c in rollout.checks
                if c["metric"] == key
            ],
        }
    windows = [
        [r.window_start.timestamp() - t0, r.window_end.timestamp() - t0, r.verdict]
        for r in rollout.analysis_runs.order_by("window_start")
    ]
    return {
        "bucket_s": bucket_s,
        "requests": {side: sum(p["n"] for p in sides[side]) for side in sides},
        "metrics": metrics,
        "windows": windows,
    }


def _scaled(v, scale):
    return None if v is None else round(v * scale, 6)
