"""The batch price's derivation (batches.services.pricing, ADR 0036): the online price without the
idle share. Checked the way a finance reviewer would: at the run's capacity goodput, the online
price bills the GPUs' hourly cost divided by the target utilization (the idle hours included); the
batch price bills the hourly cost itself, no more, whatever the utilization target."""

from __future__ import annotations

from decimal import Decimal

import pytest

from batches.services.pricing import batch_price_derivation
from catalog.services import gpu_cost_version_create
from tests.evaluations.test_pricing import MODEL, deployment, make_run  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("utilization", ["0.6", "0.75", "1"])
def test_the_batch_price_is_the_online_price_without_the_idle_share(deployment, admin_user, utilization):  # noqa: F811
    u = Decimal(utilization)
    gpu_cost_version_create(
        gpu_type=deployment.gpu_type, basis="rent", rent_usd_per_hour=Decimal("3"), target_utilization=u,
        actor=admin_user,
    )  # fmt: skip
    make_run(deployment)  # 2 GPUs, 2,400 tokens/s at capacity (400 of them output)
    d = batch_price_derivation(public_model=MODEL)
    assert d["derivable"] and d["target_utilization"] == u
    assert d["input_per_million"] == (d["online_input_per_million"] * u).quantize(Decimal("0.001"))
    assert d["output_per_million"] == (d["online_output_per_million"] * u).quantize(Decimal("0.001"))
    # At capacity (2,000 input and 400 output tokens a second) the batch price bills the two GPUs'
    # hourly cost, $6: the online price bills $6 ÷ utilization. Rounding to 0.1 ¢/M moves it < 1 %.
    hourly = lambda i, o: (i * 2000 + o * 400) * 3600 / Decimal(10**6)  # noqa: E731
    batch_hourly = hourly(d["input_per_million"], d["output_per_million"])
    online_hourly = hourly(d["online_input_per_million"], d["online_output_per_million"])
    assert batch_hourly == pytest.approx(Decimal(6), rel=Decimal("0.01"))
    assert online_hourly == pytest.approx(Decimal(6) / u, rel=Decimal("0.01"))
    assert "target utilization" in d["formula"] and d["fingerprint"]
