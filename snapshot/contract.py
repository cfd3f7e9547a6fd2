"""The configuration snapshot: what the console publishes and every gateway serves from memory.

Contract (JSON; ``snapshot.publish`` writes it in three sections: ``tenancy`` built by
``billing.services.gateway_config``, ``routes`` built by ``deployments.services`` and ``routers``
built by ``evaluations.services.routing``)::

    {"version": int, "generated_at": float,
     "keys": {sha256_hex: {"id", "prefix", "tenant_id", "models": [..] | null,
                           "expires_at": epoch | null, "revoked": bool, "rpm": int, "tpm": int,
                           "class": "interactive"|"standard"|"sheddable"}},  # absent: standard
     "tenants": {"<id>": {"slug", "rpm", "tpm", "max_input_tokens", "max_output_tokens",
                          "budget": null | {"period": "monthly"|"weekly"|"daily", "amount_nanos",
                                            "hard_cap_nanos": int | null, "soft_percents": [..],
                                            "spent_period_key", "spent_nanos"},
                          # voting samples a month (0: no limit) and this month's spend; absent: none
                          "vote": {"samples_per_month", "period_key", "spent"}}},
     "routes": {public_name: {"long_context_threshold": int | null,
                              "tenant_ids": [int, ..] | null,   # null or absent: every tenant
                              "free": bool,   # served at $0 on purpose; absent: false
                              "voting": "off" | "field" | "n",   # docs/voting.md; absent: off
                              # the semantic cache (docs/semantic-cache.md); null or absent: off
                              "cache": {"ttl_s", "target_error", "verify_share", "embedding_model",
                                        "generation"} | null,
                              "targets": [{"deployment_id", "deployment_slug", "version_id",
                                           "base_url", "engine_model", "weight", "pool", "status",
                                           "tokens_per_image": int | null,  # null: unknown
                                           "task": "generate" | "embed",   # absent: generate
                                           "max_model_len": int | null,
                                           "max_inflight": int | null}]}},  # null/absent: no limit
     "routers": {public_name: {"policy_id", "number", "cheap_version_id", "strong_version_id",
                               "threshold", "model": {"features", "mean", "scale", "coef",
                                                      "intercept", "spec_version"}}},
     "prices": {public_name: {"price_id", "input_nanos", "output_nanos"}},
     "batch_prices": {public_name: {"price_id", "input_nanos", "output_nanos"}},  # absent: none
     "cache_prices": {public_name: {"price_id", "input_nanos", "output_nanos"}}}  # absent: none

``routers`` (section ``routers``, built by ``evaluations.services.routing``) carry a route's active
router policy: the gateway scores the request's text with ``model`` (``evalkit.router``) and sends it
to the targets of ``cheap_version_id`` when the probability is at least ``threshold``, else to
``strong_version_id``'s (docs/routing.md, ADR 0040).

``batch_prices`` are what batch lines are billed at (docs/decisions/0036); a model without one bills
its batch lines at its online price. ``cache_prices`` are what an answer from the semantic cache is
billed at (docs/decisions/0042); a model without one bills cache hits at its online price.

Limits of 0 mean "no limit". A target's ``tokens_per_image`` is the catalog's bound for its model;
a route holds budget for the largest of its targets' (unknown counts as ``DEFAULT_TOKENS_PER_IMAGE``),
since the hold is taken before a target is picked. ``version`` is the counter ``snapshot.publish``
increments on every section publish; gateways reload all sections when it moves (pub/sub, and
polling as the fallback).

Beside the snapshot, the console and the gateways share more Redis names, kept here so that
neither side imports the other: a tenant's budget hash for a period (``budget_hash_key``, with
``period_key``), the list the gateway pushes budget alerts onto (``ALERTS_LIST``), and a route's
semantic cache counters and live entries (``cache_stats_key``, ``cache_live_key``). This module
is Django-free and imports nothing of the project but ``snapshot.publish``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import random
from dataclasses import dataclass

import orjson

from snapshot.publish import CHANNEL, SECTIONS, VERSION_KEY, section_key

# An image or audio part's tokens depend on the model's encoder, not on its bytes: the catalog gives a
# bound per model (``Model.max_tokens_per_image``, carried in each route); a route that does not say
# holds this many. 16,384 is the most a common open vision encoder counts for one image (Qwen2-VL's
# default ``max_pixels`` of 12,845,056 at 28x28 pixels per merged token); a lower default would let
# an image-heavy request spend past the hard cap, a higher one only refuses earlier near it.
DEFAULT_TOKENS_PER_IMAGE = 16_384

ALERTS_LIST = "budget_alerts"

# Traffic classes, most important first (docs/decisions/0035). A key's class is the highest its
# requests may ask for and the one they get by default; a request may lower its own, never raise it.
# Admission control sheds the last first and never refuses an interactive request while it admits
# a lower class.
TRAFFIC_CLASSES = ("interactive", "standard", "sheddable")
CLASS_RANK = {c: i for i, c in enumerate(TRAFFIC_CLASSES)}
DEFAULT_CLASS = "standard"
# OpenAI's ``service_tier`` request values, as classes: "priority" asks for faster service, "flex"
# for cheaper, slower service that may be refused under load; "auto" and "default" take the key's.
SERVICE_TIERS = {"priority": "interactive", "default": None, "auto": None, "flex": "sheddable"}


# How a route takes votes (docs/voting.md): not at all, through the ``governor.vote`` field, or
# through that field and OpenAI's ``n`` (above 1: the vote's budget of samples).
VOTING_MODES = ("off", "field", "n")


def lower_class(a: str, b: str) -> str:
    """The less important of two classes."""
    return a if CLASS_RANK[a] >= CLASS_RANK[b] else b


def budget_hash_key(prefix: str, tenant_id: int, period_key: str) -> str:
    """The Redis hash of a tenant's period: ``spent`` and ``held`` (nano-dollars) and ``refused_at``
    (epoch second of the first refusal at the hard cap). The console reads it to agree with the gateway."""
    return f"{prefix}budget:{tenant_id}:{period_key}"


def period_key(period: str, now: float) -> tuple[str, float]:
    """The budget period containing ``now`` (UTC) and the epoch second it ends."""
    d = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    if period == "daily":
        start = d.replace(hour=0, minute=0, second=0, microsecond=0)
        return f"d{start:%Y-%m-%d}", (start + dt.timedelta(days=1)).timestamp()
    if period == "weekly":
        start = (d - dt.timedelta(days=d.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
        return f"w{start:%Y-%m-%d}", (start + dt.timedelta(days=7)).timestamp()
    start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start + dt.timedelta(days=32)).replace(day=1)
    return f"m{start:%Y-%m}", nxt.timestamp()


@dataclass(slots=True)
class KeyInfo:
    """One API key as the gateway sees it."""

    id: int
    prefix: str
    tenant_id: int
    models: frozenset[str] | None
    expires_at: float | None
    revoked: bool
    rpm: int
    tpm: int
    traffic_class: str = DEFAULT_CLASS


@dataclass(slots=True)
class BudgetInfo:
    """A tenant's budget for the current period."""

    period: str
    amount_nanos: int
    hard_cap_nanos: int | None
    soft_percents: list[int]
    spent_period_key: str
    spent_nanos: int


