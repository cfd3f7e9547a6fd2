"""The capacity planner: measured vs predicted goodput per candidate, GPU counts in whole replicas,
monthly cost, candidates that do not fit, bad input, saved plans and their shareable URL, by role."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from catalog.services import gpu_cost_version_create
from evaluations.models import CapacityPlan
from evaluations.services.planner import HOURS_PER_MONTH, capacity_plan_compute, capacity_plan_create
from tests.deployments.factories import llama_8b_version, llama_70b_version
from tests.evaluations.factories import BenchmarkRunFactory
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db
INPUTS = {"peak_qps": 20, "input_mean": 512, "input_sigma": 0.3, "output_mean": 128, "output_sigma": 0.3,
          "ttft_ms": 1000, "tpot_ms": 50, "redundancy": 1.3}  # fmt: skip


@pytest.fixture
def h100():
    return GpuTypeFactory()


@pytest.fixture
def h200():
    return GpuTypeFactory(name="H200 SXM", memory_gib=Decimal("141"), hbm_bandwidth_gbps=Decimal("4800"),
                          rental_usd_per_hour=Decimal("3.50"))  # fmt: skip


def plan(**kw):
    created = capacity_plan_create(**kw)
    assert created.status == "queued" and created.rows == []
    return capacity_plan_compute(plan_id=created.pk)


def measured_run(version, gpu, *, per_gpu=10_000.0, tp=1, sla=None):
    return BenchmarkRunFactory(
        kind="measured", sla=sla or {"ttft_ms": 800.0, "tpot_ms": 40.0, "e2e_ms": None},
        snapshot={"gpus": tp, "gpu_type_id": gpu.pk, "gpu_type": gpu.name, "model_version_id": version.pk, "tensor_parallel": tp},
        results={"capacity": {"rate": 5.0, "per_gpu": {"total_token_goodput": per_gpu}}},
    )  # fmt: skip


def test_h100_measured_vs_h200_predicted(h100, h200, admin_user):
    v = llama_8b_version()
    run = measured_run(v, h100)
    gpu_cost_version_create(gpu_type=h100, basis="rent", rent_usd_per_hour=Decimal("2.50"), target_utilization=Decimal("0.5"), actor=admin_user)  # fmt: skip
    cands = [{"model_version_id": v.pk, "gpu_type_id": g.pk, "tensor_parallel": 1} for g in (h100, h200)]
    p = plan(name="chat launch", inputs=INPUTS, candidates=cands, actor=admin_user)
    rows = {r["gpu_type"]: r for r in p.rows}
    a, b = rows["H100 SXM"], rows["H200 SXM"]
    assert a["ok"] and a["label"] == "measured" and a["run_id"] == run.pk
    peak = 20 * (512 + 128)
    assert a["peak_tokens_per_s"] == peak
    assert a["gpus"] == math.ceil(peak / 10_000 * 1.3) == 2
    assert a["usd_per_gpu_hour"] == 2.5  # before the utilization divisor: the plan sizes the whole fleet
    assert a["monthly_usd"] == pytest.approx(2 * 2.5 * HOURS_PER_MONTH)
    assert b["ok"] and b["label"] == "predicted" and b["run_id"] is None and b["per_gpu_goodput"] > 0
    assert b["gpus"] == math.ceil(peak / b["per_gpu_goodput"] * 1.3)
    assert b["monthly_usd"] == pytest.approx(b["gpus"] * 3.5 * HOURS_PER_MONTH)
    assert p.rows[0]["monthly_usd"] <= p.rows[1]["monthly_usd"]  # cheapest first
    assert p.status == "done" and p.progress == 100


def test_a_run_with_a_looser_sla_is_not_used(h100, admin_user):
    v = llama_8b_version()
    measured_run(v, h100, sla={"ttft_ms": 5000.0, "tpot_ms": 200.0})
    p = plan(name="p", inputs=INPUTS, candidates=[{"model_version_id": v.pk, "gpu_type_id": h100.pk, "tensor_parallel": 1}], actor=admin_user)  # fmt: skip
    assert p.rows[0]["label"] == "predicted"


def test_gpus_round_up_to_whole_replicas_and_misfits_are_said(h100, admin_user):
    v8, v70 = llama_8b_version(), llama_70b_version()
    measured_run(v8, h100, per_gpu=3000.0, tp=2)
    cands = [{"model_version_id": v8.pk, "gpu_type_id": h100.pk, "tensor_parallel": 2},
             {"model_version_id": v70.pk, "gpu_type_id": h100.pk, "tensor_parallel": 1}]  # fmt: skip
    p = plan(name="p", inputs=INPUTS, candidates=cands, actor=admin_user)
    ok, misfit = p.rows
    assert ok["gpus_exact"] == pytest.approx(12800 / 3000 * 1.3)  # 5.55 GPUs
    assert ok["replicas"] == 3 and ok["gpus"] == 6
    assert not misfit["ok"] and misfit["why"].startswith("Does not fit")
    # Each row says where memory goes: the misfit's 70B bf16 embeddings and lm_head are 128256 x 8192 x 2 B.
    assert misfit["memory"]["embeddings_gib"] == misfit["memory"]["lm_head_gib"] == 1.96
    assert misfit["memory"]["kv_tokens"] == 0 and ok["memory"]["kv_tokens"] > 0


@pytest.mark.parametrize(
    "change,field",
    [({"peak_qps": 0}, "peak_qps"), ({"redundancy": 0.5}, "redundancy"), ({"ttft_ms": -1}, "ttft_ms"),
     ({"input_mean": "lots"}, "input_mean"), ({"output_sigma": 9}, "output_sigma")],
)  # fmt: skip
def test_bad_inputs_save_nothing(change, field, h100, admin_user):
    v = llama_8b_version()
    with pytest.raises(ValidationError) as exc:
        capacity_plan_create(name="p", inputs={**INPUTS, **change}, candidates=[{"model_version_id": v.pk, "gpu_type_id": h100.pk, "tensor_parallel": 1}], actor=admin_user)  # fmt: skip
    assert field in exc.value.message_dict
    assert not CapacityPlan.objects.exists()


def test_a_plan_with_no_candidates_is_refused_on_the_page(admin_client, h100):
    llama_8b_version()
    r = admin_client.post(reverse("cost:plan_create"), {**INPUTS, "name": "empty"})
    assert r.status_code == 400 and "at least one candidate" in r.content.decode()
    assert not CapacityPlan.objects.exists()


def test_plan_pages_by_role(role_clients, admin_client, h100, h200):
    v = llama_8b_version()
    measured_run(v, h100)
    post = {
        **INPUTS,
        "name": "H100 vs H200",
        "model_versions": [v.pk],
        "gpu_types": [h100.pk, h200.pk],
        "tensor_parallel": ["1"],
    }
    for role in ("auditor", "member", "outsider"):
        assert role_clients[role].post(reverse("cost:plan_create"), post).status_code == 403
    assert role_clients["anon"].post(reverse("cost:plan_create"), post).status_code == 302
    r = admin_client.post(reverse("cost:plan_create"), post)
    assert r.status_code == 302
    saved = CapacityPlan.objects.get()
    assert r["Location"] == reverse("cost:plan_detail", args=[saved.token])
    pending = admin_client.get(r["Location"]).content.decode()
    assert 'data-status="queued"' in pending and "every 1s" in pending and "plan-row" not in pending
    capacity_plan_compute(plan_id=saved.pk)
    for role, status in [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200), ("anon", 302)]:
        page = role_clients[role].get(r["Location"])
        assert page.status_code == status, role
        if status == 200:
            html = page.content.decode()
            assert "H100 vs H200" in html and "badge-measured" in html and "badge-predicted" in html
    lst = {
        role: role_clients[role].get(reverse("cost:plan_list")).content.decode()
        for role in ("admin", "auditor", "member")
    }
    assert "H100 vs H200" in lst["admin"] and 'id="plan-form"' in lst["admin"]
    assert "H100 vs H200" in lst["auditor"] and 'id="plan-form"' not in lst["auditor"]
    assert "H100 vs H200" not in lst["member"]
    import uuid

    assert admin_client.get(reverse("cost:plan_detail", args=[uuid.uuid4()])).status_code == 404


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_a_worker_computes_the_plan_and_the_page_polls_until_done(
    celery_worker_process, h100, admin_user, admin_client
):
    import time

    v = llama_8b_version()
    measured_run(v, h100)
    p = capacity_plan_create(name="async", inputs=INPUTS, candidates=[{"model_version_id": v.pk, "gpu_type_id": h100.pk, "tensor_parallel": 1}], actor=admin_user)  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        p.refresh_from_db()
        if p.status == "done":
            break
        assert p.status in ("queued", "running"), p.error
        assert time.monotonic() < deadline, "the worker never finished the plan"
        time.sleep(0.2)
    assert p.rows[0]["gpus"] == 2 and p.progress == 100
    url = reverse("cost:plan_detail", args=[p.token]) + "?part=progress"
    assert admin_client.get(url, headers={"HX-Request": "true"})["HX-Refresh"] == "true"
