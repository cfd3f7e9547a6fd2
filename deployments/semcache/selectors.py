"""What the route page shows of a route's semantic cache: its settings, and what the gateways counted.

The gateways add their counters to a Redis hash per route once a second and keep a sorted set of the
route's live entries (``gateway.semcache.store``; the names are in ``snapshot.contract``). The error rate is estimated from the verification
samples: of the would-be hits sent to the model anyway, the share whose answer differed, times the
share of lookups answered from the cache (vCache's error rate: wrong answers over requests). Its
interval is the samples' Wilson interval, scaled the same way.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings

from deployments.constants import EngineKind, Task
from deployments.models import ModelRoute, RouteCache
from engines.textvec import NAME as LIGHT_ENCODER
from evalkit.stats import wilson
from snapshot.contract import CACHE_STATS_FIELDS, cache_live_key, cache_stats_key


def route_cache_settings(*, route: ModelRoute) -> RouteCache | None:
    return RouteCache.objects.filter(route=route).select_related("embedding_route").first()


def embedding_routes() -> list[ModelRoute]:
    """Routes with a live deployment that serves /v1/embeddings (what a cache may embed with)."""
    return list(
        ModelRoute.objects.filter(
            rehearsal=False,
            targets__deployment__task=Task.EMBED,
            targets__deployment__deleted_at__isnull=True,
        )
        .distinct()
        .order_by("public_name")
    )


def encoder_label(route: ModelRoute | None) -> str:
    """What embeds the prompts: the light encoder is said to be one (a simulated engine serves it)."""
    if route is None:
        return "none"
    kinds = set(
        route.targets.filter(deployment__deleted_at__isnull=True).values_list(
            "deployment__engine_kind", flat=True
        )
    )
    if kinds == {EngineKind.SIMULATED}:
        return f"{route.public_name}: {LIGHT_ENCODER}"
    return f"{route.public_name}: embedding model on {', '.join(sorted(kinds)) or 'no deployment'}"


def _counters(route: ModelRoute) -> tuple[dict[str, int], int] | None:
    prefix = getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")
    client = redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)
    try:
        raw = client.hgetall(cache_stats_key(prefix, route.public_name))
        live = client.zcount(cache_live_key(prefix, route.public_name), time.time(), "+inf")
    except redis.RedisError:
        return None
    finally:
        client.close()
    counts = {f: 0 for f in CACHE_STATS_FIELDS}
    for k, v in raw.items():
        counts[k.decode()] = int(v)
    return counts, int(live)


def route_cache_report(*, route: ModelRoute) -> dict | None:
    """The cache section of the route page, or None when the route never had one."""
    c = route_cache_settings(route=route)
    if c is None:
        return None
    got = _counters(route)
    report = {
        "settings": c,
        "encoder": encoder_label(c.embedding_route),
        "available": got is not None,
    }
    if got is None:
        return report
    counts, live = got
    lookups = counts["lookups"]
    hit_rate = counts["hits"] / lookups if lookups else None
    verified, wrong = counts["verified"], counts["verified_wrong"]
    served_share = (counts["hits"] + verified) / lookups if lookups else 0.0
    est = lo = hi = None
    if verified:
        w_lo, w_hi = wilson(wrong, verified)
        est, lo, hi = served_share * wrong / verified, served_share * w_lo, served_share * w_hi
    report |= {
        "counts": counts,
        "entries": live,
        "hit_rate": hit_rate,
        "error_estimate": est,
        "error_low": lo,
        "error_high": hi,
        "within_target": None if hi is None else lo <= c.target_error_rate,
    }
    return report
