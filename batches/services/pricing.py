"""The batch price: what a batch line costs, derived from the idle capacity batches use.

An online price (docs/decisions/0012) recovers a deployment's GPU cost at its capacity goodput,
with the GPU-hour divided by the target utilization: it carries the idle share, the hours the GPUs
wait for interactive traffic. A batch fills exactly those hours (it runs only where there is
headroom, as sheddable traffic), so its price is the same derivation **without the idle share**:

    batch $/M = GPUs × $/GPU-hour × target utilization ÷ (token goodput/s × 3600) × 1e6
              = online $/M × target utilization       (per input and per output token)

with the target utilization of the GPU cost version each component used (1 when the run carries
its own hourly figure: no idle share to take off). Reviewed and published like the online price:
the page shows the derivation with a fingerprint, publishing recomputes it and refuses a changed
one, and the price is a ``billing`` ``Price`` of kind ``batch`` (audited ``price.publish``).
"""

from __future__ import annotations

import hashlib
import json
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction

from billing.selectors.prices import price_for
from billing.services.prices import price_publish
from catalog.selectors import gpu_cost_version_find
from evaluations.services.pricing import price_derivation

CENT = Decimal("0.001")
FORMULA = (
    "batch $/M = online $/M × target utilization = GPUs × $/GPU-hour × target utilization "
    "÷ (token goodput/s × 3600) × 1e6: the online derivation without the idle share, since a batch "
    "runs only on capacity that interactive traffic leaves idle"
)


def _utilization(component: dict) -> Decimal:
    v = gpu_cost_version_find(pk=component.get("gpu_cost_version_id"))
    return Decimal(str(v.target_utilization)) if v is not None else Decimal("1")


def batch_price_derivation(*, public_model: str) -> dict:
    """The batch price of a public model with every input, or ``derivable=False`` and why."""
    d = price_derivation(public_model=public_model)
    base = {"public_model": public_model, "formula": FORMULA,
            "in_force": price_for(public_model=public_model, kind="batch")}  # fmt: skip
    if not d["derivable"]:
        return {**base, "derivable": False, "why": d["why"]}
    inputs = d["provenance"]["inputs"]
    weights = [Decimal(str(x.get("weight") or 1)) for x in inputs]
    utils = [_utilization(x) for x in inputs]
    u = sum(w * x for w, x in zip(weights, utils, strict=True)) / sum(weights)
    input_pm = (d["input_per_million"] * u).quantize(CENT, rounding=ROUND_HALF_UP)
    output_pm = (d["output_per_million"] * u).quantize(CENT, rounding=ROUND_HALF_UP)
    provenance = {
        **d["provenance"],
        "formula": FORMULA,
        "online_formula": d["provenance"]["formula"],
        "online_input_per_million": str(d["input_per_million"]),
        "online_output_per_million": str(d["output_per_million"]),
        "target_utilization": str(u),
        "target_utilizations": [str(x) for x in utils],
    }
    fingerprint = hashlib.sha256(
        json.dumps(
            {"p": provenance, "i": str(input_pm), "o": str(output_pm)}, sort_keys=True, default=str
        ).encode()
    ).hexdigest()[:16]
    derivable = input_pm > 0 and output_pm > 0
    return {
        **base,
        "derivable": derivable,
        "why": "" if derivable else "The batch price rounds to $0.000 per million tokens.",
        "label": d["label"],
        "online_input_per_million": d["input_per_million"],
        "online_output_per_million": d["output_per_million"],
        "target_utilization": u,
        "input_per_million": input_pm,
        "output_per_million": output_pm,
        "provenance": provenance,
        "fingerprint": fingerprint,
    }


@transaction.atomic
def batch_price_publish(*, public_model: str, fingerprint: str, actor, note: str = ""):
    """Publish the batch price the admin reviewed; recomputed here, refused if it changed meanwhile."""
    d = batch_price_derivation(public_model=public_model)
    if not d["derivable"]:
        raise ValidationError({"public_model": d["why"]})
    if d["fingerprint"] != fingerprint:
        raise ValidationError(
            {"fingerprint": "The derivation changed since you reviewed it: review it again."}
        )
    return price_publish(
        public_model=public_model,
        input_per_million=d["input_per_million"],
        output_per_million=d["output_per_million"],
        provenance=d["provenance"],
        note=note or f"batch price from {d['label']} benchmark #{d['provenance']['run_id']}",
        actor=actor,
        kind="batch",
    )
