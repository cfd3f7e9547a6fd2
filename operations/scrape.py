"""Scraping the engines: every running deployment behind a route with an active SLO is asked for
its ``/metrics`` (through Ray Serve, under the deployment's prefix) on the beat, and the sample is
kept for the route page and for incident diagnosis (``operations.engine_metrics``). The URL is the
platform's own Serve address (``RAY_SERVE_URL``), not one a user set."""

from __future__ import annotations

import datetime as dt
import logging

import httpx
from django.utils import timezone

from deployments.selectors import routing_table
from operations import engine_metrics
from operations.models import EngineSample, Slo

log = logging.getLogger(__name__)

TIMEOUT_S = 3.0
KEEP = dt.timedelta(days=2)


def scrape_targets() -> list[tuple[int, str]]:
    """``(deployment_id, metrics URL)`` of the running deployments behind routes with active SLOs."""
    names = set(Slo.objects.filter(is_active=True).values_list("route__public_name", flat=True))
    if not names:
        return []
    out = {}
    for name, route in routing_table().items():
        if name not in names:
            continue
        for t in route["targets"]:
            if t["status"] == "RUNNING" and t["base_url"]:
                out[t["deployment_id"]] = t["base_url"].rstrip("/").removesuffix("/v1") + "/metrics"
    return sorted(out.items())


def engines_scrape(*, now: dt.datetime | None = None, client: httpx.Client | None = None) -> int:
    """One sample per target; returns how many engines answered."""
    now = now or timezone.now()
    answered = 0
    own = client is None
    client = client or httpx.Client(timeout=TIMEOUT_S)
    try:
        for deployment_id, url in scrape_targets():
            try:
                r = client.get(url)
                r.raise_for_status()
                values, error = engine_metrics.parse(r.text), ""
                answered += 1
            except (httpx.HTTPError, ValueError) as exc:
                values, error = {}, f"{type(exc).__name__}: {exc}"[:300]
            EngineSample.objects.create(deployment_id=deployment_id, at=now, values=values, error=error)
    finally:
        if own:
            client.close()
    EngineSample.objects.filter(at__lt=now - KEEP).delete()
    return answered


def engine_intervals(*, deployment_ids, since: dt.datetime, until: dt.datetime) -> dict[str, dict]:
    """Per deployment, what its engine did between its first and last good sample in the span."""
    out = {}
    samples = EngineSample.objects.filter(
        deployment_id__in=list(deployment_ids), at__gte=since, at__lte=until, error=""
    ).order_by("at")
    first, last = {}, {}
    for s in samples:
        first.setdefault(s.deployment_id, s)
        last[s.deployment_id] = s
    for dep, a in first.items():
        b = last[dep]
        if b.pk == a.pk:
            continue
        out[str(dep)] = engine_metrics.interval(a.values, b.values, (b.at - a.at).total_seconds())
    return out


def engine_latest(*, deployment_ids) -> dict[int, dict]:
    """The last two good samples' interval per deployment (the route page's live gauges)."""
    out = {}
    for dep in deployment_ids:
        two = list(EngineSample.objects.filter(deployment_id=dep, error="").order_by("-at")[:2])
        if len(two) == 2:
            out[dep] = engine_metrics.interval(
                two[1].values, two[0].values, (two[0].at - two[1].at).total_seconds()
            )
            out[dep]["at"] = two[0].at
        elif two:
            out[dep] = {**two[0].values, "at": two[0].at}
    return out
