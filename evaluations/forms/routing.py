"""Forms of the router policy pages: train one, activate or judge one."""

from __future__ import annotations

from django import forms

from core.forms import BootstrapMixin
from deployments.selectors import route_list
from evaluations.selectors.routing import router_training_runs


class EvalRunChoice(forms.ModelChoiceField):
    def label_from_instance(self, run) -> str:
        return f"#{run.pk} {run.model_version} on {run.suite_version} ({run.label}, {run.created_at:%Y-%m-%d %H:%M})"


class RouterTrainForm(BootstrapMixin, forms.Form):
    route = forms.ModelChoiceField(queryset=route_list(), help_text="The public model name the policy routes")
    cheap_eval_run = EvalRunChoice(queryset=router_training_runs(), label="Cheap version's eval run")
    strong_eval_run = EvalRunChoice(
        queryset=router_training_runs(),
        label="Strong version's eval run",
        help_text="Of the same suite version",
    )
    quality_target = forms.FloatField(
        initial=0.95, help_text="Share of the strong version's quality to keep, in (0, 1]"
    )
    cheap_usd_per_mtok = forms.FloatField(label="Cheap $ per Mtok", min_value=0)
    strong_usd_per_mtok = forms.FloatField(label="Strong $ per Mtok", min_value=0)
    seed = forms.IntegerField(initial=0, required=False, help_text="Seeds the split and the bootstrap")

    def service_kwargs(self) -> dict:
        d = self.cleaned_data
        return {
            "route": d["route"],
            "cheap_run": d["cheap_eval_run"],
            "strong_run": d["strong_eval_run"],
            "quality_target": d["quality_target"],
            "cheap_usd_per_mtok": d["cheap_usd_per_mtok"],
            "strong_usd_per_mtok": d["strong_usd_per_mtok"],
            "seed": d.get("seed") or 0,
        }

    def add_service_errors(self, errors: dict) -> None:
        for name, msgs in errors.items():
            self.add_error(name if name in self.fields else None, msgs)


class RouterActivateForm(BootstrapMixin, forms.Form):
    override_reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Needed only when its gate has not passed",
    )