@dataclass(slots=True)
class TenantInfo:
    """A tenant's limits and budget."""

    id: int
    slug: str
    rpm: int
    tpm: int
    max_input_tokens: int
    max_output_tokens: int
    budget: BudgetInfo | None
    # Voting samples the tenant may spend a calendar month (0: no limit), and what Postgres had
    # recorded for ``vote_period_key`` when the snapshot was built (seeds the gateway's counter).
    vote_samples_per_month: int = 0
    vote_period_key: str = ""
    vote_spent: int = 0


@dataclass(slots=True)
class Target:
    """One deployment behind a public model name."""

    deployment_id: int
    slug: str
    version_id: int | None
    base_url: str
    engine_model: str
    weight: float
    pool: str
    status: str
    chat_url: str = ""
    completions_url: str = ""
    # "generate" (chat, completions, responses) or "embed" (embeddings).
    task: str = "generate"
    max_model_len: int | None = None
    # Requests the gateways may send it at once (admission control); None: no limit.
    max_inflight: int | None = None


@dataclass(slots=True)
class RouterSpec:
    """A route's active router policy, as published (the gateway builds its model once per version)."""

    policy_id: int
    number: int
    cheap_version_id: int
    strong_version_id: int
    threshold: float
    model: dict


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """A route's semantic cache (docs/semantic-cache.md): entries live ``ttl_s`` seconds; the error
    rate aimed at; the share of would-be hits still sent to the model and compared; the route whose
    deployments embed the prompts; and a generation the console bumps to drop every entry at once."""

    ttl_s: int
    target_error: float
    verify_share: float
    embedding_model: str
    generation: int = 0


