"""Forms of the benchmark pages: the start form (flat fields → service arguments) and the filters."""

from __future__ import annotations

from django import forms

from catalog.selectors import gpu_type_list, model_version_list
from core.runs import RunStatus
from evaluations.constants import (
    MAX_CONCURRENCY,
    MAX_PREFIX_GROUPS,
    MAX_RATE_RPS,
    MAX_REQUESTS_PER_STAGE,
    MAX_SLA_MS,
    MAX_STAGE_SECONDS,
    MAX_TOKENS_PER_REQUEST,
    MAX_WARMUP_REQUESTS,
    Api,
    RunKind,
    RunMode,
    TargetKind,
)
from evaluations.forms.common import small_bootstrap

LENGTH_KINDS = [
    ("fixed", "fixed (a)"),
    ("uniform", "uniform (a..b)"),
    ("normal", "normal (mean a, std b)"),
    ("lognormal", "lognormal (mean a, sigma b)"),
]
ARRIVALS = [
    ("poisson", "Poisson (rate)"),
    ("constant", "constant (rate)"),
    ("gamma", "gamma (rate, burstiness)"),
    ("concurrency", "fixed concurrency (closed loop)"),
]


class RunFilterForm(forms.Form):
    """Query parameters of the run list."""

    q = forms.CharField(required=False, widget=forms.TextInput(attrs={"placeholder": "name contains"}))
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *RunStatus.choices])
    kind = forms.ChoiceField(required=False, choices=[("", "measured + predicted"), *RunKind.choices])
    mode = forms.ChoiceField(required=False, choices=[("", "any mode"), *RunMode.choices])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        small_bootstrap(self)


class CompareForm(forms.Form):
    """Two runs side by side."""

    a = forms.IntegerField(min_value=1, label="Run A")
    b = forms.IntegerField(min_value=1, label="Run B")


