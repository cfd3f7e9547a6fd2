"""The route page's isolation figure (ADR 0039): short requests' p95 TTFT in the periods a route
isolated long prompts vs the periods it did not, from usage events and the audited threshold history,
checked against numpy on the same samples."""

from __future__ import annotations

import datetime as dt
import random
import re
import uuid

import numpy as np
import pytest
from django.urls import reverse
from django.utils import timezone

from audit.selectors import events_for_object
from billing.models import UsageEvent
from deployments.models import ModelRoute
from deployments.selectors.isolation import MIN_SAMPLES, p95_interval, route_isolation_ttft, threshold_periods
from deployments.services import model_route_save

pytestmark = pytest.mark.django_db


def _event(tenant, model: str, at: dt.datetime, *, prompt: int, ttft: float | None, status: str = "ok"):
    return UsageEvent(
        event_id=uuid.uuid4(), tenant=tenant, public_model=model, prompt_tokens=prompt, completion_tokens=5,
        cost_nanos=1, status=status, http_status=200 if status == "ok" else 503, started_at=at, finished_at=at,
        received_at=at, ttft_ms=ttft,
    )  # fmt: skip


def _set_threshold(route: ModelRoute, value: int | None, actor) -> dt.datetime:
    route.long_context_threshold_tokens = value
    model_route_save(route=route, actor=actor, reason="test")
    return events_for_object(object_type="deployments.modelroute", object_id=route.pk).last().at


def _between(a: dt.datetime, b: dt.datetime, i: int, n: int) -> dt.datetime:
    """The i-th of n instants strictly inside (a, b)."""
    return a + (b - a) * (i + 1) / (n + 1)


@pytest.fixture
def history(admin_user):
    """A route created without a threshold, then isolated (2000), shared again, isolated again (3000):
    the change times come from the audit trail itself."""
    route = ModelRoute(public_name=f"iso-{uuid.uuid4().hex[:6]}")
    model_route_save(route=route, actor=admin_user, reason="test")
    created = events_for_object(object_type="deployments.modelroute", object_id=route.pk).last().at
    changes = [_set_threshold(route, v, admin_user) for v in (2000, None, 3000)]
    return route, [created, *changes]


def test_threshold_periods_follow_the_audited_history(history):
    route, (created, t1, t2, t3) = history
    since, until = created - dt.timedelta(hours=1), t3 + dt.timedelta(hours=1)
    periods = threshold_periods(route=route, since=since, until=until)
    assert [(p.start, p.end, p.threshold) for p in periods] == [
        (since, t1, None),  # before the route existed, then created without a threshold
        (t1, t2, 2000),
        (t2, t3, None),
        (t3, until, 3000),
    ]
    # A window inside one period gets the value in force then, walked back from the current one.
    inner = threshold_periods(route=route, since=_between(t1, t2, 0, 1), until=_between(t1, t2, 1, 2))
    assert [p.threshold for p in inner] == [2000]
    assert [
        p.threshold for p in threshold_periods(route=route, since=until, until=until + dt.timedelta(1))
    ] == [3000]


def test_short_requests_p95_on_each_side_matches_numpy_on_the_same_samples(history, tenant):
    route, (created, t1, t2, t3) = history
    since, until = created - dt.timedelta(hours=1), t3 + dt.timedelta(hours=1)
    rng = random.Random(7)
    events, expect = [], {True: [], False: []}
    for (a, b), isolated in (((since, t1), False), ((t1, t2), True), ((t2, t3), False), ((t3, until), True)):
        for i in range(60):
            at = _between(a, b, i, 60)
            prompt = rng.choice([50, 400, 3000, 2999, 3001, 20_000])
            ttft = rng.uniform(20, 80) * (1 if isolated else 3)
            status = "ok" if i % 15 else "error"
            events.append(_event(tenant, route.public_name, at, prompt=prompt, ttft=ttft, status=status))
            if prompt <= 3000 and status == "ok":
                expect[isolated].append(ttft)
    events.append(
        _event(tenant, route.public_name, _between(t3, until, 0, 1), prompt=10, ttft=None)
    )  # no token
    events.append(_event(tenant, "another-route", _between(t3, until, 0, 1), prompt=10, ttft=1e6))
    UsageEvent.objects.bulk_create(events)
    fig = route_isolation_ttft(route=route, since=since, until=until)
    assert fig["short_at_most"] == 3000  # the threshold in force now
    for key, isolated in (("isolated", True), ("shared", False)):
        ref = sorted(expect[isolated])
        side = fig[key]
        assert side["n"] == len(ref) >= MIN_SAMPLES
        assert side["p95_ms"] == pytest.approx(np.percentile(ref, 95))
        assert side["p50_ms"] == pytest.approx(np.percentile(ref, 50))
        assert side["p95_low_ms"] <= side["p95_ms"] <= side["p95_high_ms"]
    assert fig["ratio"] == pytest.approx(np.percentile(expect[True], 95) / np.percentile(expect[False], 95))
    assert fig["ratio"] < 0.5 and fig["reason"] == ""
    # Cut at another size on request: fewer short requests on each side.
    narrower = route_isolation_ttft(route=route, since=since, until=until, short_at_most=400)
    assert narrower["isolated"]["n"] < fig["isolated"]["n"] and narrower["shared"]["n"] < fig["shared"]["n"]


