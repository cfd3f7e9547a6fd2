"""Metered requests that a rehearsal's simulated engines produced (``operations.rehearsals``).

They are written as the gateway's shipper writes real ones, so that the SLOs, incidents and
diagnosis read them unchanged; they cost nothing and carry ``gateway="rehearsal"`` so that they can
be told apart (and are, on the usage pages, by that column).
"""

from __future__ import annotations

import uuid

from billing.models import UsageEvent

REHEARSAL_GATEWAY = "rehearsal"


def usage_rehearsal_record(*, rows: list[dict]) -> int:
    """``rows``: dicts with ``at`` (a datetime), ``tenant_id``, ``public_model``, ``deployment_id``,
    ``deployment_slug``, token counts, ``ttft_ms``, ``tpot_ms``, ``status`` and ``http_status``."""
    events = [
        UsageEvent(
            event_id=uuid.uuid4(),
            tenant_id=r["tenant_id"],
            public_model=r["public_model"],
            deployment_id=r.get("deployment_id"),
            deployment_slug=r.get("deployment_slug", ""),
            prompt_tokens=r["prompt_tokens"],
            completion_tokens=r["completion_tokens"],
            cached_tokens=r.get("cached_tokens", 0),
            cost_nanos=0,
            ttft_ms=r.get("ttft_ms"),
            tpot_ms=r.get("tpot_ms"),
            status=r["status"],
            http_status=r["http_status"],
            stream=True,
            started_at=r["at"],
            finished_at=r["at"],
            received_at=r["at"],
            gateway=REHEARSAL_GATEWAY,
        )  # fmt: skip
        for r in rows
    ]
    UsageEvent.objects.bulk_create(events, batch_size=2000)
    return len(events)
