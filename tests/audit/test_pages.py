"""The audit page, its API, the object timeline tag, and refused writes landing in the trail."""

from __future__ import annotations

import datetime as dt

import pytest
from django.template import Context, Template
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import audit_record, audit_seal
from tests.audit.conftest import record_events
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db

READERS = {"admin": 200, "auditor": 200, "member": 403, "outsider": 403}


@pytest.mark.parametrize("role", ["admin", "auditor", "member", "outsider", "anon"])
@pytest.mark.parametrize(
    "name", ["audit:event_list", "audit:export_json", "audit:export_csv", "audit:verify"]
)
def test_only_admins_and_auditors_read_the_trail(role_clients, role, name):
    record_events(1)
    response = role_clients[role].get(reverse(name))
    if role == "anon":
        assert response.status_code == 302 and reverse("login") in response["Location"]
    else:
        assert response.status_code == READERS[role]


def test_norole_user_gets_403(norole_client):
    assert norole_client.get(reverse("audit:event_list")).status_code == 403


def test_list_shows_newest_first_with_details_and_chain_status(admin_client):
    record_events(3)
    head = audit_seal()
    response = admin_client.get(reverse("audit:event_list"))
    body = response.content.decode()
    assert body.index("step 2") < body.index("step 1") < body.index("step 0")
    assert head.hash in body  # the chain head, and each event's hash in its details
    assert 'id="audit-health" data-state="unknown"' in body  # no automatic verification has run yet
    from audit.signing import signing_key

    assert signing_key().public_hex in body
    assert "<details>" in body and "&quot;note&quot;: &quot;café ✓&quot;" in body  # JSON, not a Python repr
    assert 'href="/audit/export.csv"' in body and 'href="/audit/export.json"' in body


def test_list_paginates(admin_client):
    record_events(55)
    first = admin_client.get(reverse("audit:event_list")).content.decode()
    assert "Page 1 of 2 · 55 items" in first
    second = admin_client.get(reverse("audit:event_list"), {"page": 2}).content.decode()
    assert "step 0" in second and "step 54" not in second


def test_list_query_count_does_not_grow_with_events(admin_client, django_assert_max_num_queries):
    record_events(50)
    audit_seal()
    with django_assert_max_num_queries(14):
        assert admin_client.get(reverse("audit:event_list")).status_code == 200


def test_filters_narrow_the_list_and_the_exports(admin_client, tenant):
    audit_record(
        actor="alice", action="price.publish", object_type="billing.price", object_id=7, tenant_id=tenant.pk
    )
    audit_record(actor="bob", action="key.revoke", object_type="billing.apikey", object_id=8)
    audit_record(actor="carol", action="price.publish", object_type="billing.price", object_id=9)
    today = timezone.now().date()
    cases = [
        ({"actor": "alice"}, {"alice"}),
        ({"action": "key.revoke"}, {"bob"}),
        ({"action": "price."}, {"alice", "carol"}),
        ({"action": "price"}, {"alice", "carol"}),  # any part of the name, not only an exact match
        ({"action": "PUBLISH"}, {"alice", "carol"}),
        ({"action": "revo"}, {"bob"}),
        ({"object_type": "billing.price", "object_id": "9"}, {"carol"}),
        ({"tenant": tenant.pk}, {"alice"}),
        ({"since": today.isoformat(), "until": today.isoformat()}, {"alice", "bob", "carol"}),
        ({"until": (today - dt.timedelta(days=1)).isoformat()}, set()),
    ]
    for params, actors in cases:
        response = admin_client.get(reverse("audit:event_list"), params)
        assert response.status_code == 200
        assert {e.actor for e in response.context["page"].object_list} == actors, params
        assert "Export CSV" in response.content.decode()


def test_action_filter_finds_a_family_by_part_of_its_name_and_says_so(admin_client):
    audit_record(actor="alice", action="model_version.gate_override", object_type="catalog.modelversion")
    audit_record(actor="bob", action="model_version.transition", object_type="catalog.modelversion")
    audit_record(actor="carol", action="price.publish", object_type="billing.price")
    response = admin_client.get(reverse("audit:event_list"), {"action": "model_version"})
    assert {e.actor for e in response.context["page"].object_list} == {"alice", "bob"}
    response = admin_client.get(reverse("audit:event_list"), {"action": "gate_override"})
    assert {e.actor for e in response.context["page"].object_list} == {"alice"}
    assert 'placeholder="part of an action, e.g. model_version"' in response.content.decode()


def test_bad_filter_is_a_form_error_not_a_500(admin_client):
    response = admin_client.get(reverse("audit:event_list"), {"since": "2026-02-01", "until": "2026-01-01"})
    assert response.status_code == 400 and "must be on or before" in response.content.decode()
    response = admin_client.get(reverse("audit:event_list"), {"tenant": "abc"})
    assert response.status_code == 400 and "Enter a whole number" in response.content.decode()


def test_verify_partial_reports_ok_and_a_break(admin_client):
    record_events(3)
    response = admin_client.get(reverse("audit:verify"), HTTP_HX_REQUEST="true")
    assert "Chain verifies: 3 events" in response.content.decode()
    from tests.audit.conftest import tamper

    tamper("UPDATE audit_auditevent SET actor = 'x' WHERE chain_index = 1")
    response = admin_client.get(reverse("audit:verify"), HTTP_HX_REQUEST="true")
    assert "Chain broken at index <strong>1</strong>" in response.content.decode()


