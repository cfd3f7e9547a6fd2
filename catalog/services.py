"""Catalog writes and computations. Views and the API call these; they own validation and transactions."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_delete, audit_record, audit_save, fields_of, snapshot
from catalog.constants import (
    GATED_LIFECYCLE,
    LIFECYCLE_TRANSITIONS,
    MIN_OVERRIDE_REASON_CHARS,
    Lifecycle,
)
from catalog.models import GpuCostVersion, GpuType, Model, ModelVersion
from catalog.promotion import version_promotion
from core.access import is_platform_admin
from core.text import REASON_MAX_CHARS
from engines.memory import MemoryEstimate, estimate_memory
from engines.specs import UnknownKvCacheDtypeError, UnknownPrecisionError

HOURS_PER_YEAR = Decimal("8766")  # 365.25 days
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


def gpu_hourly_cost(gpu_type: GpuType) -> Decimal:
    """$ per GPU-hour used for pricing: the all-pools GPU cost version in force when there is one
    (its formula and terms are on the GPU page), else the owned-GPU TCO when the GPU type's own
    inputs are complete, else the rental price.

    TCO/hour = purchase / (years * 8766) + power_kW * PUE * $/kWh + datacenter_ops_per_month / 730.5
    (docs/domain.md "Capacity and cost": depreciation, power, datacenter and operations, not just a rental price).
    """
    from django.utils import timezone

    version = (
        GpuCostVersion.objects.filter(gpu_type=gpu_type, pool="", effective_from__lte=timezone.now())
        .order_by("-effective_from", "-pk")
        .first()
    )
    if version is not None:
        return version.usd_per_gpu_hour
    g = gpu_type
    tco_inputs = (g.purchase_price_usd, g.depreciation_years, g.power_kw, g.pue, g.electricity_usd_per_kwh)
    if all(value is not None for value in tco_inputs):
        depreciation = g.purchase_price_usd / (g.depreciation_years * HOURS_PER_YEAR)
        power = g.power_kw * g.pue * g.electricity_usd_per_kwh
        ops = (g.datacenter_ops_usd_per_month or Decimal("0")) / HOURS_PER_MONTH
        return (depreciation + power + ops).quantize(Decimal("0.0001"))
    return g.rental_usd_per_hour


def memory_estimate(
    *,
    model: Model,
    gpu_type: GpuType,
    precision: str,
    kv_cache_dtype: str = "auto",
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool = False,
) -> MemoryEstimate:
    """The one memory/KV estimate every page and check uses (vLLM V1's accounting, ADR 0021).

    A precision, KV dtype or GPU the estimator has no figures for is refused with a ``ValidationError``
    that names it; nothing is guessed.
    """
    if gpu_type is None or not isinstance(gpu_type, GpuType):
        raise ValidationError(
            f"Unknown GPU type {gpu_type!r}: the estimate knows only the catalog's GPU types."
        )
    try:
        return estimate_memory(
            model=model.to_spec(precision=precision, kv_cache_dtype=kv_cache_dtype),
            gpu=gpu_type.to_spec(),
            tensor_parallel=tensor_parallel,
            gpu_memory_utilization=gpu_memory_utilization,
            context_len=context_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
        )
    except (UnknownPrecisionError, UnknownKvCacheDtypeError) as exc:
        raise ValidationError(str(exc)) from exc
    except ValueError as exc:
        raise ValidationError(f"Cannot estimate memory: {exc}.") from exc


def model_version_memory_estimates(
    *,
    version: ModelVersion,
    gpu_types: list[GpuType],
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8),
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
    precision: str | None = None,
    kv_cache_dtype: str | None = None,
    max_num_batched_tokens: int | None = None,
) -> list[dict]:
    """For each GPU type, the smallest TP size that fits and its estimate, plus every TP tried.

    Returns one row per GPU type: ``{"gpu", "best": MemoryEstimate | None, "shown", "by_tp": [...]}`` where
    ``shown`` is the best fit or, when nothing fits, the largest TP tried (to say by how much it misses).
    """
    rows = []
    for gpu in gpu_types:
        by_tp: list[MemoryEstimate] = [
            memory_estimate(
                model=version.model,
                gpu_type=gpu,
                precision=precision or version.precision,
                kv_cache_dtype=kv_cache_dtype or version.kv_cache_dtype,
                tensor_parallel=tp,
                gpu_memory_utilization=gpu_memory_utilization,
                context_len=context_len,
                max_num_batched_tokens=max_num_batched_tokens,
            )
            for tp in tensor_parallel_sizes
        ]
        best = next((e for e in by_tp if e.fits), None)
        rows.append({"gpu": gpu, "best": best, "shown": best or by_tp[-1], "by_tp": by_tp})
    return rows


def _before(instance) -> dict | None:
    """The stored row behind ``instance`` as audit data, or None for a new one."""
    if instance.pk is None:
        return None
    stored = type(instance).objects.filter(pk=instance.pk).first()
    return snapshot(stored) if stored is not None else None


@transaction.atomic
def model_version_create(*, actor, **fields) -> ModelVersion:
    """Create a version in ``draft`` (unless a lifecycle is given) and record who made it."""
    # A system actor ("system:seed") is a string: the row then has no creating user.
    version = ModelVersion(created_by=actor if getattr(actor, "pk", None) else None, **fields)
    version.full_clean()
    version.save()
    audit_save(actor=actor, instance=version, before=None)
    return version


@transaction.atomic
def model_version_save(*, instance: ModelVersion, actor, reason: str = "") -> ModelVersion:
    """Create or edit a version's facts. The lifecycle moves only through ``model_version_transition``."""
    before = _before(instance)
    if before is not None and before.get("lifecycle") != instance.lifecycle:
        raise ValidationError({"lifecycle": "Change the lifecycle with a transition, not an edit."})
    if before is None:
        instance.created_by = actor if getattr(actor, "pk", None) else None
    instance.full_clean()
    instance.save()
    audit_save(actor=actor, instance=instance, before=before, reason=reason)
    return instance


@transaction.atomic
def model_version_delete(*, instance: ModelVersion, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)


def _label(lifecycle: str) -> str:
    try:
        return Lifecycle(lifecycle).label
    except ValueError:
        return lifecycle


@transaction.atomic
def model_version_transition(
    *, version: ModelVersion, to: str, actor, reason: str = "", override: bool = False
) -> ModelVersion:
    """Move a version along its lifecycle (the catalog's state machine) and audit the move.

    - Only the moves in ``LIFECYCLE_TRANSITIONS`` are allowed.
    - The move to *approved* asks the promotion rule (``catalog.promotion``, answered by the eval
      gates): without ``may_approve`` it needs ``override=True`` by a platform admin with a written
      ``reason``, recorded on the version and in the audit trail as ``model_version.gate_override``.
    The row is locked for the check and the update, so two concurrent moves cannot both succeed.
    """
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX_CHARS:
        raise ValidationError({"reason": f"At most {REASON_MAX_CHARS} characters."})
    if to not in Lifecycle.values:
        raise ValidationError({"lifecycle": f"Unknown lifecycle state {to!r}."})
    locked = ModelVersion.objects.select_for_update(of=("self",)).select_related("model").get(pk=version.pk)
    if locked.lifecycle != version.lifecycle:
        raise ValidationError({"lifecycle": "The version changed meanwhile; reload and try again."})
    current = locked.lifecycle
    allowed = LIFECYCLE_TRANSITIONS.get(current, set())
    if to not in allowed:
        options = ", ".join(_label(a) for a in sorted(allowed)) or "none (this is a final state)"
        raise ValidationError(
            {
                "lifecycle": f"A {_label(current)} version cannot move to {_label(to)}; allowed moves: {options}."
            }
        )
    gates: dict = {}
    changes: dict = {"lifecycle": to}
    if to == GATED_LIFECYCLE:
        promotion = version_promotion(version=locked)
        gates = promotion.evidence
        if not promotion.may_approve:
            blocking = "; ".join(promotion.blocking or ["required gates have not passed"])
            if not override:
                raise ValidationError(
                    {
                        "lifecycle": f"Cannot approve {locked}: {blocking}. "
                        "A platform admin may override the gates with a written reason."
                    }
                )
            if not is_platform_admin(actor):
                raise ValidationError({"lifecycle": "Only a platform admin may override the eval gates."})
            if len(reason) < MIN_OVERRIDE_REASON_CHARS:
                raise ValidationError(
                    {
                        "reason": f"An override needs a written reason of at least "
                        f"{MIN_OVERRIDE_REASON_CHARS} characters."
                    }
                )
            changes.update(
                gate_override_reason=reason, gate_override_by=actor, gate_override_at=timezone.now()
            )
        elif override:
            override = False  # the gates passed: nothing to override
    elif override:
        raise ValidationError({"lifecycle": "An override applies only to the move to Approved."})
    before = fields_of(locked, [n for n in changes])
    for name, value in changes.items():
        setattr(locked, name, value)
    locked.save(update_fields=[*changes, "updated_at"])
    after = fields_of(locked, [n for n in changes])
    evidence = {"gates": gates} if gates else {}
    audit_record(
        actor=actor,
        action="model_version.transition",
        target=locked,
        before=before,
        after=after,
        reason=reason,
        evidence=evidence,
    )
    if override:
        audit_record(
            actor=actor,
            action="model_version.gate_override",
            target=locked,
            before={"lifecycle": current},
            after={"lifecycle": to},
            reason=reason,
            evidence=evidence,
        )
    version.refresh_from_db()
    return version


@transaction.atomic
def model_version_set_quality_profile(*, version: ModelVersion, profile: dict, actor) -> ModelVersion:
    """Set the simulated quality profile of a version (validated, audited)."""
    before = fields_of(version, ["quality_profile"])
    version.quality_profile = profile or {}
    version.full_clean()
    version.save(update_fields=["quality_profile", "updated_at"])
    audit_record(
        actor=actor,
        action="model_version.set_quality_profile",
        target=version,
        before=before,
        after=fields_of(version, ["quality_profile"]),
    )
    return version


def _audited_save(instance, actor, reason: str):
    before = _before(instance)
    instance.full_clean()
    instance.save()
    audit_save(actor=actor, instance=instance, before=before, reason=reason)
    return instance


def _audited_delete(instance, actor, reason: str) -> None:
    audit_delete(actor=actor, instance=instance, reason=reason)
    instance.delete()


@transaction.atomic
def model_save(*, instance: Model, actor, reason: str = "") -> Model:
    return _audited_save(instance, actor, reason)


@transaction.atomic
def model_delete(*, instance: Model, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)


@transaction.atomic
def gpu_type_save(*, instance: GpuType, actor, reason: str = "") -> GpuType:
    return _audited_save(instance, actor, reason)


@transaction.atomic
def gpu_type_delete(*, instance: GpuType, actor, reason: str = "") -> None:
    _audited_delete(instance, actor, reason)


# --- GPU hourly cost versions -------------------------------------------------------------------

GPU_COST_INPUTS = (
    "rent_usd_per_hour", "purchase_price_usd", "depreciation_years", "power_kw", "pue",
    "electricity_usd_per_kwh", "datacenter_usd_per_month", "operations_usd_per_month",
)  # fmt: skip
RENT_FORMULA = "rent $/GPU-hour ÷ target utilization"
TCO_FORMULA = (
    "(purchase ÷ (years × 8766 h) + kW × PUE × $/kWh + (datacenter + operations $/month) ÷ 730.5 h)"
    " ÷ target utilization"
)


def gpu_cost_compute(
    *,
    basis: str,
    target_utilization: Decimal,
    rent_usd_per_hour: Decimal | None = None,
    purchase_price_usd: Decimal | None = None,
    depreciation_years: Decimal | None = None,
    power_kw: Decimal | None = None,
    pue: Decimal | None = None,
    electricity_usd_per_kwh: Decimal | None = None,
    datacenter_usd_per_month: Decimal | None = None,
    operations_usd_per_month: Decimal | None = None,
) -> tuple[Decimal, str, dict]:
    """($ per GPU-hour, formula, terms) from the inputs; ValidationError naming the bad input.

    Dividing by the target utilization spreads the hours a GPU sits idle over the hours it works:
    at 60% utilization each working hour carries 1/0.6 of an hour's cost.
    """
    errors: dict[str, str] = {}
    u = target_utilization
    if u is None or not (Decimal("0") < u <= Decimal("1")):
        errors["target_utilization"] = "Target utilization must be in (0, 1], e.g. 0.6 for 60%."
    if basis == GpuCostVersion.Basis.RENT:
        if rent_usd_per_hour is None or rent_usd_per_hour <= 0:
            errors["rent_usd_per_hour"] = "A rented GPU needs a rent above $0 per hour."
        if errors:
            raise ValidationError(errors)
        raw = rent_usd_per_hour
        terms = {"rent": str(raw)}
        formula = RENT_FORMULA
    elif basis == GpuCostVersion.Basis.TCO:
        if purchase_price_usd is None or purchase_price_usd <= 0:
            errors["purchase_price_usd"] = "An owned GPU needs a purchase price above $0."
        if depreciation_years is None or depreciation_years <= 0:
            errors["depreciation_years"] = "Depreciation years must be above 0."
        if power_kw is None or power_kw < 0:
            errors["power_kw"] = "Power (kW) cannot be negative."
        if pue is None or pue < 1:
            errors["pue"] = "PUE is at least 1.0."
        if electricity_usd_per_kwh is None or electricity_usd_per_kwh < 0:
            errors["electricity_usd_per_kwh"] = "Electricity price cannot be negative."
        for name, value in (("datacenter_usd_per_month", datacenter_usd_per_month), ("operations_usd_per_month", operations_usd_per_month)):  # fmt: skip
            if value is not None and value < 0:
                errors[name] = "Monthly costs cannot be negative."
        if errors:
            raise ValidationError(errors)
        depreciation = purchase_price_usd / (depreciation_years * HOURS_PER_YEAR)
        power = power_kw * pue * electricity_usd_per_kwh
        monthly = (datacenter_usd_per_month or Decimal("0")) + (operations_usd_per_month or Decimal("0"))
        ops = monthly / HOURS_PER_MONTH
        raw = depreciation + power + ops
        terms = {
            "depreciation": str(depreciation.quantize(Decimal("0.0001"))),
            "power": str(power.quantize(Decimal("0.0001"))),
            "datacenter_and_operations": str(ops.quantize(Decimal("0.0001"))),
        }
        formula = TCO_FORMULA
    else:
        raise ValidationError({"basis": "Basis is rent or tco."})
    terms["before_utilization"] = str(raw.quantize(Decimal("0.0001")))
    terms["target_utilization"] = str(u)
    return (raw / u).quantize(Decimal("0.0001")), formula, terms


@transaction.atomic
def gpu_cost_version_create(
    *,
    gpu_type: GpuType,
    basis: str,
    actor,
    pool: str = "",
    target_utilization: Decimal = Decimal("1"),
    effective_from=None,
    note: str = "",
    **inputs,
) -> GpuCostVersion:
    """Add a GPU hourly cost version (versions are never edited: history stays); audited."""
    from django.utils import timezone

    from audit.services import audit_record, fields_of

    unknown = set(inputs) - set(GPU_COST_INPUTS)
    if unknown:
        raise TypeError(f"unknown inputs: {sorted(unknown)}")
    usd, formula, terms = gpu_cost_compute(basis=basis, target_utilization=target_utilization, **inputs)
    version = GpuCostVersion(
        gpu_type=gpu_type,
        pool=pool.strip(),
        basis=basis,
        effective_from=effective_from or timezone.now(),
        target_utilization=target_utilization,
        usd_per_gpu_hour=usd,
        formula=formula,
        terms=terms,
        note=note,
        created_by=actor if getattr(actor, "pk", None) else None,
        **inputs,
    )
    version.full_clean()
    version.save()
    audit_record(
        actor=actor,
        action="gpu_cost.create",
        target=version,
        after=fields_of(
            version,
            [
                "gpu_type",
                "pool",
                "basis",
                "effective_from",
                "usd_per_gpu_hour",
                "target_utilization",
                *sorted(inputs),
            ],
        ),  # fmt: skip
        reason=note,
        evidence={"formula": formula, "terms": terms},
    )
    return version


def kv_memory_whatif(
    *,
    version: ModelVersion,
    gpu_type: GpuType,
    tensor_parallel: int,
    context_len: int,
    concurrency: int,
    kv_cache_dtype: str,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int | None = None,
) -> dict:
    """Does ``concurrency`` sequences of ``context_len`` tokens fit on ``tensor_parallel`` GPUs?

    KV bytes/token = 2 × layers × kv_heads × head_dim × bytes per element; the batch needs whole blocks
    of 16 tokens for each sequence, against the pool vLLM leaves after weights and its profile.
    """
    if tensor_parallel < 1 or context_len < 1 or concurrency < 1:
        raise ValidationError("Tensor parallel, context length and concurrency must be at least 1.")
    est = memory_estimate(
        model=version.model,
        gpu_type=gpu_type,
        precision=version.precision,
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel=tensor_parallel,
        gpu_memory_utilization=gpu_memory_utilization,
        context_len=context_len,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    blocks_per_seq = -(-context_len // est.block_size)
    needed_tokens = concurrency * blocks_per_seq * est.block_size
    needed = needed_tokens * est.kv_bytes_per_token
    return {
        "estimate": est,
        "kv_needed_bytes": needed,
        "kv_needed_tokens": needed_tokens,
        "fits": est.fits and needed_tokens <= est.kv_capacity_tokens,
        "headroom_seqs": est.max_concurrent_seqs - concurrency,
        "formula": "KV pool = total × gpu_memory_utilization − weights − non-torch − activation peak − CUDA graphs "
        "(per GPU); tokens = whole blocks of 16 × KV bytes/token (2 × layers × kv_heads × head_dim × bytes/element)",
    }


# --- plain create/update by field values (the demo seed and scripts use these) ------------------


@transaction.atomic
def gpu_type_create(*, actor, **fields) -> GpuType:
    """Create a GPU type from field values (validated like the form's)."""
    return gpu_type_save(instance=GpuType(**fields), actor=actor)


@transaction.atomic
def gpu_type_update(*, gpu_type: GpuType, actor, **fields) -> GpuType:
    for name, value in fields.items():
        setattr(gpu_type, name, value)
    return gpu_type_save(instance=gpu_type, actor=actor)


@transaction.atomic
def model_create(*, actor, **fields) -> Model:
    """Create a model (architecture facts from its config.json)."""
    return model_save(instance=Model(**fields), actor=actor)


@transaction.atomic
def model_update(*, model: Model, actor, **fields) -> Model:
    for name, value in fields.items():
        setattr(model, name, value)
    return model_save(instance=model, actor=actor)


# The rehearsal's simulated engines model Llama-3.1-8B on an L40S (``engines.rehearsal``): the
# console's rehearsal deployments point at these rows, made once (audited) and then reused.
REHEARSAL_GPU = {"name": "L40S", "memory_gib": 48, "hbm_bandwidth_gbps": 864, "bf16_tflops": 362,
                 "fp8_tflops": 733, "rental_usd_per_hour": Decimal("0.99")}  # fmt: skip
REHEARSAL_MODEL = {"name": "Llama-3.1-8B-Instruct", "family": "llama", "parameter_count": 8_030_261_248,
                   "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "head_dim": 128,
                   "vocab_size": 128256, "max_context": 131072}  # fmt: skip
REHEARSAL_LABEL = "rehearsal"


@transaction.atomic
def rehearsal_catalog(*, actor) -> tuple[ModelVersion, GpuType]:
    """The version and GPU type an incident rehearsal's deployments are labelled with: the catalog's
    own Llama-3.1-8B-Instruct and L40S where they exist, a version labelled ``rehearsal``."""
    gpu = GpuType.objects.filter(name=REHEARSAL_GPU["name"]).first() or gpu_type_create(
        actor=actor, **REHEARSAL_GPU
    )
    model = Model.objects.filter(name=REHEARSAL_MODEL["name"]).first() or model_create(
        actor=actor, **REHEARSAL_MODEL
    )
    version = ModelVersion.objects.filter(model=model, label=REHEARSAL_LABEL).first()
    if version is None:
        # No weights: nothing is ever deployed from it (a rehearsal's engines are simulated).
        version = model_version_create(actor=actor, model=model, label=REHEARSAL_LABEL,
                                       weights_uri="rehearsal://simulated")  # fmt: skip
    return version, gpu
