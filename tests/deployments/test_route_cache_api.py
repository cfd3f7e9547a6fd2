"""A route's semantic cache over the REST API (``/api/deployments/routes/{id}/cache/``): an admin
reads and sets what the route page shows and edits, nonsense is a 400 naming the field and changes
nothing, dropping needs a reason, an auditor reads but cannot write, a tenant member cannot read."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from audit.selectors import events_for_object
from deployments.models import RouteCache
from deployments.selectors import routing_table
from snapshot.contract import cache_live_key, cache_stats_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def routes(cache_routes):
    return cache_routes


def _url(route, drop: bool = False) -> str:
    return f"/api/deployments/routes/{route.pk}/cache/" + ("drop/" if drop else "")


def _on(emb, **over) -> dict:
    return {"enabled": True, "ttl_s": 600, "target_error_rate": 0.02, "verify_share": 0.05,
            "embedding_route": emb.pk, "reason": "cache the FAQ"} | over  # fmt: skip


def test_an_admin_sets_the_cache_and_reads_it_back_with_its_figures(admin_client, routes):
    chat, emb = routes
    r = admin_client.get(_url(chat))
    assert r.status_code == 200
    assert r.json() | {"encoder": None} == {
        "route": chat.pk, "enabled": False, "ttl_s": 86_400, "target_error_rate": 0.02, "verify_share": 0.05,
        "embedding_route": None, "generation": 0, "encoder": None, "figures": None,
    }  # fmt: skip
    r = admin_client.put(_url(chat), _on(emb), content_type="application/json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["enabled"], body["ttl_s"], body["embedding_route"]) == (True, 600, emb.pk)
    assert routing_table()["chat-c"]["cache"]["embedding_model"] == "emb-c"  # the gateways are told
    event = next(e for e in events_for_object(object_type="deployments.modelroute", object_id=chat.pk)
                 if e.action == "model_route.cache_set")  # fmt: skip
    assert event.reason == "cache the FAQ"
    # The live figures are the gateways' counters, estimated as on the route page.
    client = redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)
    prefix = getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")
    key, live = cache_stats_key(prefix, "chat-c"), cache_live_key(prefix, "chat-c")
    try:
        client.hset(key, mapping={"lookups": 1000, "hits": 570, "verified": 30, "verified_wrong": 1})
        client.zadd(live, {"1": timezone.now().timestamp() + 3600})
        figures = admin_client.get(_url(chat)).json()["figures"]
    finally:
        client.delete(key, live)
        client.close()
    assert figures["available"] is True and (figures["lookups"], figures["hits"], figures["entries"]) == (
        1000,
        570,
        1,
    )
    assert figures["hit_rate"] == 0.57 and figures["counts"]["verified"] == 30
    # 600 of 1000 lookups served or would have been, 1 in 30 of those wrong; the Wilson interval of
    # 1/30 is [0.0059, 0.1667] (z = 1.96), scaled alike: what the route page shows.
    assert figures["error_estimate"] == pytest.approx(0.02)
    assert figures["error_low"] == pytest.approx(0.6 * 0.005907, abs=1e-5)
    assert figures["error_high"] == pytest.approx(0.6 * 0.166709, abs=1e-5)
    assert figures["within_target"] is True


@pytest.mark.parametrize(
    "over,field",
    [
        ({"target_error_rate": 0}, "target_error_rate"),
        ({"target_error_rate": 0.6}, "target_error_rate"),
        ({"verify_share": 0}, "verify_share"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"embedding_route": None}, "embedding_route"),
        ({"embedding_route": 999_999}, "embedding_route"),
        ({"ttl_s": "soon"}, "ttl_s"),
        ({"enabled": "maybe"}, "enabled"),
    ],
)
def test_nonsense_is_a_400_naming_the_field_and_changes_nothing(admin_client, routes, over, field):
    chat, emb = routes
    admin_client.put(_url(chat), _on(emb), content_type="application/json")
    before = routing_table()["chat-c"]["cache"]
    r = admin_client.put(_url(chat), _on(emb, **over), content_type="application/json")
    assert r.status_code == 400 and field in r.json()
    assert routing_table()["chat-c"]["cache"] == before


def test_a_route_cannot_embed_its_own_prompts(admin_client, routes):
    chat, _ = routes
    r = admin_client.put(_url(chat), _on(chat), content_type="application/json")
    assert r.status_code == 400 and "cannot embed its own prompts" in r.json()["embedding_route"][0]
    assert not RouteCache.objects.filter(route=chat).exists()


def test_dropping_every_entry_needs_a_reason_and_bumps_the_generation(admin_client, routes):
    chat, emb = routes
    admin_client.put(_url(chat), _on(emb), content_type="application/json")
    assert (
        admin_client.post(
            _url(chat, drop=True), {"reason": "  "}, content_type="application/json"
        ).status_code
        == 400
    )
    assert routing_table()["chat-c"]["cache"]["generation"] == 0
    r = admin_client.post(_url(chat, drop=True), {"reason": "handbook v8"}, content_type="application/json")
    assert r.status_code == 200 and r.json()["generation"] == 1
    assert routing_table()["chat-c"]["cache"]["generation"] == 1


def test_an_auditor_reads_but_cannot_write_and_a_tenant_member_cannot_read(
    auditor_client, member_client, routes
):
    chat, emb = routes
    assert auditor_client.get(_url(chat)).status_code == 200
    assert auditor_client.put(_url(chat), _on(emb), content_type="application/json").status_code == 403
    assert (
        auditor_client.post(
            _url(chat, drop=True), {"reason": "x"}, content_type="application/json"
        ).status_code
        == 403
    )
    assert member_client.get(_url(chat)).status_code == 403
    assert not RouteCache.objects.filter(route=chat).exists()


def test_an_unknown_route_is_a_404(admin_client):
    assert admin_client.get("/api/deployments/routes/999999/cache/").status_code == 404
