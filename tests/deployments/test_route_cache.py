"""The semantic cache in the console (docs/semantic-cache.md, ADR 0042): an admin turns it on for a
route with a TTL, a target error rate and an embedding route; settings that make no sense are
refused with a clear message and change nothing; the gateways are told (the routes section); dropping
every entry bumps the generation the gateways key entries by; the route page shows the hit rate and
the estimated error rate with its interval next to the target; a cache price is published like any
price and reaches the gateways; the tenant's cost page shows the money the cache saved."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
import redis
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from audit.selectors import events_for_object
from billing.models import Price, UsageEvent
from billing.services.gateway_config import tenancy_section_build
from deployments.models import RouteCache
from deployments.selectors import routing_table
from snapshot.contract import cache_live_key, cache_stats_key, parse_snapshot
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

pytestmark = pytest.mark.django_db

OK = {"enabled": "on", "ttl_s": "3600", "target_error_rate": "0.02", "verify_share": "0.05"}


@pytest.fixture
def routes(cache_routes):
    return cache_routes


def _post(client, route, **data):
    return client.post(reverse("deployments:route_cache", args=[route.pk]), data, follow=True)


def test_an_admin_turns_the_cache_on_and_the_gateways_are_told(admin_client, routes):
    chat, emb = routes
    assert routing_table()["chat-c"]["cache"] is None  # off by default
    page = admin_client.get(chat.get_absolute_url()).content.decode()
    assert 'id="route-cache-form"' in page and "emb-c" in page  # the embedding route is offered
    r = _post(admin_client, chat, **OK, embedding_route=emb.pk)
    assert r.status_code == 200 and "Cache on." in r.content.decode()
    spec = routing_table()["chat-c"]["cache"]
    assert spec == {"ttl_s": 3600, "target_error": 0.02, "verify_share": 0.05, "embedding_model": "emb-c",
                    "generation": 0}  # fmt: skip
    snap = parse_snapshot(json.dumps({"routes": routing_table()}))
    assert snap.routes["chat-c"].cache.embedding_model == "emb-c"
    assert any(e.action == "model_route.cache_set" for e in events_for_object(
        object_type="deployments.modelroute", object_id=chat.pk))  # fmt: skip
    # The light encoder of the simulated engines is labelled as what it is.
    page = admin_client.get(chat.get_absolute_url()).content.decode()
    assert "light hashed n-gram encoder" in page
    # Dropping every entry: a new generation, which the gateways key entries by.
    r = admin_client.post(reverse("deployments:route_cache_drop", args=[chat.pk]), {"reason": "new KB"})
    assert r.status_code == 302 and routing_table()["chat-c"]["cache"]["generation"] == 1
    # Off again: the gateways stop using it.
    _post(
        admin_client,
        chat,
        ttl_s="3600",
        target_error_rate="0.02",
        verify_share="0.05",
        embedding_route=emb.pk,
    )
    assert routing_table()["chat-c"]["cache"] is None


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("target_error_rate", "0", "would never serve"),
        ("target_error_rate", "0.6", "worse than guessing"),
        ("target_error_rate", "-0.1", "would never serve"),
        ("target_error_rate", "nan", "target error rate"),
        ("verify_share", "0", "verification share"),
        ("verify_share", "0.9", "verification share"),
        ("ttl_s", "0", "ttl"),
        ("ttl_s", "99999999", "TTL"),
        ("embedding_route", "", "embedding route"),
    ],
)
def test_settings_that_make_no_sense_are_refused_and_change_nothing(admin_client, routes, field, value, says):
    chat, emb = routes
    _post(admin_client, chat, **OK, embedding_route=emb.pk)
    before = routing_table()["chat-c"]["cache"]
    data = OK | {"embedding_route": emb.pk, field: value}
    r = _post(admin_client, chat, **data)
    html = r.content.decode()
    assert r.status_code == 200 and "Cache settings refused" in html and says.lower() in html.lower()
    assert routing_table()["chat-c"]["cache"] == before


def test_a_route_that_does_not_embed_cannot_be_the_embedding_route(admin_client, routes):
    from deployments.semcache.services import route_cache_set

    chat, _ = routes
    other = RouteTargetFactory(
        deployment=DeploymentFactory(status="RUNNING"), route__public_name="gen-c"
    ).route
    with pytest.raises(Exception, match="serves /v1/embeddings"):
        route_cache_set(route=chat, enabled=True, ttl_s=60, target_error_rate=0.02, verify_share=0.05,
                        embedding_route=other, actor=None)  # fmt: skip
    assert not RouteCache.objects.filter(route=chat).exists()


def test_the_route_page_shows_the_hit_rate_and_the_estimated_error_next_to_the_target(admin_client, routes):
    chat, emb = routes
    _post(admin_client, chat, **OK, embedding_route=emb.pk)
    client = redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)
    prefix = getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")
    key, live = cache_stats_key(prefix, "chat-c"), cache_live_key(prefix, "chat-c")
    try:
        client.hset(key, mapping={"lookups": 1000, "hits": 570, "verified": 30, "verified_wrong": 1})
        far = timezone.now().timestamp() + 3600
        client.zadd(live, {"1": far, "2": far, "3": 1.0})  # one expired
        html = admin_client.get(chat.get_absolute_url()).content.decode()
    finally:
        client.delete(key, live)
        client.close()
    assert 'id="route-cache-figures"' in html
    assert '<td class="num hit-rate">0.570</td>' in html
    assert '<td class="num entries">2</td>' in html
    # (570 + 30) / 1000 of lookups served (or would have been), 1 in 30 of those wrong: 0.0200, with
    # the 95 % Wilson interval of 1/30, [0.0059, 0.1667], scaled the same way.
    assert ">0.0200 <" in html and "[0.0035, 0.1000]" in html
    assert '<td class="num target">0.0200' in html


def test_a_cache_price_is_published_like_any_price_and_reaches_the_gateways(admin_client, routes):
    data = {
        "public_model": "chat-c",
        "kind": "cache",
        "input_per_million": "0.1",
        "output_per_million": "0.2",
    }
    r = admin_client.post(reverse("billing:price_create"), data)
    assert r.status_code in (200, 302)
    p = Price.objects.get(public_model="chat-c")
    assert p.kind == "cache"
    section = tenancy_section_build()
    assert section["cache_prices"]["chat-c"] == {"price_id": p.pk, "input_nanos": 100, "output_nanos": 200}
    assert "chat-c" not in section["prices"]  # a cache price is not the online price
    page = admin_client.get(reverse("billing:price_list")).content.decode()
    assert "kind-cache" in page


def test_the_tenants_cost_page_shows_the_money_the_cache_saved(member_client, tenant):
    at = timezone.now() - dt.timedelta(hours=1)

    def event(**kw):
        return UsageEvent.objects.create(
            event_id=uuid.uuid4(), tenant=tenant, public_model="chat-c", prompt_tokens=10, completion_tokens=5,
            status="ok", http_status=200, started_at=at, finished_at=at, received_at=at, **kw,
        )  # fmt: skip

    event(cost_nanos=20_000)  # from the model: nothing saved
    event(cost_nanos=2_000, cache_hit=True, saved_nanos=18_000_000)
    event(cost_nanos=2_000, cache_hit=True, saved_nanos=18_000_000)
    html = member_client.get(reverse("billing:tenant_cost", args=[tenant.slug])).content.decode()
    assert 'id="cache-saved"' in html
    assert "2 requests answered from the cache (30 tokens" in html
    assert "$0.0360 saved" in html
    # The usage page says which requests the cache answered.
    usage = member_client.get(reverse("billing:usage")).content.decode()
    assert usage.count('class="badge text-bg-info cache-hit"') == 2


def test_a_tenant_without_hits_sees_no_cache_section(member_client, tenant):
    html = member_client.get(reverse("billing:tenant_cost", args=[tenant.slug])).content.decode()
    assert 'id="cache-saved"' not in html
