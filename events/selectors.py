"""Which reactions follow which kinds (``settings.GOVERNOR_REACTIONS``), and what is waiting."""

from __future__ import annotations

import functools

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from events.models import Delivery


def _registry() -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(
        (pattern, tuple(paths)) for pattern, paths in getattr(settings, "GOVERNOR_REACTIONS", {}).items()
    )


def pattern_matches(pattern: str, kind: str) -> bool:
    """``"*"`` matches every kind, ``"price.*"`` every kind under ``price.``, anything else itself."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return kind.startswith(pattern[:-1])
    return kind == pattern


@functools.lru_cache(maxsize=256)
def _reactions_for(registry: tuple[tuple[str, tuple[str, ...]], ...], kind: str) -> tuple[str, ...]:
    out: list[str] = []
    for pattern, paths in registry:
        if pattern_matches(pattern, kind):
            out.extend(p for p in paths if p not in out)
    return tuple(out)


def reactions_for(kind: str) -> tuple[str, ...]:
    """The dotted paths of the reactions registered for ``kind``, in the order settings list them."""
    return _reactions_for(_registry(), kind)


def reaction_registered(path: str) -> bool:
    return any(path in paths for _, paths in _registry())


def deliveries_summary() -> dict[str, int]:
    """Counts by state, for the ``events`` command and monitoring: pending (due now or later), failed."""
    now = timezone.now()
    row = Delivery.objects.aggregate(
        due=Count("id", filter=Q(status=Delivery.Status.PENDING, next_attempt_at__lte=now)),
        waiting=Count("id", filter=Q(status=Delivery.Status.PENDING, next_attempt_at__gt=now)),
        failed=Count("id", filter=Q(status=Delivery.Status.FAILED)),
    )
    return {k: int(v or 0) for k, v in row.items()}
