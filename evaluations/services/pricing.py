"""Prices derived from capacity goodput (DOMAIN.md "Cost"), reviewed by an admin and published to billing.

For a public model, every deployment behind its route with a positive weight contributes its latest
qualifying benchmark (succeeded, with a capacity goodput; measured preferred, predicted allowed and
labelled):

    cluster $/hour       = GPUs × $/GPU-hour (the GPU cost version in force for the GPU type and pool)
    blended $/M tokens   = cluster $/hour ÷ (total-token goodput/s × 3600) × 1,000,000
    input  $/M tokens    = f × cluster $/hour ÷ (input-token goodput/s × 3600) × 1,000,000
    output $/M tokens    = (1 − f) × cluster $/hour ÷ (output-token goodput/s × 3600) × 1,000,000

where f is the share of GPU time spent in prefill at the capacity stage: prefill of a mean prompt
versus that request's share of the decode steps at the batch size the engine ran (vLLM's
``num_requests_running`` from the run's engine metrics, else Little's law), both timed by the
performance model (engines/perf.py). At capacity the two prices together recover exactly the
cluster's hourly cost. Several deployments combine weighted by their route weights.
"""

from __future__ import annotations

import hashlib
import json
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction

from billing.selectors.prices import price_for
from billing.services.prices import price_publish
from catalog.selectors import gpu_cost_in_force, gpu_type_find, model_version_find
from deployments.selectors import routing_table
from engines.perf import PerfModel
from evaluations.models import BenchmarkRun
from evaluations.selectors.benchmarks import latest_capacity

FORMULA = (
    "price $/M = GPUs × $/GPU-hour ÷ (capacity goodput tokens/s × 3600) × 1,000,000; "
    "input = f × that hourly cost ÷ input-token goodput, output = (1 − f) × it ÷ output-token goodput, "
    "f = prefill share of GPU time"
)
CENT = Decimal("0.001")


def _prefill_share(run: BenchmarkRun, stage: dict, capacity: dict) -> dict:
    """f and how it was found; ``None`` f when the model or GPU is unknown."""
    snap = run.snapshot or {}
    completed = stage.get("completed") or 0
    mean_in = (stage.get("input_tokens") or 0) / completed if completed else 0.0
    mean_out = (stage.get("output_tokens") or 0) / completed if completed else 0.0
    samples = [
        s["running"]
        for s in (run.series or [])
        if s.get("stage") == capacity.get("stage") and s.get("running") is not None
    ]
    if samples and sum(samples) > 0:
        batch = sum(samples) / len(samples)
        batch_source = "engine metrics: mean vllm:num_requests_running at the capacity stage"
    else:
        e2e = ((stage.get("e2e_ms") or {}).get("mean") or 0.0) / 1000.0
        batch = (capacity.get("request_goodput") or 0.0) * e2e
        batch_source = "Little's law: request goodput × mean E2E latency"
    batch = max(1.0, batch)
    version = model_version_find(pk=snap.get("model_version_id"))
    gpu = gpu_type_find(pk=snap.get("gpu_type_id"))
    out = {"mean_input_tokens": round(mean_in, 2), "mean_output_tokens": round(mean_out, 2),
           "batch": round(batch, 2), "batch_source": batch_source}  # fmt: skip
    if version is None or gpu is None or mean_in <= 0 or mean_out <= 0:
        out.update(f=None, source="unknown model, GPU or lengths: input and output share one blended price")
        return out
    perf = PerfModel(
        model=version.to_spec(), gpu=gpu.to_spec(), tensor_parallel=int(snap.get("tensor_parallel") or 1)
    )
    t_prefill = perf.prefill_time(max(1, round(mean_in)))
    step = perf.decode_step_time(max(1, round(batch)), max(1, round(mean_in + mean_out / 2)))
    t_decode = mean_out * step / batch
    out.update(
        f=t_prefill / (t_prefill + t_decode),
        prefill_s=t_prefill,
        decode_s=t_decode,
        source="performance model (engines/perf.py) at the measured batch size",
    )
    return out


