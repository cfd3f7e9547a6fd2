"""A route's semantic cache over the REST API: what the route page shows and edits (ADR 0042).

``GET /api/deployments/routes/{id}/cache/``: the settings and the live figures (lookups, hits, the hit rate,
live entries, the error rate estimated from the verification samples with its 95 % Wilson interval).
``PUT`` saves the settings (audited, refused with a 400 naming each field that makes no sense);
``POST .../cache/drop/`` drops every entry (a reason is required: what was published).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import ReadsEverythingOrAdmin
from deployments.api.views import _drf_error
from deployments.models import ModelRoute, RouteCache
from deployments.semcache.selectors import encoder_label, route_cache_report
from deployments.semcache.services import route_cache_invalidate, route_cache_set
from snapshot.contract import CACHE_STATS_FIELDS


class RouteCacheWriteSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    ttl_s = serializers.IntegerField(help_text="How long an entry lives, in seconds (1 s to 30 days).")
    target_error_rate = serializers.FloatField(
        help_text="The share of lookups that may get a cached answer the model would not have given: "
        "above 0, at most 0.5."
    )
    verify_share = serializers.FloatField(
        help_text="The share of would-be hits still sent to the model and compared: above 0, at most 0.5."
    )
    embedding_route = serializers.PrimaryKeyRelatedField(
        queryset=ModelRoute.objects.all(),
        allow_null=True,
        help_text="The route whose deployments embed the prompts (/v1/embeddings); needed when enabled.",
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class RouteCacheDropSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, help_text="What was published: why every entry goes.")


class RouteCacheFiguresSerializer(serializers.Serializer):
    available = serializers.BooleanField(help_text="False when Redis could not be read.")
    lookups = serializers.IntegerField(allow_null=True)
    hits = serializers.IntegerField(allow_null=True)
    hit_rate = serializers.FloatField(allow_null=True)
    entries = serializers.IntegerField(allow_null=True, help_text="Live entries (not expired).")
    error_estimate = serializers.FloatField(allow_null=True)
    error_low = serializers.FloatField(allow_null=True)
    error_high = serializers.FloatField(allow_null=True)
    within_target = serializers.BooleanField(
        allow_null=True, help_text="The interval's low end at or under the target; null without samples."
    )
    counts = serializers.DictField(child=serializers.IntegerField(), help_text=", ".join(CACHE_STATS_FIELDS))


class RouteCacheSerializer(serializers.Serializer):
    route = serializers.IntegerField()
    enabled = serializers.BooleanField()
    ttl_s = serializers.IntegerField()
    target_error_rate = serializers.FloatField()
    verify_share = serializers.FloatField()
    embedding_route = serializers.IntegerField(allow_null=True)
    generation = serializers.IntegerField(help_text="Bumped by every drop: older entries are never found.")
    encoder = serializers.CharField()
    figures = RouteCacheFiguresSerializer(allow_null=True, help_text="Null until the cache was first set.")


def _body(route: ModelRoute) -> dict:
    report = route_cache_report(route=route)
    c = report["settings"] if report else RouteCache(route=route)  # the defaults, unsaved
    figures = None
    if report:
        figures = {"available": report["available"], "lookups": None, "hits": None, "hit_rate": None,
                   "entries": None, "error_estimate": None, "error_low": None, "error_high": None,
                   "within_target": None, "counts": {}}  # fmt: skip
        if report["available"]:
            figures |= {k: report[k] for k in ("hit_rate", "entries", "error_estimate", "error_low",
                                                "error_high", "within_target", "counts")}  # fmt: skip
            figures |= {"lookups": report["counts"]["lookups"], "hits": report["counts"]["hits"]}
    return {
        "route": route.pk,
        "enabled": c.enabled,
        "ttl_s": c.ttl_s,
        "target_error_rate": c.target_error_rate,
        "verify_share": c.verify_share,
        "embedding_route": c.embedding_route_id,
        "generation": c.generation,
        "encoder": encoder_label(c.embedding_route),
        "figures": figures,
    }


class RouteCacheView(APIView):
    """A route's semantic cache: its settings and live figures; admins change them."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=RouteCacheSerializer)
    def get(self, request, pk: int):
        return Response(_body(get_object_or_404(ModelRoute, pk=pk)))

    @extend_schema(request=RouteCacheWriteSerializer, responses=RouteCacheSerializer)
    def put(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        body = RouteCacheWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            route_cache_set(route=route, actor=request.user, **body.validated_data)
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(_body(route))


class RouteCacheDropView(APIView):
    """Drop every entry of a route's cache (audited, with a reason)."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(request=RouteCacheDropSerializer, responses=RouteCacheSerializer)
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        body = RouteCacheDropSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            route_cache_invalidate(route=route, actor=request.user, reason=body.validated_data["reason"])
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(_body(route))
