"""Forms of the gate pages: the decision filters, the gate-run form and the policy editor.

The policy editor has one flat field per limit; ``GatePolicyForm.service_kwargs`` turns them into
the three gate objects ``evaluations.services.gates.gate_policy_save`` validates (and names fields in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms

from catalog.selectors import gpu_type_list, model_all
from evaluations.constants import EvidenceLabel, GateKind, GateMode, Verdict
from evaluations.forms.common import small_bootstrap
from evaluations.models import EvalSuite, GatePolicy
from evaluations.services.gates import DEFAULT_PERFORMANCE, DEFAULT_QUALITY, DEFAULT_STABILITY

if TYPE_CHECKING:
    from catalog.models import Model


class DecisionFilterForm(forms.Form):
    """Query parameters of the Gates page and its exports."""

    model = forms.ModelChoiceField(queryset=model_all(), required=False, empty_label="any model")
    version = forms.IntegerField(
        required=False, min_value=1, widget=forms.NumberInput(attrs={"placeholder": "version id"})
    )
    kind = forms.ChoiceField(required=False, choices=[("", "any gate"), *GateKind.choices])
    verdict = forms.ChoiceField(required=False, choices=[("", "any verdict"), *Verdict.choices])
    label = forms.ChoiceField(required=False, choices=[("", "any evidence"), *EvidenceLabel.choices])
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        small_bootstrap(self)

    def selector_kwargs(self) -> dict:
        f = self.cleaned_data if self.is_valid() else {}
        return {
            "model_id": f["model"].pk if f.get("model") else None,
            "version_id": f.get("version"),
            "kind": f.get("kind") or None,
            "verdict": f.get("verdict") or None,
            "label": f.get("label") or None,
            "since": f.get("since"),
            "until": f.get("until"),
        }


class GateRunForm(forms.Form):
    mode = forms.ChoiceField(choices=GateMode.choices, initial=GateMode.PREDICTED)
    kinds = forms.MultipleChoiceField(
        choices=GateKind.choices, required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Empty: every required gate of the policy.",
    )  # fmt: skip


def _f(required: bool = False, **kw) -> forms.FloatField:
    return forms.FloatField(required=required, **kw)


class GatePolicyForm(forms.Form):
    """One flat field per limit (empty = no limit); ``service_kwargs`` builds the three gate objects."""

    gpu_type = forms.ModelChoiceField(queryset=gpu_type_list(), label="GPU type the gates run on")
    reason = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="Why this change (audited)"
    )
    # quality
    quality_required = forms.BooleanField(required=False, label="Quality gate required")
    quality_suite = forms.ChoiceField(label="Eval suite")
    quality_baseline = forms.ChoiceField(label="Baseline")
    quality_max_drop = _f(label="Max allowed drop (all categories)", help_text="0–1, e.g. 0.05 = 5 points")
    quality_min_score = _f(label="Min score (all categories)", help_text="0–1")
    quality_categories = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Per-category limits",
        help_text="One per line: category max_drop min_score (use - for none), e.g. 'needle 0.02 0.9'",
    )  # fmt: skip
    # performance
    performance_required = forms.BooleanField(required=False, label="Performance gate required")
    perf_input_tokens = forms.IntegerField(min_value=1, label="Input tokens")
    perf_output_tokens = forms.IntegerField(min_value=1, label="Output tokens")
    perf_sla_ttft_ms = _f(label="SLA TTFT (ms)")
    perf_sla_tpot_ms = _f(label="SLA TPOT (ms)")
    perf_stage_duration_s = _f(label="Seconds per sweep stage")
    perf_min_goodput_ratio = _f(label="Min capacity goodput vs baseline (×)", help_text="e.g. 0.95")
    perf_max_p95_ttft_ms = _f(label="Max p95 TTFT (ms)")
    perf_max_p95_tpot_ms = _f(label="Max p95 TPOT (ms)")
    perf_kv_context_tokens = forms.IntegerField(required=False, label="KV target context (tokens)")
    perf_min_kv_seqs = forms.IntegerField(required=False, label="Min KV sequences at that context")
    perf_max_usd_per_mtok = _f(label="Max $ per M output tokens")
    # stability
    stability_required = forms.BooleanField(required=False, label="Stability gate required")
    soak_duration_s = _f(label="Soak duration (s)")
    soak_length_mix = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Length mix",
        help_text="One per line: input_tokens output_tokens weight",
    )  # fmt: skip
    soak_low_rps = _f(label="Wave low (req/s)")
    soak_high_rps = _f(label="Wave high (req/s)")
    soak_period_s = _f(label="Wave period (s)")
    soak_max_error_rate = _f(label="Max error rate", help_text="0–1")
    soak_max_preemptions = forms.IntegerField(required=False, label="Max preemptions")
    soak_max_restarts = forms.IntegerField(required=False, label="Max engine restarts")

    def __init__(self, *args, model: Model, current: GatePolicy | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.model = model
        self.fields["quality_suite"].choices = [(s.name, s.name) for s in EvalSuite.objects.order_by("name")]
        self.fields["quality_baseline"].choices = [("serving", "the version serving now")] + [
            (str(v.pk), f"{v.label} ({v.get_lifecycle_display().lower()})")
            for v in model.versions.order_by("label")
        ]
        if not self.is_bound:
            self.initial.update(self.initial_from(current))
        small_bootstrap(self)

    @staticmethod
    def initial_from(policy: GatePolicy | None) -> dict:
        q = policy.quality if policy else DEFAULT_QUALITY
        p = policy.performance if policy else DEFAULT_PERFORMANCE
        s = policy.stability if policy else DEFAULT_STABILITY
        dash = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
        return {
            "gpu_type": policy.gpu_type_id if policy else None,
            "quality_required": q.get("required"),
            "quality_suite": q.get("suite"),
            "quality_baseline": str(q.get("baseline", "serving")),
            "quality_max_drop": (q.get("default") or {}).get("max_drop"),
            "quality_min_score": (q.get("default") or {}).get("min_score"),
            "quality_categories": "\n".join(
                f"{cat} {dash(v.get('max_drop'))} {dash(v.get('min_score'))}" for cat, v in (q.get("categories") or {}).items()
            ),
            "performance_required": p.get("required"),
            "perf_input_tokens": (p["workload"].get("input") or {}).get("value"),
            "perf_output_tokens": (p["workload"].get("output") or {}).get("value"),
            "perf_sla_ttft_ms": p["sla"].get("ttft_ms"),
            "perf_sla_tpot_ms": p["sla"].get("tpot_ms"),
            "perf_stage_duration_s": p.get("stage_duration_s"),
            "perf_min_goodput_ratio": p.get("min_goodput_ratio"),
            "perf_max_p95_ttft_ms": p.get("max_p95_ttft_ms"),
            "perf_max_p95_tpot_ms": p.get("max_p95_tpot_ms"),
            "perf_kv_context_tokens": p.get("kv_context_tokens"),
            "perf_min_kv_seqs": p.get("min_kv_seqs"),
            "perf_max_usd_per_mtok": p.get("max_usd_per_mtok"),
            "stability_required": s.get("required"),
            "soak_duration_s": s.get("duration_s"),
            "soak_length_mix": "\n".join(f"{m['input']} {m['output']} {m['weight']}" for m in s.get("length_mix") or []),
            "soak_low_rps": (s.get("waves") or {}).get("low_rps"),
            "soak_high_rps": (s.get("waves") or {}).get("high_rps"),
            "soak_period_s": (s.get("waves") or {}).get("period_s"),
            "soak_max_error_rate": s.get("max_error_rate"),
            "soak_max_preemptions": s.get("max_preemptions"),
            "soak_max_restarts": s.get("max_restarts"),
        }  # fmt: skip

    def clean_quality_categories(self) -> dict:
        out = {}
        for n, line in enumerate(self.cleaned_data["quality_categories"].splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3:
                raise forms.ValidationError(
                    f"Line {n}: write 'category max_drop min_score' (use - for none)."
                )
            try:
                drop, floor = (None if p == "-" else float(p) for p in parts[1:])
            except ValueError as exc:
                raise forms.ValidationError(f"Line {n}: limits are numbers or -.") from exc
            out[parts[0]] = {"max_drop": drop, "min_score": floor}
        return out

    def clean_soak_length_mix(self) -> list[dict]:
        out = []
        for n, line in enumerate(self.cleaned_data["soak_length_mix"].splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                raise forms.ValidationError(f"Line {n}: write three whole numbers: input output weight.")
            out.append({"input": int(parts[0]), "output": int(parts[1]), "weight": int(parts[2])})
        return out

    def service_kwargs(self) -> dict:
        c = self.cleaned_data
        baseline = c["quality_baseline"]
        return {
            "gpu_type": c["gpu_type"],
            "reason": c["reason"],
            "quality": {
                "required": c["quality_required"], "suite": c["quality_suite"],
                "baseline": "serving" if baseline == "serving" else int(baseline),
                "default": {"max_drop": c["quality_max_drop"], "min_score": c["quality_min_score"]},
                "categories": c["quality_categories"],
            },
            "performance": {
                "required": c["performance_required"],
                "workload": {"input": {"kind": "fixed", "value": c["perf_input_tokens"]},
                             "output": {"kind": "fixed", "value": c["perf_output_tokens"]}},
                "sla": {"ttft_ms": c["perf_sla_ttft_ms"], "tpot_ms": c["perf_sla_tpot_ms"]},
                "stage_duration_s": c["perf_stage_duration_s"] or 60,
                "min_goodput_ratio": c["perf_min_goodput_ratio"], "max_p95_ttft_ms": c["perf_max_p95_ttft_ms"],
                "max_p95_tpot_ms": c["perf_max_p95_tpot_ms"], "kv_context_tokens": c["perf_kv_context_tokens"],
                "min_kv_seqs": c["perf_min_kv_seqs"], "max_usd_per_mtok": c["perf_max_usd_per_mtok"],
            },
            "stability": {
                "required": c["stability_required"], "duration_s": c["soak_duration_s"],
                "length_mix": c["soak_length_mix"],
                "waves": {"low_rps": c["soak_low_rps"], "high_rps": c["soak_high_rps"], "period_s": c["soak_period_s"]},
                "max_error_rate": c["soak_max_error_rate"], "max_preemptions": c["soak_max_preemptions"],
                "max_restarts": c["soak_max_restarts"],
            },
        }  # fmt: skip

    # Field names per gate, for the template (and errors keyed "quality.default.max_drop" map here).
    GROUPS = {
        GateKind.QUALITY: ["quality_required", "quality_suite", "quality_baseline", "quality_max_drop",
                           "quality_min_score", "quality_categories"],
        GateKind.PERFORMANCE: ["performance_required", "perf_input_tokens", "perf_output_tokens", "perf_sla_ttft_ms",
                               "perf_sla_tpot_ms", "perf_stage_duration_s", "perf_min_goodput_ratio",
                               "perf_max_p95_ttft_ms", "perf_max_p95_tpot_ms", "perf_kv_context_tokens",
                               "perf_min_kv_seqs", "perf_max_usd_per_mtok"],
        GateKind.STABILITY: ["stability_required", "soak_duration_s", "soak_length_mix", "soak_low_rps",
                             "soak_high_rps", "soak_period_s", "soak_max_error_rate", "soak_max_preemptions",
                             "soak_max_restarts"],
    }  # fmt: skip
    SERVICE_FIELD = {
        "quality.suite": "quality_suite", "quality.baseline": "quality_baseline",
        "quality.default.max_drop": "quality_max_drop", "quality.default.min_score": "quality_min_score",
        "quality.categories": "quality_categories", "performance.workload": "perf_input_tokens",
        "performance.sla": "perf_sla_ttft_ms", "performance.sla.ttft_ms": "perf_sla_ttft_ms",
        "performance.sla.tpot_ms": "perf_sla_tpot_ms", "performance.stage_duration_s": "perf_stage_duration_s",
        "performance.min_goodput_ratio": "perf_min_goodput_ratio", "performance.max_p95_ttft_ms": "perf_max_p95_ttft_ms",
        "performance.max_p95_tpot_ms": "perf_max_p95_tpot_ms", "performance.kv_context_tokens": "perf_kv_context_tokens",
        "performance.min_kv_seqs": "perf_min_kv_seqs", "performance.max_usd_per_mtok": "perf_max_usd_per_mtok",
        "stability.duration_s": "soak_duration_s", "stability.length_mix": "soak_length_mix",
        "stability.waves.low_rps": "soak_low_rps", "stability.waves.high_rps": "soak_high_rps",
        "stability.waves.period_s": "soak_period_s", "stability.max_error_rate": "soak_max_error_rate",
        "stability.max_preemptions": "soak_max_preemptions", "stability.max_restarts": "soak_max_restarts",
        "gpu_type": "gpu_type",
    }  # fmt: skip

    def add_service_errors(self, message_dict: dict) -> None:
        for key, messages in message_dict.items():
            field = self.SERVICE_FIELD.get(key)
            if field is None and key.startswith("quality.categories."):
                field = "quality_categories"
            elif field is None and key.startswith("stability.length_mix."):
                field = "soak_length_mix"
            for message in messages:
                self.add_error(
                    field, message if field else f"{key}: {message}" if key != "__all__" else message
                )