def _component(target: dict) -> dict:
    """One deployment's derivation, or why it cannot give one."""
    dep_id, slug = target["deployment_id"], target["deployment_slug"]
    base = {
        "deployment_id": dep_id,
        "deployment": slug,
        "weight": target["weight"],
        "pool": target.get("pool") or "",
    }
    run = latest_capacity(deployment_id=dep_id)
    if run is None:
        missed = (
            BenchmarkRun.objects.filter(deployment_id=dep_id, status="succeeded", capacity_rps__isnull=True)
            .order_by("-created_at")
            .first()
        )
        why = (
            f"Benchmark #{missed.pk} met the SLA at no stage: no capacity goodput, so no price can be derived."
            if missed
            else "No succeeded benchmark with a capacity goodput: run one (measured, or predicted by the simulator)."
        )
        return {**base, "ok": False, "why": why, "run_id": missed.pk if missed else None}
    results = run.results or {}
    capacity = results.get("capacity") or {}
    stages = results.get("stages") or []
    stage = next((s for s in stages if s.get("stage") == capacity.get("stage")), {})
    total = capacity.get("total_token_goodput") or 0.0
    out_tps = capacity.get("token_goodput") or 0.0
    in_tps = max(0.0, total - out_tps)
    gpus = (run.snapshot or {}).get("gpus") or 0
    if total <= 0 or out_tps <= 0:
        return {
            **base,
            "ok": False,
            "run_id": run.pk,
            "why": f"Benchmark #{run.pk} has zero token goodput: no price can be derived.",
        }
    if not gpus:
        return {
            **base,
            "ok": False,
            "run_id": run.pk,
            "why": f"Benchmark #{run.pk} records no GPU count: no cost basis.",
        }
    gpu_type_id = (run.snapshot or {}).get("gpu_type_id")
    version = gpu_cost_in_force(gpu_type_id=gpu_type_id, pool=base["pool"]) if gpu_type_id else None
    if version is not None:
        per_gpu_hour = float(version.usd_per_gpu_hour)
        cost_source = {"gpu_cost_version_id": version.pk, "gpu_cost_formula": version.formula,
                       "gpu_cost_terms": version.terms}  # fmt: skip
    elif (run.snapshot or {}).get("gpu_usd_per_hour") is not None:
        per_gpu_hour = float(run.snapshot["gpu_usd_per_hour"])
        cost_source = {"gpu_cost_version_id": None,
                       "gpu_cost_formula": "GPU type's hourly figure frozen in the run (no cost version yet)"}  # fmt: skip
    else:
        return {
            **base,
            "ok": False,
            "run_id": run.pk,
            "why": "No GPU hourly cost is known for this GPU type.",
        }
    if per_gpu_hour <= 0:
        return {
            **base,
            "ok": False,
            "run_id": run.pk,
            "why": "The GPU hourly cost is $0: no price can be derived.",
        }
    usd_per_hour = gpus * per_gpu_hour
    split = _prefill_share(run, stage, capacity)
    blended = usd_per_hour / (total * 3600) * 1e6
    f = split["f"]
    if f is None or in_tps <= 0:
        input_pm = output_pm = blended
    else:
        input_pm = f * usd_per_hour / (in_tps * 3600) * 1e6
        output_pm = (1 - f) * usd_per_hour / (out_tps * 3600) * 1e6
    return {
        **base,
        "ok": True,
        "run_id": run.pk,
        "label": run.kind,
        "gpu_type": (run.snapshot or {}).get("gpu_type"),
        "gpus": gpus,
        "usd_per_gpu_hour": per_gpu_hour,
        "usd_per_hour": usd_per_hour,
        "capacity_rps": capacity.get("rate"),
        "input_token_goodput": in_tps,
        "output_token_goodput": out_tps,
        "total_token_goodput": total,
        "blended_per_million": blended,
        "input_per_million": input_pm,
        "output_per_million": output_pm,
        "split": split,
        **cost_source,
    }