def test_nav_link_for_readers_only(admin_client, auditor_client, member_client):
    for client, shown in [(admin_client, True), (auditor_client, True), (member_client, False)]:
        body = client.get(reverse("catalog:version_list")).content.decode()
        assert ('href="/audit/"' in body) is shown


# --- the API -------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["admin", "auditor", "member", "outsider", "anon"])
def test_api_is_for_admins_and_auditors(role_clients, role):
    record_events(2)
    response = role_clients[role].get("/api/audit/events/")
    if role in ("admin", "auditor"):
        assert response.status_code == 200 and response.json()["count"] == 2
    else:
        assert response.status_code in (401, 403)


def test_api_is_read_only_even_for_admins(admin_client):
    assert admin_client.post("/api/audit/events/", {"actor": "x"}).status_code == 405


def test_api_filters_paginates_and_orders_newest_first(auditor_client):
    record_events(3, action="a.one")
    record_events(2, action="b.two")
    data = auditor_client.get("/api/audit/events/", {"action": "b.two"}).json()
    assert data["count"] == 2 and {e["action"] for e in data["results"]} == {"b.two"}
    data = auditor_client.get("/api/audit/events/", {"action_prefix": "a."}).json()
    assert data["count"] == 3
    seqs = [e["seq"] for e in auditor_client.get("/api/audit/events/").json()["results"]]
    assert seqs == sorted(seqs, reverse=True)


def test_api_is_in_the_openapi_schema(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    assert "get" in schema["paths"]["/api/audit/events/"]
    assert "post" not in schema["paths"]["/api/audit/events/"]


# --- the timeline tag ----------------------------------------------------------------------------


def test_timeline_tag_shows_an_objects_events_to_readers_only():
    version = ModelVersionFactory()
    audit_record(actor="alice", action="model_version.transition", target=version, reason="gates passed")
    audit_record(actor="bob", action="thing.change", object_type="tests.other", object_id=version.pk)
    template = Template("{% load audit_tags %}{% audit_timeline version %}")
    shown = template.render(Context({"version": version, "reads_everything": True}))
    assert "model_version.transition" in shown and "gates passed" in shown and "thing.change" not in shown
    assert "All 1 event" in shown
    assert template.render(Context({"version": version, "reads_everything": False})).strip() == ""


def test_timeline_tag_takes_an_explicit_type_and_id():
    audit_record(actor="bob", action="thing.change", object_type="tests.other", object_id=42)
    html = Template(
        '{% load audit_tags %}{% audit_timeline object_type="tests.other" object_id=42 %}'
    ).render(Context({"reads_everything": True}))
    assert "thing.change" in html


def test_timeline_on_the_model_version_page(admin_client, member_client):
    version = ModelVersionFactory()
    audit_record(actor="alice", action="model_version.transition", target=version, reason="gates passed")
    url = reverse("catalog:version_detail", args=[version.pk])
    assert "gates passed" in admin_client.get(url).content.decode()
    assert "Audit timeline" not in member_client.get(url).content.decode()


def test_timeline_on_the_deployment_page(admin_client):
    from tests.deployments.factories import DeploymentFactory

    deployment = DeploymentFactory()
    audit_record(actor="alice", action="deployment.stop", target=deployment, reason="maintenance window")
    body = admin_client.get(reverse("deployments:detail", args=[deployment.pk])).content.decode()
    assert "Audit timeline" in body and "maintenance window" in body


# --- refused writes ------------------------------------------------------------------------------


def _refusals():
    return list(AuditEvent.objects.filter(action="write.refused").order_by("seq"))


def test_auditor_form_post_is_refused_and_recorded(auditor_client, auditor_user):
    response = auditor_client.post(reverse("catalog:gpu_create"), {"name": "X1"})
    assert response.status_code == 403
    [event] = _refusals()
    assert event.actor == auditor_user.username and event.role == "auditor"
    assert event.evidence == {"method": "POST", "path": reverse("catalog:gpu_create")}


def test_tenant_member_api_write_is_refused_and_recorded(member_client, member_user):
    response = member_client.post("/api/catalog/gpu-types/", {"name": "X1"}, content_type="application/json")
    assert response.status_code == 403
    [event] = _refusals()
    assert event.actor == member_user.username
    assert event.evidence["method"] == "POST" and event.evidence["path"] == "/api/catalog/gpu-types/"


def test_outsider_delete_via_api_is_recorded(outsider_client):
    version = ModelVersionFactory()
    response = outsider_client.delete(f"/api/catalog/versions/{version.pk}/")
    assert response.status_code == 403
    assert _refusals()[0].evidence["method"] == "DELETE"


def test_reads_and_anonymous_attempts_are_not_recorded(auditor_client, anon_client):
    assert auditor_client.get(reverse("catalog:gpu_create")).status_code == 403
    assert auditor_client.get("/api/catalog/gpu-types/").status_code == 200
    anon_client.post(reverse("catalog:gpu_create"), {"name": "X1"})
    assert _refusals() == []


def test_browsable_api_form_check_is_not_a_refused_write(auditor_client):
    response = auditor_client.get("/api/catalog/gpu-types/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert _refusals() == []


def test_api_time_filters_with_any_valid_utc_offset_answer_not_500(admin_client):
    """Python allows offsets up to ±23:59, PostgreSQL only ±15:59: values reach it in UTC."""
    response = admin_client.get("/api/audit/events/", {"since": "0029-09-21T18:51:30+21:17"})
    assert response.status_code == 200
    response = admin_client.get("/api/audit/events/", {"until": "0001-01-01T00:00:00+23:59"})
    assert response.status_code == 200 and response.json()["count"] == 0
