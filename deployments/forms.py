"""Forms of the deployment pages. The create form runs the preflight so refusals show their numbers."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.core.exceptions import ValidationError

from catalog.selectors import gpu_type_list, model_version_list
from core.forms import BootstrapMixin
from deployments.constants import MAX_REPLICAS, ScalingMode, Status, Task
from deployments.models import (
    MAX_DOWNSCALE_DELAY_S,
    MAX_LOOK_BACK_PERIOD_S,
    MAX_UPSCALE_DELAY_S,
    Deployment,
    ModelRoute,
    RouteTarget,
)
from deployments.services import CREATE_FIELDS, SCALE_FIELDS, Preflight, deployment_preflight

DELAY_FIELDS = ("upscale_delay_s", "downscale_delay_s", "look_back_period_s")


class DeploymentForm(BootstrapMixin, forms.ModelForm):
    """Create a deployment; ``clean()`` refuses what does not fit and keeps the warnings."""

    class Meta:
        model = Deployment
        fields = [f for f in CREATE_FIELDS if f != "desired_state"]
        widgets = {"extra_engine_args": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.preflight: Preflight | None = None
        self.fields["model_version"].queryset = model_version_list()
        self.fields["gpu_type"].queryset = gpu_type_list()
        self.fields["served_model_name"].required = False
        self.fields["extra_engine_args"].required = False
        self.fields["task"].required = False  # generate unless the deployment is for embeddings
        for name in DELAY_FIELDS:  # Ray's defaults unless the admin says otherwise
            self.fields[name].required = False

    def _clean_delay(self, name: str):
        value = self.cleaned_data.get(name)
        return Deployment._meta.get_field(name).default if value is None else value

    def clean_upscale_delay_s(self):
        return self._clean_delay("upscale_delay_s")

    def clean_downscale_delay_s(self):
        return self._clean_delay("downscale_delay_s")

    def clean_look_back_period_s(self):
        return self._clean_delay("look_back_period_s")

    def clean_task(self):
        return self.cleaned_data.get("task") or Task.GENERATE

    def clean_extra_engine_args(self):
        value = self.cleaned_data.get("extra_engine_args")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise ValidationError('Must be a JSON object, e.g. {"enforce_eager": true}.')
        return value

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = Deployment(**{f: cleaned.get(f) for f in self.Meta.fields if f in cleaned})
        self.preflight = deployment_preflight(deployment=candidate)
        for error in self.preflight.errors:
            self.add_error(None, error)
        return cleaned


class ScaleForm(BootstrapMixin, forms.Form):
    """Fixed replicas, or Ray Serve autoscaling: bounds, target per replica and delays.

    Bad input gets its field's message here; the service checks the same rules again (the API and
    other callers go through it too) and its ``ValidationError`` is shown on the form as well."""

    scaling_mode = forms.ChoiceField(choices=ScalingMode.choices, label="Mode")
    num_replicas = forms.IntegerField(
        min_value=1, max_value=MAX_REPLICAS, required=False, label="Replicas (fixed)"
    )
    min_replicas = forms.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False, label="Min")
    max_replicas = forms.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False, label="Max")
    target_ongoing_requests = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        required=False,
        label="Target ongoing",
        help_text="Per replica; 0: 80 % of its measured capacity per replica",
    )
    upscale_delay_s = forms.FloatField(
        min_value=0, max_value=MAX_UPSCALE_DELAY_S, required=False, label="Up after (s)"
    )
    downscale_delay_s = forms.FloatField(
        min_value=0, max_value=MAX_DOWNSCALE_DELAY_S, required=False, label="Down after (s)"
    )
    look_back_period_s = forms.FloatField(
        min_value=1, max_value=MAX_LOOK_BACK_PERIOD_S, required=False, label="Look back (s)"
    )
    reason = forms.CharField(max_length=500, required=False, label="Why (optional)")

    def clean(self):
        cleaned = super().clean()
        fixed = cleaned.get("scaling_mode") == ScalingMode.FIXED
        if fixed and not cleaned.get("num_replicas") and "num_replicas" not in self.errors:
            self.add_error("num_replicas", "How many replicas?")
        if cleaned.get("scaling_mode") == ScalingMode.AUTOSCALING:
            lo, hi = cleaned.get("min_replicas"), cleaned.get("max_replicas")
            if lo is None or hi is None:
                if not {"min_replicas", "max_replicas"} & set(self.errors):
                    self.add_error("max_replicas", "Autoscaling needs a minimum and a maximum.")
            elif lo > hi:
                self.add_error(
                    "min_replicas",
                    f"The minimum ({lo} replicas) is above the maximum ({hi}): Ray Serve cannot scale between them.",
                )
        return cleaned

    @classmethod
    def for_deployment(cls, deployment: Deployment) -> ScaleForm:
        return cls(initial={f: getattr(deployment, f) for f in SCALE_FIELDS})


class AdmissionForm(BootstrapMixin, forms.Form):
    """The in-flight limit the gateways apply: from the measured capacity, or the operator's number."""

    SOURCES = [("measured", "From measured capacity"), ("operator", "At most this many in flight")]
    source = forms.ChoiceField(choices=SOURCES, label="Limit")
    max_inflight = forms.IntegerField(
        min_value=1, max_value=100_000, required=False, label="Requests in flight"
    )
    reason = forms.CharField(max_length=500, required=False, label="Why (optional)")

    def clean(self):
        cleaned = super().clean()
        operator = cleaned.get("source") == "operator"
        if operator and not cleaned.get("max_inflight") and "max_inflight" not in self.errors:
            self.add_error("max_inflight", "How many requests in flight at most?")
        if cleaned.get("source") == "measured":
            cleaned["max_inflight"] = None
        return cleaned

    @classmethod
    def for_deployment(cls, deployment: Deployment) -> AdmissionForm:
        source = "operator" if deployment.max_inflight else "measured"
        return cls(initial={"source": source, "max_inflight": deployment.max_inflight})


