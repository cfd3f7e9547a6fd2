"""Rehearsals started from the console: an admin picks a cause, a real Celery worker runs it on a
route of simulated deployments made for it, and the incident it produced is labelled a rehearsal.
Who can do what: a platform admin starts one; an auditor reads them; a tenant's users see neither.
Nothing a rehearsal makes is deployed, listed, served, billed or paged, and the beat leaves its SLOs
and its playbook's actions to the rehearsal's own virtual clock."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import UsageEvent
from deployments.models import Deployment
from deployments.selectors import deployment_list, routing_table
from notify.models import Notification
from operations.models import Incident, Mitigation, RehearsalRun, Slo, SloBreach
from operations.rehearsals import LENGTHS, rehearsal_start
from operations.services import mitigations_review, slos_evaluate

URL = reverse("operations:rehearsal_list")


def _wait_finished(run: RehearsalRun, timeout_s: float = 600) -> RehearsalRun:
    deadline = time.monotonic() + timeout_s
    while True:
        run.refresh_from_db()
        if not run.is_active:
            return run
        assert time.monotonic() < deadline, (
            f"the worker never finished rehearsal {run.pk}: {run.progress_message}"
        )
        time.sleep(0.5)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "form, field",
    [
        ({"scenario": "meteor_strike", "mode": "auto", "length": "quick"}, "scenario"),
        ({"scenario": "lost_replica", "mode": "yolo", "length": "quick"}, "mode"),
        ({"scenario": "lost_replica", "mode": "auto", "length": "forever"}, "length"),
        ({}, "scenario"),
    ],
)
def test_a_rehearsal_that_makes_no_sense_is_refused_on_the_form_and_queues_nothing(admin_client, form, field):
    r = admin_client.post(URL, form)
    assert r.status_code == 400
    assert "Choose one of" in r.content.decode()
    assert f'id="r-{field}"' in r.content.decode() and "is-invalid" in r.content.decode()
    assert not RehearsalRun.objects.exists()


@pytest.mark.django_db
def test_only_a_platform_admin_starts_one_an_auditor_reads_them_tenants_see_nothing(
    admin_client, auditor_client, tenant_admin_client, member_client, anon_client, admin_user
):
    form = {"scenario": "lost_replica", "mode": "auto", "length": "quick"}
    for client in (auditor_client, tenant_admin_client, member_client):
        assert client.post(URL, form).status_code == 403
    assert anon_client.post(URL, form).status_code in (302, 403)
    assert not RehearsalRun.objects.exists()
    run = rehearsal_start(scenario_name="lost_replica", mode="auto", length="quick", actor=admin_user)
    page = auditor_client.get(URL)
    assert (
        page.status_code == 200
        and f'href="{reverse("operations:rehearsal_detail", args=[run.pk])}"' in page.content.decode()
    )
    assert 'id="rehearsal-form"' not in page.content.decode()  # an auditor reads, never starts
    assert 'id="rehearsal-form"' in admin_client.get(URL).content.decode()
    for client in (tenant_admin_client, member_client):
        assert client.get(URL).status_code == 403
        assert client.get(reverse("operations:rehearsal_detail", args=[run.pk])).status_code == 403
    listed = auditor_client.get(URL + "?format=json").json()
    assert listed["count"] == 1 and listed["results"][0]["scenario"] == "lost_replica"
    assert listed["results"][0]["virtual_s"] == sum(LENGTHS["quick"])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_admin_rehearses_a_lost_replica_and_nothing_of_it_is_served_paged_or_left_applied(
    celery_worker_process, admin_client
):
    before = timezone.now()
    r = admin_client.post(URL, {"scenario": "lost_replica", "mode": "auto", "length": "quick"})
    run = RehearsalRun.objects.get()
    assert r.status_code == 302 and r["Location"] == reverse("operations:rehearsal_detail", args=[run.pk])
    run = _wait_finished(run)  # a real worker, enqueued by the event spine's reaction
    assert run.status == "succeeded", run.error
    assert run.progress == 100 and run.result["cause_named"], run.result
    assert run.result["detect_s"] is not None and run.result["false_incidents"] == 0

    incident = Incident.objects.get(pk=run.incident_id)
    assert incident.rehearsal and incident.route == run.route and incident.route.rehearsal
    assert incident.diagnosis["cause"] == "errors_one_deployment"
    # The virtual clock ended when the rehearsal ran: its incident sits in the last minutes, not ahead.
    assert (
        before.timestamp() - sum(LENGTHS["quick"]) - 5
        < incident.opened_at.timestamp()
        < timezone.now().timestamp()
    )

    deployments = Deployment.objects.filter(rehearsal=True)
    assert deployments.count() == 2 and not deployment_list().filter(rehearsal=True).exists()
    assert not Deployment.objects.desired_running().filter(rehearsal=True).exists()  # never compiled for Ray
    assert run.route.public_name not in routing_table()  # never published to the gateway
    assert not Notification.objects.filter(audience="oncall").exists()  # nobody was paged
    assert not Mitigation.objects.filter(incident=incident, state="applied").exists()
    assert Mitigation.objects.filter(incident=incident, applied_by="playbook").exists()
    usage = UsageEvent.objects.filter(public_model=run.route.public_name)
    assert usage.exists() and set(usage.values_list("gateway", flat=True)) == {"rehearsal"}
    assert set(usage.values_list("cost_nanos", flat=True)) == {0}

    # Nothing stays open after it: the incident is resolved at its end, its SLOs are stopped.
    assert incident.status == "resolved" and incident.resolved_at is not None
    assert not SloBreach.objects.filter(slo__route=run.route, ended_at__isnull=True).exists()
    # The beat, in real time, leaves the rehearsal's SLOs and actions alone, active or not.
    rehearsal_slos = set(Slo.objects.filter(route=run.route, is_active=False).values_list("pk", flat=True))
    assert len(rehearsal_slos) == 3
    Slo.objects.filter(pk__in=rehearsal_slos).update(is_active=True)
    assert not rehearsal_slos & set(slos_evaluate())
    m = Mitigation.objects.filter(incident=incident).first()
    Mitigation.objects.filter(pk=m.pk).update(
        state="applied", expires_at=timezone.now() - dt.timedelta(hours=1)
    )
    assert mitigations_review() == {}  # its time box is the rehearsal's to end
    assert mitigations_review(route=run.route) == {m.pk: "reverted"}

    page = admin_client.get(reverse("operations:rehearsal_detail", args=[run.pk])).content.decode()
    assert "errors_one_deployment" in page and "the injected cause" in page
    assert f'href="{reverse("operations:incident_detail", args=[incident.pk])}"' in page
    incidents = admin_client.get(reverse("operations:incident_list")).content.decode()
    assert "rehearsal</span>" in incidents


@pytest.mark.django_db
def test_a_rehearsals_route_and_deployments_stay_out_of_everything_that_serves_or_costs(admin_user):
    """Ray's desired state, the gateway's routing table, the deployment list, GPU-hours and the rollout
    form all leave a rehearsal's rows out; its draft version may take weight on its own route only."""
    from catalog.services import rehearsal_catalog
    from deployments.rollouts.forms import RolloutCreateForm
    from deployments.selectors.gpu_hours import deployment_gpu_spans
    from deployments.services import rehearsal_route_create, route_weights_set

    version, gpu = rehearsal_catalog(actor=admin_user)
    assert version.lifecycle == "draft" and rehearsal_catalog(actor=admin_user) == (version, gpu)  # made once
    route, deps = rehearsal_route_create(public_name="rehearsal-x", version=version, gpu_type=gpu, actor=admin_user,
                                         deployments={"a": {"weight": 50}, "late": {"weight": None}})  # fmt: skip
    assert route.rehearsal and all(d.rehearsal and d.status == "RUNNING" for d in deps.values())
    assert {t.deployment.slug: t.weight for t in route.targets.all()} == {"rehearsal-x-a": 50}
    route_weights_set(route=route, weights={deps["late"]: 50}, actor="rehearsal")  # no approval asked
    assert "rehearsal-x" not in routing_table()
    assert not Deployment.objects.desired_running().filter(pk__in=[d.pk for d in deps.values()]).exists()
    assert not deployment_list(include_deleted=True).filter(rehearsal=True).exists()
    known, _spans = deployment_gpu_spans(until=timezone.now())
    assert not set(known) & {d.pk for d in deps.values()}
    assert route not in RolloutCreateForm().fields["route"].queryset
