"""The capacity planner (DOMAIN.md "Capacity planning"):

    peak effective tokens/s = peak QPS × (mean input + mean output tokens)
    GPUs needed             = peak effective tokens/s ÷ per-GPU goodput tokens/s × redundancy,
                              rounded up to whole replicas of ``tensor_parallel`` GPUs
    monthly cost            = GPUs × $/GPU-hour × 730.5 h

Per-GPU goodput is the capacity goodput (total tokens/s of requests that met the SLA, at the
highest rate whose attainment held the target) divided by the GPUs that produced it: from a
measured benchmark of the same model version, GPU type and TP whose SLA was at least as strict,
else predicted by the virtual-time simulator for this traffic shape. Each row says which.
The $/GPU-hour is the GPU cost version in force before its utilization divisor: the plan sizes
the whole fleet, so idle headroom is already in the GPU count.
"""

from __future__ import annotations

import math
import uuid
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction

from catalog.selectors import gpu_cost_in_force, gpu_type_find, model_version_find
from catalog.services import gpu_hourly_cost, memory_estimate
from core.lifecycle import run_claim, run_fail, run_finish, run_report
from engines.scheduler import EngineConfig
from engines.sim import SimConfig
from engines.workload import Workload, lognormal, poisson
from evaluations.models import BenchmarkRun, CapacityPlan
from evaluations.services.calibrations import prediction_basis
from events.services import emit
from loadtest.metrics import Sla
from loadtest.predict import PredictedEngine
from loadtest.runner import StageConfig
from loadtest.sweep import SweepConfig, find_capacity

HOURS_PER_MONTH = 730.5
MAX_CANDIDATES = 24
FORMULA = (
    "GPUs = ⌈peak QPS × (mean in + mean out) tokens ÷ per-GPU goodput × redundancy ÷ TP⌉ × TP; "
    "monthly = GPUs × $/GPU-hour × 730.5 h"
)


def plan_inputs_validate(inputs: dict) -> dict:
    """Normalised inputs, or ValidationError naming each bad one."""
    errors = {}
    out = {}
    for key, low, msg in (
        ("peak_qps", 0, "Peak QPS must be above 0."),
        ("input_mean", 1, "Mean input length must be at least 1 token."),
        ("output_mean", 1, "Mean output length must be at least 1 token."),
        ("ttft_ms", 0, "The TTFT limit must be above 0 ms."),
        ("tpot_ms", 0, "The TPOT limit must be above 0 ms."),
        ("redundancy", 1, "Redundancy is a factor of at least 1.0 (e.g. 1.3 for 30% headroom)."),
    ):
        try:
            v = float(inputs.get(key))
        except (TypeError, ValueError):
            errors[key] = msg
            continue
        if not math.isfinite(v) or v < low or (low == 0 and v == 0):
            errors[key] = msg
        out[key] = v
    for key in ("input_sigma", "output_sigma"):
        try:
            v = float(inputs.get(key) or 0.0)
        except (TypeError, ValueError):
            v = -1
        if not 0 <= v <= 3:
            errors[key] = "The spread (lognormal sigma) is between 0 and 3."
        out[key] = v
    if errors:
        raise ValidationError(errors)
    return out


def _measured(
    version_id: int, gpu_type_id: int, tp: int, ttft_ms: float, tpot_ms: float
) -> BenchmarkRun | None:
    qs = BenchmarkRun.objects.filter(
        kind="measured",
        status="succeeded",
        capacity_rps__isnull=False,
        snapshot__model_version_id=version_id,
        snapshot__gpu_type_id=gpu_type_id,
        snapshot__tensor_parallel=tp,
    ).order_by("-created_at")
    for run in qs[:20]:
        sla = run.sla or {}
        stricter = (sla.get("ttft_ms") or math.inf) <= ttft_ms and (sla.get("tpot_ms") or math.inf) <= tpot_ms
        per_gpu = ((run.results or {}).get("capacity") or {}).get("per_gpu") or {}
        if stricter and per_gpu.get("total_token_goodput"):
            return run
    return None


def _predicted(version, gpu, tp: int, inputs: dict) -> dict:
    dist_in = lognormal(inputs["input_mean"], max(inputs["input_sigma"], 1e-6), max=version.model.max_context)
    dist_out = lognormal(
        inputs["output_mean"], max(inputs["output_sigma"], 1e-6), max=version.model.max_context
    )
    wl = Workload(arrival=poisson(1.0), input=dist_in, output=dist_out)
    efficiency, basis = prediction_basis(gpu_type=gpu)
    engine = PredictedEngine(
        config=SimConfig(
            model=version.to_spec(), gpu=gpu.to_spec(), tensor_parallel=tp, engine=EngineConfig(),
            efficiency=efficiency,
        )
    )  # fmt: skip
    result = find_capacity(
        target=None,
        workload=wl,
        stage=StageConfig(duration_s=20.0),
        sla=Sla(ttft_ms=inputs["ttft_ms"], tpot_ms=inputs["tpot_ms"]),
        sweep=SweepConfig(start_rate=1.0, max_stages=12),
        stage_fn=engine.stage,
    )
    rate = result.get("capacity_rate")
    stage = next((s for s in result["stages"] if (s.get("offered") or {}).get("rate") == rate), None)
    total = (stage or {}).get("total_token_goodput") or 0.0
    return {"capacity_rps": rate, "total_token_goodput": total, "converged": result.get("converged"),
            "basis": basis["calibration"]}  # fmt: skip