class DeploymentFilterForm(BootstrapMixin, forms.Form):
    """Query parameters of the list page."""

    status = forms.ChoiceField(required=False, choices=[("", "any status"), *Status.choices])


class ModelRouteForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = ModelRoute
        fields = ["public_name", "description", "long_context_threshold_tokens", "allowed_tenants", "voting"]
        widgets = {"allowed_tenants": forms.CheckboxSelectMultiple(attrs={"class": "form-check-input"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A form posted without it (an older page, a script) leaves the route's voting as it is.
        self.fields["voting"].required = False

    def clean_voting(self) -> str:
        return self.cleaned_data.get("voting") or self.instance.voting or "off"


class RouteIsolationForm(BootstrapMixin, forms.Form):
    """Query parameters of the route page's isolation figure (ADR 0039): the window it looks back
    over and, optionally, the prompt size up to which a request counts as short."""

    WINDOWS = {"1h": dt.timedelta(hours=1), "6h": dt.timedelta(hours=6), "24h": dt.timedelta(days=1),
               "7d": dt.timedelta(days=7)}  # fmt: skip
    DEFAULT_WINDOW = "24h"

    window = forms.ChoiceField(
        required=False, choices=[(k, f"last {k}") for k in WINDOWS], initial=DEFAULT_WINDOW, label="Window"
    )
    short = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=10_000_000,
        label="Short: at most (tokens)",
        help_text="Empty: the route's long-context threshold.",
    )

    @classmethod
    def window_length(cls, name: str | None) -> dt.timedelta:
        return cls.WINDOWS[name or cls.DEFAULT_WINDOW]


class RouteFreeForm(BootstrapMixin, forms.Form):
    """Mark a route served at $0 on purpose, or take the mark off; either way, say why (ADR 0022)."""

    free = forms.BooleanField(required=False, label="Serve at $0 on purpose")
    reason = forms.CharField(max_length=500, label="Why")


class RouteTargetForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = RouteTarget
        fields = ["deployment", "weight"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["deployment"].queryset = Deployment.objects.live().order_by("name")