class BenchmarkRunForm(forms.Form):
    """Everything a run needs, as flat fields; ``service_kwargs`` builds the service's arguments."""

    name = forms.CharField(required=False, max_length=128)
    kind = forms.ChoiceField(choices=RunKind.choices, initial=RunKind.MEASURED)
    mode = forms.ChoiceField(choices=RunMode.choices, initial=RunMode.SWEEP)
    # Target.
    target_kind = forms.ChoiceField(choices=TargetKind.choices, initial=TargetKind.DEPLOYMENT, label="Target")
    deployment = forms.ModelChoiceField(queryset=None, required=False)
    base_url = forms.CharField(required=False, label="Base URL", help_text="URL targets: ends in /v1")
    model_name = forms.CharField(required=False, help_text="Gateway/URL: the model to request")
    api = forms.ChoiceField(choices=Api.choices, initial=Api.COMPLETIONS, label="API")
    model_version = forms.ModelChoiceField(
        queryset=None, required=False, help_text="Predicted without a deployment, or the cost basis of a URL"
    )
    gpu_type = forms.ModelChoiceField(queryset=None, required=False, label="GPU type")
    gpus = forms.IntegerField(required=False, min_value=0, label="GPUs behind a URL/gateway")
    tensor_parallel = forms.IntegerField(min_value=1, max_value=64, initial=1, label="TP (spec)")
    replicas = forms.IntegerField(min_value=1, max_value=64, initial=1, label="Replicas (spec)")
    # Workload.
    arrival = forms.ChoiceField(choices=ARRIVALS, initial="poisson")
    rate = forms.FloatField(
        min_value=0.001, max_value=MAX_RATE_RPS, initial=1.0, label="Rate (req/s) / sweep start"
    )
    burstiness = forms.FloatField(min_value=0.01, max_value=100, initial=1.0)
    concurrency = forms.IntegerField(min_value=1, max_value=MAX_CONCURRENCY, initial=8)
    ladder = forms.CharField(required=False, help_text="Ladder mode: comma-separated rates or concurrencies")
    input_kind = forms.ChoiceField(choices=LENGTH_KINDS, initial="fixed", label="Input length")
    input_a = forms.FloatField(min_value=1, max_value=MAX_TOKENS_PER_REQUEST, initial=512, label="Input a")
    input_b = forms.FloatField(required=False, min_value=0, max_value=MAX_TOKENS_PER_REQUEST, label="Input b")
    output_kind = forms.ChoiceField(choices=LENGTH_KINDS, initial="fixed", label="Output length")
    output_a = forms.FloatField(min_value=1, max_value=MAX_TOKENS_PER_REQUEST, initial=128, label="Output a")
    output_b = forms.FloatField(
        required=False, min_value=0, max_value=MAX_TOKENS_PER_REQUEST, label="Output b"
    )
    shared_prefix_ratio = forms.FloatField(min_value=0, max_value=1, initial=0.0)
    prefix_groups = forms.IntegerField(min_value=1, max_value=MAX_PREFIX_GROUPS, initial=1)
    temperature = forms.FloatField(min_value=0, max_value=2, initial=0.0)
    ignore_eos = forms.BooleanField(required=False, initial=True, help_text="Exact output lengths (vLLM)")
    # Stages.
    duration_s = forms.FloatField(
        required=False, min_value=0.1, max_value=MAX_STAGE_SECONDS, initial=30.0, label="Stage duration (s)"
    )
    num_requests = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_REQUESTS_PER_STAGE, label="…or requests per stage"
    )
    warmup_requests = forms.IntegerField(min_value=0, max_value=MAX_WARMUP_REQUESTS, initial=4)
    processes = forms.IntegerField(
        min_value=0, max_value=64, initial=0, help_text="Client processes (0 = auto)"
    )
    # SLA and sweep.
    ttft_ms = forms.FloatField(
        required=False, min_value=0.001, max_value=MAX_SLA_MS, initial=1000.0, label="TTFT ≤ (ms)"
    )
    tpot_ms = forms.FloatField(
        required=False, min_value=0.001, max_value=MAX_SLA_MS, initial=50.0, label="TPOT ≤ (ms)"
    )
    e2e_ms = forms.FloatField(required=False, min_value=0.001, max_value=MAX_SLA_MS, label="E2E ≤ (ms)")
    target_attainment = forms.FloatField(min_value=0.01, max_value=1.0, initial=0.9)
    max_rate = forms.FloatField(
        min_value=0.01, max_value=MAX_RATE_RPS, initial=1000.0, label="Sweep max rate"
    )
    rel_tol = forms.FloatField(min_value=0.001, max_value=1.0, initial=0.05, label="Sweep tolerance")
    max_stages = forms.IntegerField(min_value=1, max_value=30, initial=10, label="Sweep max stages")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from deployments.selectors import deployment_list

        self.fields["deployment"].queryset = deployment_list()
        self.fields["model_version"].queryset = model_version_list()
        self.fields["gpu_type"].queryset = gpu_type_list()
        small_bootstrap(self)

    def clean_ladder(self) -> list[float]:
        raw = self.cleaned_data.get("ladder") or ""
        try:
            return [float(x) for x in raw.replace(";", ",").split(",") if x.strip()]
        except ValueError as exc:
            raise forms.ValidationError("Use numbers separated by commas, e.g. 1, 2, 4, 8.") from exc

    def clean(self):
        d = super().clean()
        for side in ("input", "output"):
            if d.get(f"{side}_kind") not in (None, "fixed") and d.get(f"{side}_b") is None:
                self.add_error(f"{side}_b", f"A {d[f'{side}_kind']} length needs b.")
        return d

    @staticmethod
    def _length(kind: str, a: float, b: float | None) -> dict:
        if kind == "fixed":
            return {"kind": "fixed", "value": int(a)}
        if b is None:
            raise forms.ValidationError(f"A {kind} length needs b.")
        if kind == "uniform":
            return {"kind": "uniform", "low": int(a), "high": int(b)}
        if kind == "normal":
            return {"kind": "normal", "mean": a, "std": b}
        return {"kind": "lognormal", "mean": a, "sigma": b}

    def service_kwargs(self) -> dict:
        """Arguments for ``benchmark_run_create`` (call after ``is_valid``)."""
        d = self.cleaned_data
        if d["arrival"] == "concurrency":
            arrival = {"kind": "concurrency", "concurrency": d["concurrency"]}
        else:
            arrival = {"kind": d["arrival"], "rate": d["rate"]}
            if d["arrival"] == "gamma":
                arrival["burstiness"] = d["burstiness"]
        workload: dict = {
            "arrival": arrival,
            "input": self._length(d["input_kind"], d["input_a"], d.get("input_b")),
            "output": self._length(d["output_kind"], d["output_a"], d.get("output_b")),
        }
        if d.get("shared_prefix_ratio"):
            workload.update(shared_prefix_ratio=d["shared_prefix_ratio"], prefix_groups=d["prefix_groups"])
        sampling = {"temperature": d["temperature"]}
        if d.get("ignore_eos"):
            sampling["ignore_eos"] = True
        return {
            "name": d.get("name") or "",
            "kind": d["kind"],
            "mode": d["mode"],
            "target_kind": d["target_kind"],
            "deployment": d.get("deployment"),
            "base_url": (d.get("base_url") or "").strip(),
            "model_name": (d.get("model_name") or "").strip(),
            "api": d["api"],
            "model_version": d.get("model_version"),
            "gpu_type": d.get("gpu_type"),
            "gpus": d.get("gpus"),
            "tensor_parallel": d["tensor_parallel"],
            "replicas": d["replicas"],
            "workload": workload,
            "sampling": sampling,
            "sla": {"ttft_ms": d.get("ttft_ms"), "tpot_ms": d.get("tpot_ms"), "e2e_ms": d.get("e2e_ms")},
            "ladder": d["ladder"],
            "sweep": {
                "target_attainment": d["target_attainment"],
                "start_rate": d["rate"],
                "max_rate": d["max_rate"],
                "rel_tol": d["rel_tol"],
                "max_stages": d["max_stages"],
            },
            "stage": {
                "duration_s": d.get("duration_s"),
                "num_requests": d.get("num_requests"),
                "warmup_requests": d["warmup_requests"],
                "processes": d["processes"],
            },
        }


# How the start form groups its fields (the template walks these).
FIELD_GROUPS = [
    ("What to run", ["name", "kind", "mode"]),
    (
        "Target",
        [
            "target_kind",
            "deployment",
            "base_url",
            "model_name",
            "api",
            "model_version",
            "gpu_type",
            "gpus",
            "tensor_parallel",
            "replicas",
        ],
    ),
    ("Arrivals", ["arrival", "rate", "burstiness", "concurrency", "ladder"]),
    (
        "Lengths and sampling",
        [
            "input_kind",
            "input_a",
            "input_b",
            "output_kind",
            "output_a",
            "output_b",
            "shared_prefix_ratio",
            "prefix_groups",
            "temperature",
            "ignore_eos",
        ],
    ),
    ("Stages", ["duration_s", "num_requests", "warmup_requests", "processes"]),
    (
        "SLA and sweep",
        ["ttft_ms", "tpot_ms", "e2e_ms", "target_attainment", "max_rate", "rel_tol", "max_stages"],
    ),
]
