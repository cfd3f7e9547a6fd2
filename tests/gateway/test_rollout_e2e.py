"""A faulty canary aborts by itself, end to end: real gateway, real simulated engines, a real Celery
worker running the analysis, usage shipped by the gateway's spool, and the gateway following the
abort's weight change within 2 s.

The two deployments' engines are built from their compiled Serve arguments (faults included) and
served under Ray Serve's ``/d/<slug>`` layout by ``engines.multi``, which stands in for the Serve
proxy at ``RAY_SERVE_URL``. The controller's beat is a thread calling ``rollouts_tick``.
"""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
import redis

from deployments.models import Rollout
from deployments.rollouts.services import rollout_create
from snapshot.publish import VERSION_KEY, section_key
from tests.gateway.conftest import PREFIX, REDIS_URL
from tests.gateway.rollout_stack import (
    Load,
    Ticker,
    analysis_worker,
    engines,
    make_pair,
    serve_route,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL = "rollout-e2e"
EXTRA_TTFT_MS = 400


def test_canary_with_injected_latency_aborts_by_itself(gateway, gw_tmp, settings, tenant, admin_user):
    pair = make_pair(MODEL, canary_faults={"ttft_extra_ms": EXTRA_TTFT_MS})
    r = redis.Redis.from_url(REDIS_URL)
    with engines(gw_tmp, [pair.stable, pair.canary]) as serve_url, analysis_worker(gw_tmp, serve_url):
        settings.RAY_SERVE_URL = serve_url
        route, secret = serve_route(gateway, pair, model_name=MODEL, tenant=tenant, actor=admin_user)
        with Load(gateway, secret, MODEL) as load, Ticker():
            rollout = rollout_create(
                route=route,
                stable=pair.stable,
                canary=pair.canary,
                steps=[
                    {"kind": "set_weight", "weight": 50},
                    {"kind": "analysis", "window_s": 8},
                    {"kind": "set_weight", "weight": 100},
                ],
                checks=[{"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 3}],
                actor=admin_user,
            )
            wait_for(lambda: Rollout.objects.get(pk=rollout.pk).outcome, 90, "the rollout to finish")
            rollout.refresh_from_db()

            # The controller aborted it from the analysis' numbers, not a person.
            assert rollout.outcome == "aborted", rollout.message
            assert "ttft_p95_ms" in rollout.message
            result = rollout.abort_evidence["results"][0]
            assert result["canary"] > result["stable"] * 1.5 and result["canary"] >= EXTRA_TTFT_MS
            assert result["canary_samples"] >= 3
            assert any(slug == pair.canary.slug for _, _, slug in load.seen), "the canary never got traffic"

            # The abort publishes a snapshot with the canary at 0 and the gateway applies it. How fast
            # is a benchmark figure (benchmarks.rollouts); a test on a busy machine waits with a deadline.
            def published_weights() -> dict:
                snap = orjson.loads(r.get(PREFIX + section_key("routes")))
                return {t["deployment_slug"]: t["weight"] for t in snap["routes"][MODEL]["targets"]}

            expected = {pair.stable.slug: 100, pair.canary.slug: 0}
            wait_for(lambda: published_weights() == expected, 60, "the abort's snapshot to be published")
            version = int(r.get(PREFIX + VERSION_KEY))
            wait_for(
                lambda: httpx.get(gateway + "/healthz", timeout=30).json()["snapshot_version"] >= version,
                60,
                "the snapshot",
            )
            applied = time.monotonic()
            wait_for(
                lambda: sum(1 for s, _, _ in load.seen if s > applied) >= 10, 30, "traffic after the abort"
            )
            after = [slug for sent, _, slug in load.seen if sent > applied]
            assert set(after) == {pair.stable.slug}, (
                f"{after.count(pair.canary.slug)} requests went to the canary"
            )
            assert load.errors == 0
    r.close()
