"""Routing by difficulty through the whole in-process gateway (ADR 0040): a route's router policy,
published in the snapshot's ``routers`` section, sends easy requests to the cheap version's
deployment and hard ones to the strong version's, says so in headers, and the usage event records
the version that answered."""

from __future__ import annotations

import numpy as np
import orjson

from evalkit import builtin, router
from snapshot.contract import parse_snapshot
from tests.gateway.inproc import chat, snapshot, target

CHEAP, STRONG = 11, 22


def _policy(threshold: float = 0.5, **over) -> dict:
    """A router trained on the graded suite: the cheap version is right on sums, wrong on products."""
    texts = [
        router.request_text(c.chat_messages()) for c in builtin.generate("arithmetic_graded", seed=9, n=300)
    ]
    y = np.array([0.0 if "*" in t else 1.0 for t in texts])
    model = router.fit(np.array([router.features(t) for t in texts]), y)
    return {
        "policy_id": 5,
        "number": 1,
        "cheap_version_id": CHEAP,
        "strong_version_id": STRONG,
        "threshold": threshold,
        "model": model.to_dict(),
    } | over


def _install(inproc, *, policy: dict | None, strong_status: str = "RUNNING", cheap_status: str = "RUNNING"):
    routes = {
        "m": {
            "targets": [
                target(1, inproc.engine.url, version_id=CHEAP, status=cheap_status),
                target(2, inproc.engine_b.url, version_id=STRONG, status=strong_status),
            ]
        }
    }
    base = snapshot(routes=routes, prices={"m": {"price_id": 3, "input_nanos": 1000, "output_nanos": 2000}})
    # The published form: the routes section and the routers section merged, as SnapshotHolder does.
    data = {
        "version": 2,
        "generated_at": 0,
        "keys": {h: {"id": k.id, "tenant_id": k.tenant_id, "models": None} for h, k in base.keys.items()},
        "tenants": {"1": {"slug": "t1"}},
        "routes": routes,
        "routers": {"m": policy} if policy else {},
        "prices": {"m": {"price_id": 3, "input_nanos": 1000, "output_nanos": 2000}},
    }
    inproc.gw.snapshots.current = parse_snapshot(orjson.dumps(data))


def _ask(question: str) -> dict:
    return chat(messages=[{"role": "user", "content": question}])


async def test_easy_requests_go_to_the_cheap_version_and_hard_ones_to_the_strong_one(inproc):
    _install(inproc, policy=_policy())
    easy = await inproc.post(_ask("What is 3 + 4?"))
    hard = await inproc.post(_ask("What is 47 * 85?"))
    assert easy.status == 200 and hard.status == 200
    assert easy.headers["x-governor-routed"] == "cheap" and easy.headers["x-governor-deployment"] == "dep-1"
    assert hard.headers["x-governor-routed"] == "strong" and hard.headers["x-governor-deployment"] == "dep-2"
    assert easy.headers["x-governor-route-reason"].startswith("p_cheap=")
    assert ">=0.500" in easy.headers["x-governor-route-reason"]
    assert "<0.500" in hard.headers["x-governor-route-reason"]
    assert [b["messages"][0]["content"] for _, b in inproc.engine.requests] == ["What is 3 + 4?"]
    assert [b["messages"][0]["content"] for _, b in inproc.engine_b.requests] == ["What is 47 * 85?"]
    # Which version answered is in the usage event, as for any request.
    assert sorted(e["version_id"] for e in inproc.events()) == [CHEAP, STRONG]


async def test_the_threshold_decides_and_a_route_without_a_policy_says_nothing(inproc):
    _install(inproc, policy=_policy(threshold=1.000001))  # nothing reaches it: all strong
    easy = await inproc.post(_ask("What is 3 + 4?"))
    assert easy.headers["x-governor-routed"] == "strong" and not inproc.engine.requests
    _install(inproc, policy=None)
    plain = await inproc.post(_ask("What is 3 + 4?"))
    assert plain.status == 200 and "x-governor-routed" not in plain.headers


async def test_an_unhealthy_side_hands_over_to_the_other_and_the_reason_says_so(inproc):
    _install(inproc, policy=_policy(), cheap_status="DEPLOY_FAILED")
    easy = await inproc.post(_ask("What is 3 + 4?"))
    assert easy.status == 200 and easy.headers["x-governor-routed"] == "strong"
    assert "no healthy cheap deployment" in easy.headers["x-governor-route-reason"]
    assert len(inproc.engine_b.requests) == 1 and not inproc.engine.requests


async def test_a_policy_this_build_cannot_read_routes_as_usual_and_never_fails_the_request(inproc):
    bad = _policy(policy_id=6)
    bad["model"] = bad["model"] | {"features": ["something_else"]}
    _install(inproc, policy=bad)
    answer = await inproc.post(_ask("What is 3 + 4?"))
    assert answer.status == 200
    assert answer.headers["x-governor-routed"] == "default"
    assert answer.headers["x-governor-route-reason"] == "router_unusable"