def price_derivation(*, public_model: str) -> dict:
    """The derived price of a public model with every input, or ``derivable=False`` and why."""
    route = routing_table().get(public_model)
    if route is None:
        return {
            "public_model": public_model,
            "derivable": False,
            "why": "No route serves this model.",
            "components": [],
        }
    targets = [t for t in route["targets"] if t["weight"] > 0] or route["targets"]
    components = [_component(t) for t in targets]
    good = [c for c in components if c["ok"]]
    result = {"public_model": public_model, "components": components, "formula": FORMULA,
              "in_force": price_for(public_model=public_model)}  # fmt: skip
    if not good:
        why = "; ".join(c["why"] for c in components) or "The route has no deployments."
        return {**result, "derivable": False, "why": why}
    weights = [c["weight"] or 1 for c in good]
    wsum = sum(weights)

    def wavg(key):
        return sum(c[key] * w for c, w in zip(good, weights, strict=True)) / wsum

    input_pm = Decimal(str(wavg("input_per_million"))).quantize(CENT, rounding=ROUND_HALF_UP)
    output_pm = Decimal(str(wavg("output_per_million"))).quantize(CENT, rounding=ROUND_HALF_UP)
    label = "measured" if all(c["label"] == "measured" for c in good) else "predicted"
    provenance = {
        "label": label,
        "run_id": good[0]["run_id"],
        "gpu_cost_version_id": good[0]["gpu_cost_version_id"],
        "formula": FORMULA,
        "inputs": [
            {
                k: c.get(k)
                for k in (
                    "deployment",
                    "deployment_id",
                    "weight",
                    "run_id",
                    "label",
                    "gpu_type",
                    "gpus",
                    "usd_per_gpu_hour",
                    "usd_per_hour",
                    "gpu_cost_version_id",
                    "gpu_cost_formula",
                    "input_token_goodput",
                    "output_token_goodput",
                    "total_token_goodput",
                    "blended_per_million",
                    "input_per_million",
                    "output_per_million",
                    "split",
                )
            }
            for c in good
        ],  # fmt: skip
        "skipped": [{"deployment": c["deployment"], "why": c["why"]} for c in components if not c["ok"]],
    }
    fingerprint = hashlib.sha256(
        json.dumps(
            {"p": provenance, "i": str(input_pm), "o": str(output_pm)}, sort_keys=True, default=str
        ).encode()
    ).hexdigest()[:16]
    derivable = input_pm > 0 and output_pm > 0
    return {
        **result,
        "derivable": derivable,
        "why": "" if derivable else "The derived price rounds to $0.000 per million tokens.",
        "label": label,
        "input_per_million": input_pm,
        "output_per_million": output_pm,
        "blended_per_million": Decimal(str(wavg("blended_per_million"))).quantize(
            CENT, rounding=ROUND_HALF_UP
        ),
        "provenance": provenance,
        "fingerprint": fingerprint,
    }


def price_derivations() -> list[dict]:
    return [price_derivation(public_model=name) for name in sorted(routing_table())]


@transaction.atomic
def derived_price_publish(*, public_model: str, fingerprint: str, actor, note: str = ""):
    """Publish the derivation the admin reviewed. Recomputed here; refused if it changed meanwhile."""
    d = price_derivation(public_model=public_model)
    if not d["derivable"]:
        raise ValidationError({"public_model": d["why"]})
    if d["fingerprint"] != fingerprint:
        raise ValidationError(
            {
                "fingerprint": "The derivation changed since you reviewed it (a new run or cost version): review it again."
            }
        )
    return price_publish(
        public_model=public_model,
        input_per_million=d["input_per_million"],
        output_per_million=d["output_per_million"],
        provenance=d["provenance"],
        note=note or f"derived from {d['label']} benchmark #{d['provenance']['run_id']}",
        actor=actor,
    )
