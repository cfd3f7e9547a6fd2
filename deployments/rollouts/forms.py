"""Forms of the rollout pages: create a rollout, act on one, set a deployment's faults."""

from __future__ import annotations

import json

from django import forms

from deployments.constants import RolloutPhase
from deployments.models import Deployment, ModelRoute
from deployments.rollouts.plan import TEMPLATES


class JsonListField(forms.CharField):
    """A JSON list typed into a textarea (empty = use the template's)."""

    widget = forms.Textarea(attrs={"rows": 6, "class": "form-control font-monospace"})

    def to_python(self, value):
        value = super().to_python(value)
        if not value:
            return None
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg} (line {exc.lineno}).") from None
        if not isinstance(data, list):
            raise forms.ValidationError("Must be a JSON list.")
        return data


class RolloutCreateForm(forms.Form):
    route = forms.ModelChoiceField(
        queryset=ModelRoute.objects.filter(rehearsal=False).order_by("public_name")
    )
    stable = forms.ModelChoiceField(queryset=Deployment.objects.live(), help_text="Serves the route today.")
    canary = forms.ModelChoiceField(
        queryset=Deployment.objects.live(),
        help_text="Its version must be approved (gates passed) or serving.",
    )
    template = forms.ChoiceField(choices=[(k, t["label"]) for k, t in TEMPLATES.items()], initial="standard")
    steps = JsonListField(
        required=False,
        help_text='Optional: your own steps instead of the template\'s, e.g. [{"kind": "set_weight", "weight": 10}, '
        '{"kind": "analysis", "window_s": 60}, {"kind": "pause"}, {"kind": "set_weight", "weight": 100}]. '
        "An analysis with too few samples grows by window_s up to max_window_s (default 3 × window_s).",
    )
    checks = JsonListField(
        required=False,
        help_text='Optional: your own checks, e.g. [{"metric": "ttft_p95_ms", "limit": 1.5, "relative": true, '
        '"min_samples": 20}].',
    )
    failure_limit = forms.IntegerField(
        required=False, min_value=0, help_text="Failed checks tolerated (empty: the template's)."
    )
    sla_ttft_ms = forms.FloatField(initial=1000, min_value=1, label="SLA TTFT (ms)")
    sla_tpot_ms = forms.FloatField(initial=50, min_value=0.1, label="SLA TPOT (ms)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            if not isinstance(field.widget, forms.Textarea):
                field.widget.attrs.setdefault(
                    "class", "form-select" if isinstance(field.widget, forms.Select) else "form-control"
                )

    def plan(self) -> dict:
        """What to pass to ``rollout_create``: the template, overridden by typed steps/checks."""
        t = TEMPLATES[self.cleaned_data["template"]]
        fl = self.cleaned_data.get("failure_limit")
        return {
            "steps": self.cleaned_data.get("steps") or t["steps"],
            "checks": self.cleaned_data.get("checks")
            if self.cleaned_data.get("checks") is not None
            else t["checks"],
            "failure_limit": t["failure_limit"] if fl is None else fl,
            "template": self.cleaned_data["template"] if not self.cleaned_data.get("steps") else "custom",
        }


class RolloutActionForm(forms.Form):
    reason = forms.CharField(required=False, max_length=500)


class RolloutFilterForm(forms.Form):
    phase = forms.ChoiceField(
        required=False,
        choices=[("", "any phase"), *RolloutPhase.choices],
        widget=forms.Select(attrs={"class": "form-select form-select-sm"}),
    )


class FaultsForm(forms.Form):
    ttft_extra_ms = forms.FloatField(required=False, min_value=0, label="extra TTFT (ms)")
    decode_slowdown = forms.FloatField(required=False, min_value=1, label="decode slowdown (×)")
    error_rate = forms.FloatField(required=False, min_value=0, max_value=1, label="error rate (0–1)")
    reason = forms.CharField(required=False, max_length=500)

    def faults(self) -> dict:
        return {
            k: v
            for k in ("ttft_extra_ms", "decode_slowdown", "error_rate")
            if (v := self.cleaned_data.get(k)) is not None
        }
