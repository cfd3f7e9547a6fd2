"""Turning a route's semantic cache on or off, and dropping its entries, audited.

Every change is recorded as a ``model_route.cache_*`` audit event, which republishes the routes
section (``deployments.reactions.routes_publish``): the gateways apply it within a second.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.services import audit_record
from deployments.constants import Task
from deployments.models import ModelRoute, RouteCache
from snapshot.contract import cache_target_refusal

MAX_TTL_S = 30 * 86_400
_FIELDS = ("enabled", "ttl_s", "target_error_rate", "verify_share", "embedding_route_id", "generation")


def _state(c: RouteCache) -> dict:
    return {f: getattr(c, f) for f in _FIELDS}


def route_cache_check(
    *, route: ModelRoute, enabled: bool, ttl_s: int, target_error_rate: float, verify_share: float,
    embedding_route: ModelRoute | None,
) -> None:  # fmt: skip
    """Refuse settings that make no sense, each with what to do instead."""
    errors: dict[str, str] = {}
    why = cache_target_refusal(target_error_rate)
    if why:
        errors["target_error_rate"] = why[0].upper() + why[1:] + "."
    if not 0 < verify_share <= 0.5:
        errors["verify_share"] = (
            "The verification share must be above 0 (without samples the error rate cannot be estimated) "
            "and at most 0.5 (more would send most would-be hits to the model)."
        )
    if not 1 <= ttl_s <= MAX_TTL_S:
        errors["ttl_s"] = f"The TTL must be between 1 second and {MAX_TTL_S // 86_400} days."
    if enabled:
        if embedding_route is None:
            errors["embedding_route"] = "Choose the route whose deployments embed the prompts."
        elif embedding_route.pk == route.pk:
            errors["embedding_route"] = "A route cannot embed its own prompts: choose an embedding route."
        elif not embedding_route.targets.filter(
            deployment__task=Task.EMBED, deployment__deleted_at__isnull=True
        ).exists():
            errors["embedding_route"] = (
                f"No deployment of {embedding_route.public_name} serves /v1/embeddings: add an embedding "
                "deployment to it first."
            )
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def route_cache_set(
    *, route: ModelRoute, enabled: bool, ttl_s: int, target_error_rate: float, verify_share: float,
    embedding_route: ModelRoute | None, actor, reason: str = "",
) -> RouteCache:  # fmt: skip
    """Save a route's cache settings (changing nothing when they are refused)."""
    route_cache_check(
        route=route, enabled=enabled, ttl_s=ttl_s, target_error_rate=target_error_rate,
        verify_share=verify_share, embedding_route=embedding_route,
    )  # fmt: skip
    c, _ = RouteCache.objects.select_for_update().get_or_create(route=route)
    before = _state(c)
    c.enabled, c.ttl_s, c.target_error_rate = enabled, ttl_s, target_error_rate
    c.verify_share, c.embedding_route = verify_share, embedding_route
    if before["embedding_route_id"] not in (None, c.embedding_route_id):
        c.generation += 1  # vectors of another encoder: the old entries cannot be compared
    c.save()
    audit_record(
        actor=actor,
        action="model_route.cache_set",
        target=route,
        before=before,
        after=_state(c),
        reason=reason,
    )
    return c


@transaction.atomic
def route_cache_invalidate(*, route: ModelRoute, actor, reason: str) -> RouteCache:
    """Drop every entry of the route's cache (a new system prompt or knowledge base published outside
    what requests name): the gateways key entries by the generation, so none made before is found."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the cache is dropped (what was published)."})
    c, _ = RouteCache.objects.select_for_update().get_or_create(route=route)
    before = _state(c)
    c.generation += 1
    c.save(update_fields=["generation", "updated_at"])
    audit_record(
        actor=actor,
        action="model_route.cache_invalidate",
        target=route,
        before=before,
        after=_state(c),
        reason=reason,
    )
    return c