def test_too_few_samples_or_no_isolation_at_all_say_so_instead_of_a_figure(history, tenant, admin_user):
    route, (created, t1, t2, t3) = history
    since, until = created - dt.timedelta(hours=1), t3 + dt.timedelta(hours=1)
    UsageEvent.objects.bulk_create(
        [
            _event(tenant, route.public_name, _between(t3, until, i, 5), prompt=100, ttft=30.0)
            for i in range(5)
        ]
    )
    fig = route_isolation_ttft(route=route, since=since, until=until)
    assert fig["ratio"] is None and fig["isolated"]["n"] == 5 and fig["shared"]["n"] == 0
    assert fig["reason"].startswith("Not enough data")
    never = ModelRoute(public_name=f"plain-{uuid.uuid4().hex[:6]}")
    model_route_save(route=never, actor=admin_user, reason="test")
    fig = route_isolation_ttft(route=never, since=since, until=timezone.now())
    assert fig["short_at_most"] is None and fig["ratio"] is None and "did not isolate" in fig["reason"]


def test_the_p95_interval_brackets_the_quantile_with_order_statistics():
    values = [float(v) for v in range(1, 201)]  # n = 200: n q = 190, half-width 1.96 * sqrt(9.5)
    assert p95_interval(values) == (183.0, 197.0)
    assert p95_interval([1.0, 2.0]) == (1.0, None)  # too few samples to bound it from above
    assert p95_interval([]) == (None, None)


def _section(html: str) -> str:
    m = re.search(r'<section id="route-isolation".*?</section>', html, re.S)
    assert m, "the route page has no isolation section"
    return m.group(0)


def test_the_route_page_shows_both_p95s_their_counts_and_the_ratio(history, tenant, client, auditor_user):
    route, (created, t1, t2, t3) = history
    now = timezone.now()
    rng = random.Random(3)
    iso = [rng.uniform(10, 50) for _ in range(40)]
    shared = [rng.uniform(100, 400) for _ in range(30)]
    UsageEvent.objects.bulk_create(
        [_event(tenant, route.public_name, _between(t3, now, i, len(iso)), prompt=200, ttft=v) for i, v in enumerate(iso)]
        + [_event(tenant, route.public_name, _between(t2, t3, i, len(shared)), prompt=200, ttft=v)
           for i, v in enumerate(shared)]
        + [_event(tenant, route.public_name, _between(t2, t3, 0, 1), prompt=50_000, ttft=9000.0)]
    )  # fmt: skip
    client.force_login(auditor_user)
    r = client.get(reverse("deployments:route_detail", args=[route.pk]), {"window": "1h"})
    assert r.status_code == 200
    html = _section(r.content.decode())
    p_iso, p_shared = np.percentile(iso, 95), np.percentile(shared, 95)
    assert f"{p_iso:.1f} ms" in html and f"{p_shared:.1f} ms" in html
    assert re.search(r'id="isolation-ratio"[^>]*>\s*' + re.escape(f"{p_iso / p_shared:.2f}"), html)
    assert re.search(r'id="isolation-n-isolated"[^>]*>\s*40\b', html)
    assert re.search(r'id="isolation-n-shared"[^>]*>\s*30\b', html)
    assert "at most 3000 tokens" in html
    # Bad query parameters: the form says what is wrong, nothing is computed from them.
    bad = client.get(
        reverse("deployments:route_detail", args=[route.pk]), {"window": "forever", "short": "-5"}
    )
    assert bad.status_code == 400
    assert "Select a valid choice" in _section(bad.content.decode())


def test_the_route_page_says_when_there_is_not_enough_data(history, client, auditor_user):
    route, _ = history
    client.force_login(auditor_user)
    r = client.get(reverse("deployments:route_detail", args=[route.pk]))
    assert r.status_code == 200
    html = _section(r.content.decode())
    assert "Not enough data" in html and 'id="isolation-ratio"' not in html
