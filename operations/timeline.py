"""An incident's timeline: each line written once, however often the reaction that writes it runs."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction

from operations.models import IncidentEntry


def entry_add(*, incident_id: int, kind: str, text: str, at: dt.datetime, data: dict | None = None,
              source: str = "") -> None:  # fmt: skip
    """Append a line; a line with the same ``source`` already there (an earlier run) is kept as is."""
    try:
        with transaction.atomic():
            IncidentEntry.objects.create(incident_id=incident_id, kind=kind, text=text[:1000], at=at,
                                         data=data or {}, source=source)  # fmt: skip
    except IntegrityError:
        pass
