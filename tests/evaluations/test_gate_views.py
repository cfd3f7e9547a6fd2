"""Gate pages and their permissions: admins act, auditors read and export, tenants and outsiders 403."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from audit.models import AuditEvent
from evaluations.models import EvalCaseResult, EvalSuiteVersion, GateDecision, GatePolicy, GateRun
from evaluations.services.evals import eval_run_create
from tests.evaluations.gate_fixtures import SUITE

pytestmark = pytest.mark.django_db
READ = [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 302)]


@pytest.fixture
def decision(policy, candidate, deployments, suite):
    run = eval_run_create(
        actor="controller", suite_version=suite, deployment=deployments["candidate"], enqueue=False
    )
    EvalCaseResult.objects.create(
        run=run, case_id="a1", category="arithmetic", output="2", score=1.0, latency_ms=12
    )
    return GateDecision.objects.create(
        model_version=candidate, policy=policy, gpu_type=policy.gpu_type, kind="quality", verdict="failed",
        label="simulated", decided_by="controller", summary="failed: arithmetic: drop vs baseline",
        eval_run=run, checks=[{"name": "arithmetic: drop vs baseline", "limit": 0.05, "value": 0.3, "unit": "",
                               "passed": False, "detail": "Δ -0.300 [-0.4, -0.2]"}],
        measured={"candidate": {"arithmetic": {"mean": 0.6, "low": 0.5, "high": 0.7, "n": 50}},
                  "baseline": {"arithmetic": {"mean": 0.9, "low": 0.8, "high": 0.95, "n": 50}}},
    )  # fmt: skip


def _urls(decision, candidate, policy):
    return [
        reverse("gates:decision_list"),
        reverse("gates:decision_list") + f"?kind=quality&verdict=failed&model={candidate.model_id}",
        reverse("gates:decision_export", args=["csv"]),
        reverse("gates:decision_export", args=["json"]),
        reverse("gates:decision_detail", args=[decision.pk]),
        reverse("gates:version_gates", args=[candidate.pk]),
        reverse("gates:policy_list"),
        reverse("gates:policy_detail", args=[candidate.model_id]),
        reverse("gates:suite_list"),
        reverse("gates:suite_detail", args=[decision.eval_run.suite_version.suite_id]),
        reverse("gates:suite_download", args=[decision.eval_run.suite_version.suite_id, 1]),
        reverse("gates:evalrun_detail", args=[decision.eval_run_id]),
        reverse("gates:evalrun_export", args=[decision.eval_run_id, "csv"]),
        reverse("gates:evalrun_export", args=[decision.eval_run_id, "json"]),
    ]


@pytest.mark.parametrize("role,expected", READ)
def test_reads_for_admins_and_auditors_only(role_clients, role, expected, decision, candidate, policy):
    for url in _urls(decision, candidate, policy):
        assert role_clients[role].get(url).status_code == expected, url


@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_only_admins_change_policies_suites_and_run_gates(role_clients, role, candidate, policy):
    client = role_clients[role]
    expected = 302 if role == "anon" else 403
    assert client.get(reverse("gates:policy_edit", args=[candidate.model_id])).status_code == expected
    assert client.post(reverse("gates:policy_edit", args=[candidate.model_id]), {}).status_code == expected
    upload = SimpleUploadedFile("s.jsonl", SUITE.encode())
    assert client.post(reverse("gates:suite_upload"), {"name": "x", "file": upload}).status_code == expected
    assert (
        client.post(reverse("gates:gate_run_start", args=[candidate.pk]), {"mode": "predicted"}).status_code
        == expected
    )
    r = client.post(reverse("catalog:version_transition", args=[candidate.pk]),
                    {"to": "approved", "override": "on", "reason": "I want it approved now"})  # fmt: skip
    assert r.status_code == expected
    assert GatePolicy.objects.count() == 1 and not GateRun.objects.exists()
    candidate.refresh_from_db()
    assert candidate.lifecycle == "candidate"


def test_decision_page_shows_thresholds_values_and_evidence(admin_client, decision):
    html = admin_client.get(reverse("gates:decision_detail", args=[decision.pk])).content.decode()
    assert "arithmetic: drop vs baseline" in html and "0.05" in html and "0.3" in html
    assert reverse("gates:evalrun_detail", args=[decision.eval_run_id]) in html
    assert "badge-simulated" in html


def test_exports_follow_the_filters(auditor_client, decision):
    data = auditor_client.get(reverse("gates:decision_export", args=["json"]) + "?verdict=failed").json()
    assert [d["id"] for d in data["decisions"]] == [decision.pk]
    assert data["decisions"][0]["checks"][0]["passed"] is False
    assert auditor_client.get(reverse("gates:decision_export", args=["json"]) + "?verdict=passed").json() == {
        "decisions": []
    }
    csv_text = auditor_client.get(reverse("gates:decision_export", args=["csv"])).content.decode()
    assert csv_text.splitlines()[0].startswith("decision,decided at,model") and "failed" in csv_text
    assert auditor_client.get(reverse("gates:decision_export", args=["xml"])).status_code == 404


def test_version_page_offers_allowed_moves_and_says_why_approval_is_blocked(
    admin_client, decision, candidate
):
    html = admin_client.get(candidate.get_absolute_url()).content.decode()
    assert 'data-move="draft"' in html and 'data-move="rejected"' in html
    assert 'data-move="approved"' not in html and 'data-move="serving"' not in html
    assert "Approved is blocked" in html and "quality gate failed" in html and 'id="override-form"' in html
    panel = admin_client.get(
        reverse("gates:version_gates", args=[candidate.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'data-gate="quality" data-verdict="failed"' in panel
    # The chart's data rides in an attribute: htmx drops <script> blocks from what it swaps in.
    assert "<script" not in panel
    chart = json.loads(html_lib.unescape(re.search(r'data-chart="([^"]+)"', panel).group(1)))
    assert chart["categories"] and len(chart["candidate"]) == len(chart["baseline"]) == len(
        chart["categories"]
    )
    assert 'id="gate-run-form"' in panel


def test_admin_overrides_with_a_reason_from_the_version_page(admin_client, decision, candidate):
    url = reverse("catalog:version_transition", args=[candidate.pk])
    admin_client.post(url, {"to": "approved", "override": "on", "reason": "short"})
    candidate.refresh_from_db()
    assert candidate.lifecycle == "candidate"
    admin_client.post(
        url, {"to": "approved", "override": "on", "reason": "Needed for the launch; ML lead accepted"}
    )
    candidate.refresh_from_db()
    assert candidate.lifecycle == "approved" and candidate.gate_override_reason.startswith("Needed")
    html = admin_client.get(candidate.get_absolute_url()).content.decode()
    assert 'id="override-banner"' in html and "Needed for the launch" in html
    assert AuditEvent.objects.filter(action="model_version.gate_override", actor="admin").exists()


def test_gates_pages_show_an_override_who_when_and_why(admin_client, auditor_client, decision, candidate):
    url = reverse("catalog:version_transition", args=[candidate.pk])
    admin_client.post(
        url, {"to": "approved", "override": "on", "reason": "Needed for the launch; ML lead accepted"}
    )
    candidate.refresh_from_db()
    when = candidate.gate_override_at.strftime("%Y-%m-%d %H:%M")
    # The auditors' gates page: an override is no decision, yet it is listed beside them.
    html = auditor_client.get(reverse("gates:decision_list")).content.decode()
    assert 'id="gate-overrides"' in html and f'data-override-version="{candidate.pk}"' in html
    row = html.split(f'data-override-version="{candidate.pk}"')[1].split("</tr>")[0]
    assert "admin" in row and when in row and "Needed for the launch; ML lead accepted" in row
    # Filtered to another version, it is not listed.
    html = auditor_client.get(
        reverse("gates:decision_list"), {"version": candidate.pk + 1000}
    ).content.decode()
    assert 'id="gate-overrides"' not in html
    # The version's checklist (also loaded into the catalog page) says it was overridden, not only "blocked".
    html = auditor_client.get(
        reverse("gates:version_gates", args=[candidate.pk]), {"partial": 1}
    ).content.decode()
    assert 'id="gates-overridden"' in html and f"overridden by admin on {when}" in html


def test_policy_editor_saves_a_new_version_and_shows_errors_on_fields(admin_client, policy, candidate, gpu):
    url = reverse("gates:policy_edit", args=[candidate.model_id])
    form = admin_client.get(url).context["form"]
    data = {k: ("on" if v is True else "" if v in (None, False) else v) for k, v in form.initial.items()}
    data["gpu_type"] = gpu.pk
    data["quality_max_drop"] = "1.7"
    r = admin_client.post(url, data)
    assert r.status_code == 200 and "must be between 0 and 1 (got 1.7)" in r.content.decode()
    assert GatePolicy.objects.count() == 1
    data["quality_max_drop"] = "0.05"
    data["reason"] = "tighter"
    r = admin_client.post(url, data)
    assert r.status_code == 302, r.context["form"].errors if r.context else r
    latest = GatePolicy.objects.order_by("-number").first()
    assert latest.number == 2 and latest.quality["default"]["max_drop"] == 0.05 and latest.reason == "tighter"


def test_suite_upload_form_names_the_bad_line(admin_client):
    bad = SUITE + "\n{not json}\n"
    r = admin_client.post(
        reverse("gates:suite_upload"), {"name": "mine", "file": SimpleUploadedFile("s.jsonl", bad.encode())}
    )
    assert r.status_code == 400 and "Line 13: invalid JSON" in r.content.decode()
    assert not EvalSuiteVersion.objects.exists()
    r = admin_client.post(
        reverse("gates:suite_upload"), {"name": "mine", "file": SimpleUploadedFile("s.jsonl", SUITE.encode())}
    )
    assert r.status_code == 302
    assert EvalSuiteVersion.objects.get().case_count == 12


def test_admin_starts_gates_from_the_page(admin_client, policy, candidate):
    r = admin_client.post(reverse("gates:gate_run_start", args=[candidate.pk]), {"mode": "predicted"})
    assert r.status_code == 302
    run = GateRun.objects.get()
    assert run.kinds == ["quality", "performance", "stability"] and run.status == "queued"
    again = admin_client.post(
        reverse("gates:gate_run_start", args=[candidate.pk]), {"mode": "predicted"}, follow=True
    )
    assert "already running" in again.content.decode() and GateRun.objects.count() == 1


def test_eval_run_page_filters_cases(admin_client, decision):
    url = reverse("gates:evalrun_detail", args=[decision.eval_run_id])
    assert "a1" in admin_client.get(url + "?category=arithmetic").content.decode()
    data = json.loads(
        admin_client.get(reverse("gates:evalrun_export", args=[decision.eval_run_id, "json"])).content
    )
    assert data["cases"][0]["case_id"] == "a1"


def test_decision_list_queries_do_not_grow_with_rows(admin_client, decision, django_assert_max_num_queries):
    for verdict in ("passed", "error") * 10:
        GateDecision.objects.create(
            model_version=decision.model_version, policy=decision.policy, gpu_type=decision.gpu_type,
            kind="performance", verdict=verdict, label="predicted", decided_by="controller",
        )  # fmt: skip
    with django_assert_max_num_queries(12):
        assert admin_client.get(reverse("gates:decision_list")).status_code == 200


def test_eval_run_progress_polls_while_active_and_reloads_when_done(admin_client, decision):
    run = decision.eval_run
    url = reverse("gates:evalrun_detail", args=[run.pk]) + "?part=progress&was_active=1"
    html = admin_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 1s"' in html and 'data-status="queued"' in html
    type(run).objects.filter(pk=run.pk).update(
        status="succeeded", scores={"arithmetic": {"mean": 1, "low": 0.7, "high": 1, "n": 1}}
    )
    r = admin_client.get(url, HTTP_HX_REQUEST="true")
    assert r.headers.get("HX-Refresh") == "true"
