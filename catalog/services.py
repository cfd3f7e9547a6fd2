"""Catalog writes and computations. Views and the API call these; they own validation and transactions."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction

from catalog.constants import LIFECYCLE_TRANSITIONS
from catalog.models import GpuType, Model, ModelVersion
from engines.memory import MemoryEstimate, estimate_memory

HOURS_PER_YEAR = Decimal("8766")  # 365.25 days
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


def gpu_hourly_cost(gpu_type: GpuType) -> Decimal:
    """$ per GPU-hour: the owned-GPU TCO when its inputs are complete, else the rental price.

    TCO/hour = purchase / (years * 8766) + power_kW * PUE * $/kWh + datacenter_ops_per_month / 730.5
    (DOMAIN.md "Cost": depreciation, power, datacenter and operations, not just a rental price).
    """
    g = gpu_type
    tco_inputs = (g.purchase_price_usd, g.depreciation_years, g.power_kw, g.pue, g.electricity_usd_per_kwh)
    if all(value is not None for value in tco_inputs):
        depreciation = g.purchase_price_usd / (g.depreciation_years * HOURS_PER_YEAR)
        power = g.power_kw * g.pue * g.electricity_usd_per_kwh
        ops = (g.datacenter_ops_usd_per_month or Decimal("0")) / HOURS_PER_MONTH
        return (depreciation + power + ops).quantize(Decimal("0.0001"))
    return g.rental_usd_per_hour


def model_version_memory_estimates(
    *,
    version: ModelVersion,
    gpu_types: list[GpuType],
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8),
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
) -> list[dict]:
    """For each GPU type, the smallest TP size that fits and its estimate, plus every TP tried.

    Returns one row per GPU type: ``{"gpu", "best": MemoryEstimate | None, "shown", "by_tp": [...]}`` where
    ``shown`` is the best fit or, when nothing fits, the largest TP tried (to say by how much it misses).
    """
    spec = version.to_spec()
    rows = []
    for gpu in gpu_types:
        by_tp: list[MemoryEstimate] = [
            estimate_memory(
                model=spec,
                gpu=gpu.to_spec(),
                tensor_parallel=tp,
                gpu_memory_utilization=gpu_memory_utilization,
                context_len=context_len,
            )
            for tp in tensor_parallel_sizes
        ]
        best = next((e for e in by_tp if e.fits), None)
        rows.append({"gpu": gpu, "best": best, "shown": best or by_tp[-1], "by_tp": by_tp})
    return rows


@transaction.atomic
def model_version_create(*, actor, **fields) -> ModelVersion:
    """Create a version in ``draft`` (unless a lifecycle is given) and record who made it."""
    # A system actor ("system:seed") is a string: the row then has no creating user.
    version = ModelVersion(created_by=actor if getattr(actor, "pk", None) else None, **fields)
    version.full_clean()
    version.save()
    return version


@transaction.atomic
def model_version_transition(*, version: ModelVersion, to: str, actor) -> ModelVersion:
    """Move a version along its lifecycle; refuses moves the lifecycle does not allow.

    Uses a conditional UPDATE so two concurrent transitions cannot both succeed.
    """
    allowed = LIFECYCLE_TRANSITIONS.get(version.lifecycle, set())
    if to not in allowed:
        raise ValidationError(
            {
                "lifecycle": f"Cannot move from {version.lifecycle} to {to}; allowed: {sorted(allowed) or 'none'}."
            }
        )
    updated = ModelVersion.objects.filter(pk=version.pk, lifecycle=version.lifecycle).update(lifecycle=to)
    if updated != 1:
        raise ValidationError({"lifecycle": "The version changed meanwhile; reload and try again."})
    version.refresh_from_db()
    return version


def model_validate_and_save(*, model: Model) -> Model:
    model.full_clean()
    model.save()
    return model


def gpu_type_validate_and_save(*, gpu_type: GpuType) -> GpuType:
    gpu_type.full_clean()
    gpu_type.save()
    return gpu_type


# --- plain create/update by field values (the demo seed and scripts use these) ------------------


@transaction.atomic
def gpu_type_create(*, actor, **fields) -> GpuType:
    """Create a GPU type from field values (validated like the form's)."""
    return gpu_type_validate_and_save(gpu_type=GpuType(**fields))


@transaction.atomic
def gpu_type_update(*, gpu_type: GpuType, actor, **fields) -> GpuType:
    for name, value in fields.items():
        setattr(gpu_type, name, value)
    return gpu_type_validate_and_save(gpu_type=gpu_type)


@transaction.atomic
def model_create(*, actor, **fields) -> Model:
    """Create a model (architecture facts from its config.json)."""
    return model_validate_and_save(model=Model(**fields))


@transaction.atomic
def model_update(*, model: Model, actor, **fields) -> Model:
    for name, value in fields.items():
        setattr(model, name, value)
    return model_validate_and_save(model=model)
