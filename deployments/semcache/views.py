"""Saving a route's semantic cache settings, and dropping its entries, from the route page."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.views import View

from core.access import PlatformAdminRequiredMixin
from deployments.models import ModelRoute
from deployments.semcache.forms import RouteCacheDropForm, RouteCacheForm
from deployments.semcache.services import route_cache_invalidate, route_cache_set


def _errors(exc_or_form) -> str:
    errors = exc_or_form.message_dict if isinstance(exc_or_form, ValidationError) else exc_or_form.errors
    return "; ".join(f"{k.replace('_', ' ')}: {' '.join(v)}" for k, v in errors.items())


class RouteCacheView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        form = RouteCacheForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Cache settings refused: " + _errors(form))
            return redirect(route.get_absolute_url())
        d = form.cleaned_data
        try:
            route_cache_set(
                route=route,
                enabled=d["enabled"],
                ttl_s=d["ttl_s"],
                target_error_rate=d["target_error_rate"],
                verify_share=d["verify_share"],
                embedding_route=d["embedding_route"],
                actor=request.user,
                reason=d.get("reason", ""),
            )
        except ValidationError as exc:
            messages.error(request, "Cache settings refused: " + _errors(exc))
        else:
            messages.success(request, "Cache on." if d["enabled"] else "Cache settings saved (off).")
        return redirect(route.get_absolute_url())


class RouteCacheDropView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        form = RouteCacheDropForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Say why the cache is dropped: " + _errors(form))
            return redirect(route.get_absolute_url())
        route_cache_invalidate(route=route, actor=request.user, reason=form.cleaned_data["reason"])
        messages.success(request, "Every cached answer of this route is dropped.")
        return redirect(route.get_absolute_url())