def cache_target_refusal(target: object) -> str | None:
    """Why a target error rate makes no sense, or None (the console's form and the gateway's policy
    both ask). 0 would never serve a cached answer (any neighbour may be wrong); above 50 % guessing
    does better than the cache."""
    if isinstance(target, bool) or not isinstance(target, int | float) or not math.isfinite(target):
        return "the target error rate must be a number above 0 and at most 0.5 (e.g. 0.02 for 2 %)"
    if target <= 0:
        return "a target error rate of 0 would never serve a cached answer; use a small positive rate (e.g. 0.01)"
    if target > 0.5:
        return "a target error rate above 50 % is worse than guessing; use a rate above 0 and at most 0.5"
    return None


# What the gateways count of a route's cache (a Redis hash per route, added to once a second) and the
# sorted set of its live entries by expiry: the route page reads both.
CACHE_STATS_FIELDS = (
    "lookups",  # requests on the route that looked in the cache
    "hits",  # answered from the cache
    "skipped",  # the request asked not to use the cache
    "fallbacks",  # the cache or the embedding deployment failed: sent to the model
    "explored",  # a neighbour was found but not served: the model answered, and was compared
    "explored_wrong",
    "verified",  # would have been served, sent to the model to check
    "verified_wrong",
    "inserted",
)


def cache_stats_key(prefix: str, route: str) -> str:
    return f"{prefix}sc:stats:{route}"


def cache_live_key(prefix: str, route: str) -> str:
    return f"{prefix}sc:live:{route}"


