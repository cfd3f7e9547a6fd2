"""Forms of the cost pages: the capacity planner, and the date range of the GPU cost page."""

from __future__ import annotations

from django import forms

from catalog.selectors import gpu_type_list, model_version_list
from core.forms import BootstrapMixin

TP_CHOICES = [("1", "TP=1"), ("2", "TP=2"), ("4", "TP=4"), ("8", "TP=8")]


class CapacityPlanForm(BootstrapMixin, forms.Form):
    """Business targets and the candidates to compare (every version × GPU type × TP chosen)."""

    name = forms.CharField(max_length=128)
    peak_qps = forms.FloatField(label="Peak QPS (req/s)")
    input_mean = forms.FloatField(label="Mean input tokens", initial=512)
    input_sigma = forms.FloatField(label="Input spread (lognormal σ)", initial=0.5, required=False)
    output_mean = forms.FloatField(label="Mean output tokens", initial=128)
    output_sigma = forms.FloatField(label="Output spread (lognormal σ)", initial=0.5, required=False)
    ttft_ms = forms.FloatField(label="SLA: TTFT ≤ (ms)", initial=1000)
    tpot_ms = forms.FloatField(label="SLA: TPOT ≤ (ms)", initial=50)
    redundancy = forms.FloatField(
        label="Redundancy factor", initial=1.3, help_text="≥ 1: swings, failures, canaries."
    )
    model_versions = forms.ModelMultipleChoiceField(queryset=None, required=False)
    gpu_types = forms.ModelMultipleChoiceField(queryset=None, required=False)
    tensor_parallel = forms.MultipleChoiceField(choices=TP_CHOICES, required=False, initial=["1"])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model_versions"].queryset = model_version_list()
        self.fields["gpu_types"].queryset = gpu_type_list()

    def candidates(self) -> list[dict]:
        d = self.cleaned_data
        return [
            {"model_version_id": v.pk, "gpu_type_id": g.pk, "tensor_parallel": int(tp)}
            for v in d.get("model_versions") or []
            for g in d.get("gpu_types") or []
            for tp in d.get("tensor_parallel") or []
        ]


class CostRangeForm(BootstrapMixin, forms.Form):
    """Query parameters of the GPU cost page: a range of UTC days, the end exclusive."""

    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, help_text="Exclusive.", widget=forms.DateInput(attrs={"type": "date"})
    )

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["until"] <= data["since"]:
            raise forms.ValidationError("The end date must be after the start date.")
        return data