def memory_summary(mem) -> dict:
    """Where one replica's memory goes (GiB over its GPUs), stored with the plan so the page can say it."""
    gib = 1024**3
    return {
        "embeddings_gib": round(mem.weight_embedding_bytes / gib, 2),
        "layers_gib": round(mem.weight_layer_bytes / gib, 2),
        "lm_head_gib": round(mem.weight_lm_head_bytes / gib, 2),
        "reserve_gib": round(mem.activation_reserve_bytes / gib, 2),
        "kv_pool_gib": round(mem.kv_pool_bytes / gib, 2),
        "kv_tokens": mem.kv_capacity_tokens,
        "memory_source": mem.memory_source,
    }


def plan_row(*, version_id: int, gpu_type_id: int, tensor_parallel: int, inputs: dict) -> dict:
    """One candidate's answer (or why there is none)."""
    version = model_version_find(pk=version_id)
    gpu = gpu_type_find(pk=gpu_type_id)
    tp = int(tensor_parallel)
    row = {"model_version_id": version_id, "gpu_type_id": gpu_type_id, "tensor_parallel": tp}
    if version is None or gpu is None:
        return {**row, "ok": False, "why": "Unknown model version or GPU type."}
    row.update(candidate=f"{version} on {gpu.name} TP={tp}", gpu_type=gpu.name, model_version=str(version))
    mem = memory_estimate(model=version.model, gpu_type=gpu, precision=version.precision,
                          kv_cache_dtype=version.kv_cache_dtype, tensor_parallel=tp,
                          context_len=int(inputs["input_mean"] + inputs["output_mean"]) * 2)  # fmt: skip
    row["memory"] = memory_summary(mem)
    if not mem.fits:
        return {**row, "ok": False, "why": f"Does not fit: {mem.reason}."}
    run = _measured(version_id, gpu_type_id, tp, inputs["ttft_ms"], inputs["tpot_ms"])
    if run is not None:
        per_gpu = run.results["capacity"]["per_gpu"]["total_token_goodput"]
        row.update(label="measured", run_id=run.pk, per_gpu_goodput=per_gpu)
    else:
        p = _predicted(version, gpu, tp, inputs)
        if not p["total_token_goodput"]:
            return {**row, "ok": False, "label": "predicted",
                    "why": "The simulator found no rate that meets this SLA on this candidate: no capacity goodput."}  # fmt: skip
        row.update(label="predicted", run_id=None, per_gpu_goodput=p["total_token_goodput"] / tp,
                   basis=p["basis"])  # fmt: skip
    version_cost = gpu_cost_in_force(gpu_type_id=gpu.pk)
    if version_cost is not None:
        usd = float(Decimal(version_cost.terms.get("before_utilization") or version_cost.usd_per_gpu_hour))
        row["gpu_cost_version_id"] = version_cost.pk
    else:
        usd = float(gpu_hourly_cost(gpu))
        row["gpu_cost_version_id"] = None
    peak_tps = inputs["peak_qps"] * (inputs["input_mean"] + inputs["output_mean"])
    raw_gpus = peak_tps / row["per_gpu_goodput"] * inputs["redundancy"]
    replicas = max(1, math.ceil(raw_gpus / tp - 1e-9))
    gpus = replicas * tp
    row.update(
        ok=True,
        peak_tokens_per_s=peak_tps,
        gpus_exact=raw_gpus,
        replicas=replicas,
        gpus=gpus,
        usd_per_gpu_hour=usd,
        monthly_usd=gpus * usd * HOURS_PER_MONTH,
        max_concurrent_seqs=mem.max_concurrent_seqs,
    )
    return row


@transaction.atomic
def capacity_plan_create(*, name: str, inputs: dict, candidates: list[dict], actor) -> CapacityPlan:
    """Validate and save a plan, then compute it on a worker (its row shows progress).

    Nothing is saved when an input or the candidate list is bad.
    """
    clean = plan_inputs_validate(inputs)
    if not candidates:
        raise ValidationError(
            {"candidates": "A plan needs at least one candidate (model version × GPU type × TP)."}
        )
    if len(candidates) > MAX_CANDIDATES:
        raise ValidationError({"candidates": f"At most {MAX_CANDIDATES} candidates per plan."})
    if not (name or "").strip():
        raise ValidationError({"name": "Give the plan a name."})
    plan = CapacityPlan.objects.create(
        token=uuid.uuid4(),
        name=name.strip()[:128],
        inputs={**clean, "formula": FORMULA},
        candidates=candidates,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    emit("evaluations.capacity_plan_queued", subject=plan, payload={"plan": plan.pk})
    return plan


def _enqueue(plan_id: int) -> None:
    from evaluations.tasks import capacity_plan_compute_task

    capacity_plan_compute_task.delay(plan_id)


def capacity_plan_compute(*, plan_id: int) -> CapacityPlan:
    """Compute a queued plan, candidate by candidate, recording progress. Idempotent: a plan that is
    not queued any more is left alone."""
    if not run_claim(CapacityPlan, pk=plan_id):
        return CapacityPlan.objects.get(pk=plan_id)
    plan = CapacityPlan.objects.get(pk=plan_id)
    rows = []
    try:
        for i, c in enumerate(plan.candidates):
            rows.append(
                plan_row(version_id=c["model_version_id"], gpu_type_id=c["gpu_type_id"],
                         tensor_parallel=c["tensor_parallel"], inputs=plan.inputs)
            )  # fmt: skip
            run_report(CapacityPlan, pk=plan_id, progress=int(100 * (i + 1) / len(plan.candidates)))
    except Exception as exc:
        run_fail(CapacityPlan, pk=plan_id, error=f"{type(exc).__name__}: {exc}")
        raise
    rows.sort(key=lambda r: (not r["ok"], r.get("monthly_usd") or 0))
    run_finish(CapacityPlan, pk=plan_id, rows=rows)
    return CapacityPlan.objects.get(pk=plan_id)
