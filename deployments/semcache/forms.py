"""The route page's semantic cache forms."""

from __future__ import annotations

from django import forms

from deployments.models import ModelRoute
from deployments.semcache.selectors import embedding_routes


class RouteCacheForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Cache on")
    ttl_s = forms.IntegerField(min_value=1, initial=86_400, label="TTL (s)")
    target_error_rate = forms.FloatField(
        initial=0.02, label="Target error rate", help_text="Above 0 and at most 0.5 (0.02 = 2 % of requests)."
    )
    verify_share = forms.FloatField(initial=0.05, label="Verification share")
    embedding_route = forms.ModelChoiceField(
        queryset=ModelRoute.objects.none(), required=False, label="Embedding route"
    )
    reason = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["embedding_route"].queryset = ModelRoute.objects.filter(
            pk__in=[r.pk for r in embedding_routes()]
        )
        for f in self.fields.values():
            f.widget.attrs.setdefault(
                "class",
                "form-check-input" if isinstance(f, forms.BooleanField) else "form-control form-control-sm",
            )


class RouteCacheDropForm(forms.Form):
    reason = forms.CharField(
        max_length=200, help_text="What was published (a system prompt, a knowledge base)."
    )


def route_cache_form(*, route: ModelRoute) -> RouteCacheForm:
    """The form with the route's settings (or the defaults: off, 2 %, a day, 5 %)."""
    c = getattr(route, "cache_settings", None)
    if c is None:
        return RouteCacheForm()
    return RouteCacheForm(
        initial={
            "enabled": c.enabled,
            "ttl_s": c.ttl_s,
            "target_error_rate": c.target_error_rate,
            "verify_share": c.verify_share,
            "embedding_route": c.embedding_route_id,
        }
    )
