"""Autoscaling from goodput (ADR 0038): Ray Serve's delays compiled and validated, the scaling and
admission forms of the deployment page (errors for bad input, every change audited), the replica
count over time, the suggestion derived from the measured capacity and the capacity plan, and the
planner's "what autoscaling held". Ray itself acting on the config: ``test_ray_autoscaling.py``."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from deployments.compiler import autoscaling_config
from deployments.models import Deployment, DeploymentEvent
from deployments.services import deployment_capacity_record, deployment_scale
from evaluations.models import CapacityPlan
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _autoscaling(**extra) -> dict:
    data = {
        "scaling_mode": "autoscaling",
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 4,
        "upscale_delay_s": 5,
        "downscale_delay_s": 120,
        "look_back_period_s": 20,
    }
    data.update(extra)
    return data


def _scaling_fields(d: Deployment) -> tuple:
    d.refresh_from_db()
    return (d.scaling_mode, d.min_replicas, d.max_replicas, d.target_ongoing_requests, d.upscale_delay_s,
            d.downscale_delay_s, d.look_back_period_s)  # fmt: skip


# --- the service and the compiled config --------------------------------------------------------


def test_delays_are_compiled_into_autoscaling_config_and_audited(admin_user):
    d = DeploymentFactory(status="RUNNING")
    d = deployment_scale(deployment=d, actor=admin_user, reason="busy mornings", **_autoscaling())
    assert autoscaling_config(d) == {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 4,
        "upscale_delay_s": 5.0,
        "downscale_delay_s": 120.0,
        "look_back_period_s": 20.0,
    }
    (event,) = d.events.filter(kind="scaled")
    assert event.before["scaling_mode"] == "fixed" and event.after["downscale_delay_s"] == 120
    assert (
        "1–3 (target 4, up after 5 s, down after 120 s)" in event.message and "busy mornings" in event.message
    )
    audit = AuditEvent.objects.filter(action="deployment.scaled", object_id=str(d.pk)).get()
    assert audit.after["upscale_delay_s"] == 5
    # The same settings again: nothing to record.
    deployment_scale(deployment=d, actor=admin_user, **_autoscaling())
    assert d.events.filter(kind="scaled").count() == 1


@pytest.mark.parametrize(
    "bad,field,words",
    [
        (
            {"min_replicas": 3, "max_replicas": 2},
            "min_replicas",
            "The minimum (3 replicas) is above the maximum (2)",
        ),
        ({"upscale_delay_s": -1}, "upscale_delay_s", "greater than or equal to 0"),
        ({"downscale_delay_s": float("nan")}, "downscale_delay_s", "finite"),
        ({"look_back_period_s": 0}, "look_back_period_s", "greater than or equal to 1"),
        ({"max_replicas": 65}, "max_replicas", "less than or equal to 64"),
    ],
)
def test_bad_autoscaling_is_refused_by_the_service_and_changes_nothing(admin_user, bad, field, words):
    from django.core.exceptions import ValidationError

    d = DeploymentFactory(status="RUNNING")
    before = _scaling_fields(d)
    with pytest.raises(ValidationError) as err:
        deployment_scale(deployment=d, actor=admin_user, **_autoscaling(**bad))
    assert words in " ".join(err.value.message_dict[field])
    assert _scaling_fields(d) == before and not d.events.filter(kind="scaled").exists()


def test_the_api_refuses_min_above_max_with_a_clear_400(admin_client):
    d = DeploymentFactory(status="RUNNING")
    before = _scaling_fields(d)
    url = f"/api/deployments/deployments/{d.pk}/scale/"
    r = admin_client.post(url, _autoscaling(min_replicas=4, max_replicas=2), content_type="application/json")
    assert r.status_code == 400
    assert "The minimum (4 replicas) is above the maximum (2)" in r.json()["min_replicas"][0]
    r = admin_client.post(url, _autoscaling(upscale_delay_s=-3), content_type="application/json")
    assert r.status_code == 400 and "upscale_delay_s" in r.json()
    assert _scaling_fields(d) == before
    r = admin_client.post(url, _autoscaling(), content_type="application/json")
    assert r.status_code == 200
    body = r.json()
    assert (body["scaling_mode"], body["max_replicas"], body["downscale_delay_s"]) == (
        "autoscaling",
        3,
        120.0,
    )


def test_a_scale_call_that_names_no_mode_keeps_the_deployments(admin_client, admin_user):
    """Fields left out keep their value, the mode too: a call (or a mitigation) that only moves a bound
    or a replica count must not turn an autoscaled deployment into a fixed one."""
    d = DeploymentFactory(status="RUNNING")
    deployment_scale(deployment=d, actor=admin_user, **_autoscaling())
    url = f"/api/deployments/deployments/{d.pk}/scale/"
    r = admin_client.post(url, {"max_replicas": 5}, content_type="application/json")
    assert r.status_code == 200 and (r.json()["scaling_mode"], r.json()["max_replicas"]) == ("autoscaling", 5)
    d = deployment_scale(deployment=d, actor=admin_user, num_replicas=2)
    assert d.scaling_mode == "autoscaling" and d.num_replicas == 2
    r = admin_client.post(url, {"scaling_mode": "fixed", "num_replicas": 3}, content_type="application/json")
    assert r.status_code == 200 and (r.json()["scaling_mode"], r.json()["num_replicas"]) == ("fixed", 3)


# --- the console ---------------------------------------------------------------------------------


def test_the_scaling_form_shows_errors_in_place_and_changes_nothing(admin_client):
    d = DeploymentFactory(status="RUNNING")
    before = _scaling_fields(d)
    url = reverse("deployments:scale", args=[d.pk])
    r = admin_client.post(url, _autoscaling(min_replicas=5, max_replicas=2), **HX)
    assert r.status_code == 422
    html = r.content.decode()
    assert 'id="scaling-card"' in html
    assert "The minimum (5 replicas) is above the maximum (2)" in html
    r = admin_client.post(url, _autoscaling(downscale_delay_s="-1"))  # without htmx: the whole page
    assert r.status_code == 400 and 'data-field="downscale_delay_s"' in r.content.decode()
    assert _scaling_fields(d) == before and not d.events.filter(kind="scaled").exists()


def test_the_scaling_form_sets_autoscaling_with_delays(admin_client):
    d = DeploymentFactory(status="RUNNING")
    r = admin_client.post(reverse("deployments:scale", args=[d.pk]), _autoscaling(reason="launch"), **HX)
    assert r.status_code == 200 and r["HX-Redirect"] == d.get_absolute_url()
    assert _scaling_fields(d) == ("autoscaling", 1, 3, 4, 5.0, 120.0, 20.0)
    page = admin_client.get(d.get_absolute_url()).content.decode()
    assert 'id="autoscaling-explained"' in page and "adds a replica after 5 s above the target" in page
    assert "&quot;upscale_delay_s&quot;: 5.0" in page  # the compiled Serve application shown on the page
    assert AuditEvent.objects.filter(action="deployment.scaled", object_id=str(d.pk)).count() == 1


def test_the_admission_form_sets_and_clears_the_operators_limit(admin_client):
    d = DeploymentFactory(status="RUNNING")
    url = reverse("deployments:admission", args=[d.pk])
    r = admin_client.post(url, {"source": "operator"}, **HX)
    assert r.status_code == 422 and "How many requests in flight at most?" in r.content.decode()
    r = admin_client.post(url, {"source": "operator", "max_inflight": "0"}, **HX)
    assert r.status_code == 422 and 'data-field="max_inflight"' in r.content.decode()
    d.refresh_from_db()
    assert d.max_inflight is None and not d.events.filter(kind="admission").exists()

    r = admin_client.post(url, {"source": "operator", "max_inflight": "12", "reason": "pool of two"}, **HX)
    assert r.status_code == 200 and r["HX-Redirect"] == d.get_absolute_url()
    d.refresh_from_db()
    assert d.max_inflight == 12 and d.admission_limit == 12
    assert "pool of two" in d.events.get(kind="admission").message
    r = admin_client.post(url, {"source": "measured", "max_inflight": "12"})
    assert r.status_code == 302
    d.refresh_from_db()
    assert d.max_inflight is None
    assert AuditEvent.objects.filter(action="deployment.admission", object_id=str(d.pk)).count() == 2


def test_auditors_see_the_page_but_not_the_forms_and_cannot_post(role_clients):
    d = DeploymentFactory(status="RUNNING")
    html = role_clients["auditor"].get(d.get_absolute_url()).content.decode()
    assert (
        'id="admission-limit"' in html and 'id="admission-form"' not in html and 'id="scale-form"' not in html
    )
    r = role_clients["auditor"].post(reverse("deployments:admission", args=[d.pk]), {"source": "operator",
                                                                                     "max_inflight": 3})  # fmt: skip
    assert r.status_code == 403
    r = role_clients["auditor"].get(reverse("cost:autoscaling_suggestion", args=[d.pk]))
    assert r.status_code == 403


# --- replicas over time --------------------------------------------------------------------------


def _event_at(d: Deployment, when: dt.datetime, kind: str, status: str, running: int) -> None:
    e = DeploymentEvent.objects.create(
        deployment=d, kind=kind, after={"status": status, "running_replicas": running}
    )
    DeploymentEvent.objects.filter(pk=e.pk).update(created_at=when)


def test_replica_history_is_a_step_function_of_the_events(admin_client):
    from deployments.selectors.replicas import replica_history

    d = DeploymentFactory(status="RUNNING", scaling_mode="autoscaling", min_replicas=1, max_replicas=3)
    t0 = timezone.now() - dt.timedelta(hours=4)
    Deployment.objects.filter(pk=d.pk).update(created_at=t0 - dt.timedelta(minutes=1))
    d.refresh_from_db()
    _event_at(d, t0, "status", "RUNNING", 1)
    _event_at(d, t0 + dt.timedelta(hours=1), "replicas", "RUNNING", 3)
    _event_at(d, t0 + dt.timedelta(hours=2), "replicas", "RUNNING", 1)
    _event_at(d, t0 + dt.timedelta(hours=3), "status", "STOPPED", 0)
    h = replica_history(deployment=d, since=t0, until=t0 + dt.timedelta(hours=4))
    assert [n for _, n in h.points] == [1, 3, 1, 0, 0]
    assert h.replica_hours == pytest.approx(1 + 3 + 1) and h.mean == pytest.approx(5 / 4) and h.peak == 3
    # A window that starts mid-way carries the count in force then.
    h = replica_history(deployment=d, since=t0 + dt.timedelta(minutes=90), until=t0 + dt.timedelta(hours=2))
    assert [n for _, n in h.points] == [3, 3] and h.replica_hours == pytest.approx(1.5)

    page = admin_client.get(d.get_absolute_url()).content.decode()
    start = page.index('<script id="replica-history-data" type="application/json">') + len(
        '<script id="replica-history-data" type="application/json">'
    )
    chart = json.loads(page[start : page.index("</script>", start)])
    assert chart["replicas"] == [0, 1, 3, 1, 0, 0] and len(chart["times"]) == 6  # none before the first
    assert "peak 3" in page and 'src="/static/deployments/replicas.js"' in page


# --- derived from goodput ------------------------------------------------------------------------


def _plan(d: Deployment, *, gpus_exact: float, name: str = "launch peak") -> CapacityPlan:
    row = {"ok": True, "model_version_id": d.model_version_id, "gpu_type_id": d.gpu_type_id, "tensor_parallel": 1,
           "candidate": f"{d.model_version} on {d.gpu_type.name} TP=1", "label": "measured", "run_id": None,
           "per_gpu_goodput": 2500.0, "gpus_exact": gpus_exact, "replicas": 10,
           "gpus": 1, "usd_per_gpu_hour": 2.0, "monthly_usd": 1.0, "peak_tokens_per_s": 1.0}  # fmt: skip
    return CapacityPlan.objects.create(token=uuid.uuid4(), name=name, status="done", candidates=[], rows=[row],
                                       inputs={"peak_qps": 12.0, "redundancy": 1.3})  # fmt: skip


def test_the_suggestion_says_where_each_number_comes_from_and_applies(admin_client, admin_user):
    d = DeploymentFactory(status="RUNNING", running_replicas=1)
    d = deployment_scale(
        deployment=d, actor=admin_user, **_autoscaling(max_replicas=2, target_ongoing_requests=9)
    )
    url = reverse("cost:autoscaling_suggestion", args=[d.pk])
    html = admin_client.get(url, **HX).content.decode()
    assert "no measured capacity benchmark yet" in html and "no finished capacity plan" in html
    assert 'id="apply-suggestion-form"' not in html

    deployment_capacity_record(deployment_id=d.pk, inflight=10, run_id=77)
    # The route's other deployment takes half the traffic: this one needs half the plan's GPUs.
    target = RouteTargetFactory(deployment=d, weight=50)
    RouteTargetFactory(route=target.route, deployment=DeploymentFactory(), weight=50)
    _plan(d, gpus_exact=9.2)
    html = admin_client.get(url, **HX).content.decode()
    assert "80 % of 10 requests in flight per replica" in html and "benchmark #77" in html
    assert "capacity plan “launch peak”: peak 12 req/s needs 9.20 GPUs" in html
    assert f"50% of route {target.route.public_name}" in html
    form = html[html.index('id="apply-suggestion-form"') :]
    assert 'name="max_replicas" value="5"' in form and 'name="target_ongoing_requests" value="0"' in form

    fields = dict(
        (name, value)
        for name, value in (
            (part.split('name="')[1].split('"')[0], part.split('value="')[1].split('"')[0])
            for part in form.split("<input")[1:]
            if 'name="' in part and 'value="' in part
        )
    )
    r = admin_client.post(reverse("deployments:scale", args=[d.pk]), fields)
    assert r.status_code == 302
    d.refresh_from_db()
    assert (d.max_replicas, d.target_ongoing_requests, d.autoscaling_target) == (5, 0, 8)
    assert (d.upscale_delay_s, d.downscale_delay_s) == (5.0, 120.0)  # delays are policy: kept
    event = d.events.filter(kind="scaled").order_by("-id").first()
    assert "autoscaling suggested from measured capacity" in event.message
    assert "already scales as suggested" in admin_client.get(url, **HX).content.decode()


def test_the_plan_page_sets_what_autoscaling_held_beside_the_peak(admin_client):
    d = DeploymentFactory(status="RUNNING", scaling_mode="autoscaling", min_replicas=1, max_replicas=4)
    now = timezone.now()
    _event_at(d, now - dt.timedelta(days=7), "status", "RUNNING", 1)
    _event_at(d, now - dt.timedelta(days=1), "replicas", "RUNNING", 4)  # 6 days at 1, 1 day at 4
    plan = _plan(d, gpus_exact=3.5)
    html = admin_client.get(reverse("cost:plan_detail", args=[plan.token])).content.decode()
    assert 'id="plan-observed"' in html and d.slug in html
    row = html[html.index('class="num mean-replicas">') :]
    assert row.split(">")[1].split("<")[0] == "1.43"  # (6 × 1 + 1 × 4) / 7


def test_gpu_hours_price_a_past_span_at_the_replicas_of_then_not_of_now():
    """A change that reported no replica running yet (Ray starting them) counts an autoscaled
    deployment's minimum, what Ray starts with, not the replicas it happens to run today."""
    from deployments.selectors.gpu_hours import deployment_gpu_spans

    d = DeploymentFactory(status="RUNNING", scaling_mode="autoscaling", min_replicas=2, max_replicas=6,
                          running_replicas=5)  # fmt: skip
    t0 = timezone.now() - dt.timedelta(hours=3)
    _event_at(d, t0, "status", "DEPLOYING", 0)
    _event_at(d, t0 + dt.timedelta(hours=1), "status", "RUNNING", 2)
    _event_at(d, t0 + dt.timedelta(hours=2), "replicas", "RUNNING", 5)
    _, spans = deployment_gpu_spans(until=timezone.now())
    per_replica = d.gpus_per_replica
    assert [s.gpus for s in spans if s.deployment_id == d.pk] == [
        2 * per_replica,
        2 * per_replica,
        5 * per_replica,
    ]
