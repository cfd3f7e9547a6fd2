"""Price versions per public model."""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from audit.services import audit_save
from billing.models import (
    Price,
)
from billing.services.gateway_config import tenancy_section_publish_on_commit

log = logging.getLogger(__name__)


@transaction.atomic
def price_set(
    *,
    public_model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    actor,
    effective_from: dt.datetime | None = None,
    note: str = "",
    source: str = "manual",
) -> Price:
    """Add a price version for a public model (prices are never edited in place: history stays)."""
    price = Price(
        public_model=public_model,
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from or timezone.now(),
        note=note,
        source=source,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    price.full_clean()
    price.save()
    audit_save(actor=actor, instance=price, before=None, action="price.publish", reason=note)
    tenancy_section_publish_on_commit()
    return price