def cache_settings(raw: object) -> CacheSettings | None:
    """A route's ``cache`` as published; None (off) for null or anything malformed."""
    if not isinstance(raw, dict):
        return None
    try:
        return CacheSettings(
            ttl_s=int(raw["ttl_s"]),
            target_error=float(raw["target_error"]),
            verify_share=float(raw.get("verify_share", 0.05)),
            embedding_model=str(raw["embedding_model"]),
            generation=int(raw.get("generation") or 0),
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(slots=True)
class Route:
    """A public model name and its weighted targets."""

    name: str
    long_context_threshold: int | None
    targets: list[Target]
    # The tenants that may use this name; None when every tenant may.
    tenant_ids: frozenset[int] | None = None
    # Tokens one image may count on any of the targets (the budget hold's allowance per image).
    tokens_per_image: int = DEFAULT_TOKENS_PER_IMAGE
    # An admin marked it free (served at $0 on purpose); otherwise no price refuses budgets.
    free: bool = False
    # Its active router policy (routing by difficulty), if it has one.
    router: RouterSpec | None = None
    # Voting (docs/voting.md): "off", "field" (the ``governor.vote`` field) or "n" (that, and ``n``
    # above 1 is a vote's budget of samples).
    voting: str = "off"
    # The semantic cache, when an admin turned it on for this route.
    cache: CacheSettings | None = None


@dataclass(slots=True)
class Price:
    """Price in force for a public model, in nano-dollars per token."""

    price_id: int | None
    input_nanos: int
    output_nanos: int


@dataclass(slots=True)
class Snapshot:
    """Everything a gateway needs to answer a request without SQL."""

    version: int
    generated_at: float
    keys: dict[str, KeyInfo]
    tenants: dict[int, TenantInfo]
    routes: dict[str, Route]
    prices: dict[str, Price]
    batch_prices: dict[str, Price] = dataclasses.field(default_factory=dict)
    cache_prices: dict[str, Price] = dataclasses.field(default_factory=dict)
    # Keys by id, for batch lines (which name their key by id): built on first use, per snapshot.
    _keys_by_id: dict[int, KeyInfo] | None = None

    def key_by_id(self, key_id: int) -> KeyInfo | None:
        if self._keys_by_id is None:
            self._keys_by_id = {k.id: k for k in self.keys.values()}
        return self._keys_by_id.get(key_id)


def empty_snapshot() -> Snapshot:
    return Snapshot(version=0, generated_at=0.0, keys={}, tenants={}, routes={}, prices={})


def parse_snapshot(raw: bytes | str) -> Snapshot:
    """Turn the published JSON into lookup-friendly objects (done once per version, not per request)."""
    data = orjson.loads(raw)
    keys = {
        h: KeyInfo(
            id=int(k["id"]),
            prefix=k.get("prefix", ""),
            tenant_id=int(k["tenant_id"]),
            models=frozenset(k["models"]) if k.get("models") else None,
            expires_at=k.get("expires_at"),
            revoked=bool(k.get("revoked")),
            rpm=int(k.get("rpm") or 0),
            tpm=int(k.get("tpm") or 0),
            traffic_class=k.get("class") if k.get("class") in CLASS_RANK else DEFAULT_CLASS,
        )
        for h, k in data.get("keys", {}).items()
    }
    tenants = {}
    for tid, t in data.get("tenants", {}).items():
        b = t.get("budget")
        budget = None
        if b:
            budget = BudgetInfo(
                period=b.get("period", "monthly"),
                amount_nanos=int(b["amount_nanos"]),
                hard_cap_nanos=None if b.get("hard_cap_nanos") is None else int(b["hard_cap_nanos"]),
                soft_percents=[int(x) for x in b.get("soft_percents", [])],
                spent_period_key=b.get("spent_period_key", ""),
                spent_nanos=int(b.get("spent_nanos") or 0),
            )
        vote = t.get("vote") or {}
        tenants[int(tid)] = TenantInfo(
            id=int(tid),
            slug=t.get("slug", ""),
            rpm=int(t.get("rpm") or 0),
            tpm=int(t.get("tpm") or 0),
            max_input_tokens=int(t.get("max_input_tokens") or 0),
            max_output_tokens=int(t.get("max_output_tokens") or 0),
            budget=budget,
            vote_samples_per_month=int(vote.get("samples_per_month") or 0),
            vote_period_key=vote.get("period_key") or "",
            vote_spent=int(vote.get("spent") or 0),
        )
    routes = {}
    for name, r in data.get("routes", {}).items():
        targets = []
        per_image = []
        for x in r.get("targets", []):
            tpi = x.get("tokens_per_image")
            per_image.append(int(tpi) if tpi else DEFAULT_TOKENS_PER_IMAGE)
            base = x["base_url"].rstrip("/")
            targets.append(
                Target(
                    deployment_id=int(x["deployment_id"]),
                    slug=x.get("deployment_slug", ""),
                    version_id=x.get("version_id"),
                    base_url=base,
                    engine_model=x.get("engine_model") or name,
                    weight=float(x.get("weight") or 0),
                    pool=x.get("pool") or "online",
                    status=x.get("status") or "RUNNING",
                    chat_url=base + "/chat/completions",
                    completions_url=base + "/completions",
                    task=x.get("task") or "generate",
                    max_model_len=x.get("max_model_len"),
                    max_inflight=int(x["max_inflight"]) if x.get("max_inflight") else None,
                )
            )
        tids = r.get("tenant_ids")
        route = Route(
            name=name,
            long_context_threshold=r.get("long_context_threshold"),
            targets=targets,
            tenant_ids=frozenset(int(t) for t in tids) if tids else None,
            tokens_per_image=max(per_image, default=DEFAULT_TOKENS_PER_IMAGE),
            free=bool(r.get("free")),
            voting=r.get("voting") if r.get("voting") in VOTING_MODES else "off",
            cache=cache_settings(r.get("cache")),
        )
        routes[name] = route
    for name, spec in (data.get("routers") or {}).items():
        if name in routes:
            routes[name].router = RouterSpec(
                policy_id=int(spec["policy_id"]),
                number=int(spec["number"]),
                cheap_version_id=int(spec["cheap_version_id"]),
                strong_version_id=int(spec["strong_version_id"]),
                threshold=float(spec["threshold"]),
                model=dict(spec["model"]),
            )
    prices, batch_prices, cache_prices = (
        {
            name: Price(
                price_id=p.get("price_id"),
                input_nanos=int(p["input_nanos"]),
                output_nanos=int(p["output_nanos"]),
            )
            for name, p in (data.get(section) or {}).items()
        }
        for section in ("prices", "batch_prices", "cache_prices")
    )
    return Snapshot(
        version=int(data.get("version", 0)),
        generated_at=float(data.get("generated_at", 0)),
        keys=keys,
        tenants=tenants,
        routes=routes,
        prices=prices,
        batch_prices=batch_prices,
        cache_prices=cache_prices,
    )


class SnapshotHolder:
    """Holds the current snapshot and keeps it fresh: pub/sub for speed, polling as the fallback."""

    def __init__(self, redis, prefix: str, poll_s: float) -> None:
        self.redis = redis
        self.prefix = prefix
        self.poll_s = poll_s
        self.current = empty_snapshot()
        self._stopping = False

    async def refresh(self) -> bool:
        """Load the published snapshot if its version is newer; True when it changed."""
        version = await self.redis.get(self.prefix + VERSION_KEY)
        if version is None or int(version) == self.current.version:
            return False
        raws = await self.redis.mget([self.prefix + section_key(s) for s in SECTIONS])
        merged: dict = {}
        generated_at = 0.0
        for raw in raws:
            if raw is not None:
                section = orjson.loads(raw)
                generated_at = max(generated_at, float(section.pop("generated_at", 0) or 0))
                merged.update(section)
        if not merged:
            return False
        merged["version"] = int(version)
        merged["generated_at"] = generated_at
        # Any version other than ours is newer: the counter only moves forward.
        self.current = parse_snapshot(orjson.dumps(merged))
        return True

    async def run_poll(self) -> None:
        """Poll the version key; survives Redis outages (keeps serving the last snapshot)."""
        import asyncio

        while not self._stopping:
            # Redis blips must not kill the loop: keep serving the last snapshot.
            with contextlib.suppress(Exception):
                await self.refresh()
            # Jitter so N gateway processes do not poll in lockstep.
            await asyncio.sleep(self.poll_s * (0.8 + 0.4 * random.random()))

    async def run_subscribe(self) -> None:
        """Apply a new snapshot as soon as the console announces it."""
        import asyncio

        while not self._stopping:
            try:
                pubsub = self.redis.pubsub()
                await pubsub.subscribe(self.prefix + CHANNEL)
                async for msg in pubsub.listen():
                    if msg.get("type") == "message":
                        await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        self._stopping = True
