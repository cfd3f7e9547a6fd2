"""``{% load audit_tags %}{% audit_timeline object %}``: an object's audit timeline on its own page.

Renders nothing unless the page's context says the viewer reads everything (``reads_everything``,
set by the project's context processor): tenant members never see the trail.
"""

from __future__ import annotations

import json

from django import template

from audit.checks import check_results
from audit.selectors import events_for_object

register = template.Library()

TIMELINE_LIMIT = 50


@register.filter
def audit_json(value) -> str:
    """JSON data as indented JSON (what the hash covers), not Python's repr."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.inclusion_tag("audit/partials/timeline.html", takes_context=True)
def audit_timeline(
    context, obj=None, object_type: str = "", object_id: str | int = "", limit: int = TIMELINE_LIMIT
):
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = object_id or obj.pk
    visible = bool(context.get("reads_everything"))
    events = []
    total = 0
    if visible and object_type and object_id != "":
        qs = events_for_object(object_type=object_type, object_id=object_id)
        total = qs.count()
        events = list(qs.order_by("-seq")[:limit])
    return {
        "visible": visible,
        "events": events,
        "total": total,
        "object_type": object_type,
        "object_id": str(object_id),
    }


@register.inclusion_tag("audit/partials/health_badge.html")
def audit_health_badge():
    """The latest periodic checks (chain, drift): red as soon as one found something, with when and what."""
    return {"health": check_results()}
