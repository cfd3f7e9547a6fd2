"""Forms of the deployment pages. The create form runs the preflight so refusals show their numbers."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from catalog.selectors import gpu_type_list, model_version_list
from core.forms import BootstrapMixin
from deployments.constants import ScalingMode, Status, Task
from deployments.models import Deployment, ModelRoute, RouteTarget
from deployments.services import CREATE_FIELDS, Preflight, deployment_preflight


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
    scaling_mode = forms.ChoiceField(choices=ScalingMode.choices)
    num_replicas = forms.IntegerField(min_value=1, max_value=64, required=False)
    min_replicas = forms.IntegerField(min_value=0, max_value=64, required=False)
    max_replicas = forms.IntegerField(min_value=1, max_value=64, required=False)
    target_ongoing_requests = forms.IntegerField(
        min_value=0, required=False, help_text="Per replica; 0: 80 % of its measured capacity per replica"
    )

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("scaling_mode") == ScalingMode.FIXED and not cleaned.get("num_replicas"):
            self.add_error("num_replicas", "How many replicas?")
        if cleaned.get("scaling_mode") == ScalingMode.AUTOSCALING:
            lo, hi = cleaned.get("min_replicas"), cleaned.get("max_replicas")
            if lo is None or hi is None:
                self.add_error("max_replicas", "Autoscaling needs a minimum and a maximum.")
            elif lo > hi:
                self.add_error("min_replicas", "The minimum cannot exceed the maximum.")
        return cleaned


class DeploymentFilterForm(BootstrapMixin, forms.Form):
    """Query parameters of the list page."""

    status = forms.ChoiceField(required=False, choices=[("", "any status"), *Status.choices])


class ModelRouteForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = ModelRoute
        fields = ["public_name", "description", "long_context_threshold_tokens", "allowed_tenants"]
        widgets = {"allowed_tenants": forms.CheckboxSelectMultiple(attrs={"class": "form-check-input"})}


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
