"""Eval-suite and gate API: roles, suite upload errors naming the line, decisions, status, starting gates."""

from __future__ import annotations

import json

import pytest

from evaluations.models import EvalSuiteVersion, GateDecision, GateRun
from tests.evaluations.gate_fixtures import SUITE

pytestmark = pytest.mark.django_db
API = "/api/evaluations"


def _post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 401)]
)
def test_reads_for_admins_and_auditors(role_clients, role, expected, policy, candidate):
    GateDecision.objects.create(model_version=candidate, policy=policy, gpu_type=policy.gpu_type, kind="quality",
                                verdict="passed", label="simulated", decided_by="controller")  # fmt: skip
    for url in (
        f"{API}/suites/",
        f"{API}/gate-decisions/?verdict=passed",
        f"{API}/versions/{candidate.pk}/gates/",
    ):
        assert role_clients[role].get(url).status_code == expected, url


@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_only_admins_upload_suites_and_start_gates(role_clients, role, policy, candidate):
    refused = 401 if role == "anon" else 403  # anonymous API calls are asked to authenticate
    assert _post(role_clients[role], f"{API}/suites/", {"name": "x", "content": SUITE}).status_code == refused
    assert _post(role_clients[role], f"{API}/versions/{candidate.pk}/gates/run/", {}).status_code == refused
    assert not GateRun.objects.exists()


def test_suite_upload_api_names_the_bad_line_and_saves_nothing(admin_client):
    bad = (
        SUITE + '\n{"id": "a1", "category": "arithmetic", "prompt": "x", "expected": 1, "scorer": "numeric"}'
    )
    r = _post(admin_client, f"{API}/suites/", {"name": "api-suite", "content": bad})
    assert r.status_code == 400 and "Line 13: duplicate id 'a1'" in r.content.decode()
    assert not EvalSuiteVersion.objects.exists()
    r = _post(admin_client, f"{API}/suites/", {"name": "api-suite", "content": SUITE})
    assert r.status_code == 201 and r.json()["case_count"] == 12 and r.json()["number"] == 1
    r = _post(admin_client, f"{API}/suites/", {"name": "api-suite", "content": SUITE})
    assert r.status_code == 400 and "already" in r.content.decode()  # same checksum


def test_gate_status_and_starting_gates_through_the_api(admin_client, policy, candidate):
    status = admin_client.get(f"{API}/versions/{candidate.pk}/gates/").json()
    assert status["passed"] is False and status["policy_number"] == 1 and len(status["gates"]) == 3
    r = _post(
        admin_client, f"{API}/versions/{candidate.pk}/gates/run/", {"mode": "predicted", "kinds": ["quality"]}
    )
    assert r.status_code == 201 and r.json()["kinds"] == ["quality"]
    r = _post(admin_client, f"{API}/versions/{candidate.pk}/gates/run/", {"mode": "sideways"})
    assert r.status_code == 400


def test_catalog_transition_api_refuses_unpassed_gates_with_400_and_accepts_an_override(
    admin_client, policy, candidate
):
    url = f"/api/catalog/versions/{candidate.pk}/transition/"
    r = _post(admin_client, url, {"to": "approved"})
    assert r.status_code == 400 and "quality gate has not run" in r.content.decode()
    r = _post(
        admin_client,
        url,
        {"to": "approved", "override": True, "reason": "Signed off by the ML lead, ticket 42"},
    )
    assert r.status_code == 200 and r.json()["lifecycle"] == "approved"
    assert r.json()["gate_override_reason"].startswith("Signed off")
