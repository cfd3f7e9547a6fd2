"""The issue's "done when", through the console and a running gateway, with no hand-made snapshot.

A platform admin prices a model and gives the tenant a budget in the console; a tenant admin
creates a key in the console (shown once); the route comes from the deployments app's real tables
(a simulated engine process stands in for Ray Serve's proxy at ``RAY_SERVE_URL``). Every change is
published by the services' on-commit hooks. The tenant then uses the key from the ``openai`` client,
hits its rate limit and its budget cap with clean errors, and sees its usage on its own page.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from django.urls import reverse

from deployments.models import ModelRoute
from deployments.services import model_route_save, route_target_set
from tests.deployments.factories import DeploymentFactory
from tests.gateway.conftest import start_engine, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _version(gateway: str) -> int:
    return httpx.get(gateway + "/healthz").json()["snapshot_version"]


def _models_ok(gateway: str, secret: str) -> bool:
    return httpx.get(
        gateway + "/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    ).is_success


def _applied(gateway: str, before: int) -> None:
    deadline = time.monotonic() + 2.0  # the propagation bound
    while _version(gateway) == before:
        assert time.monotonic() < deadline, "gateway did not apply the console's change within 2 s"
        time.sleep(0.01)


def test_tenant_creates_key_uses_it_hits_limits_and_sees_usage(
    gateway, gw_tmp, settings, tenant, admin_client, tenant_admin_client, member_client,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    engine, engine_url = start_engine(gw_tmp, name="e2e-engine", model="llama-3.1-8b")
    try:
        # The engine answers under any route prefix, like Ray Serve's proxy at RAY_SERVE_URL.
        settings.RAY_SERVE_URL = engine_url.removesuffix("/v1")
        dep = DeploymentFactory(slug="acme-llama", status="RUNNING", served_model_name="llama-3.1-8b")
        v = _version(gateway)
        with django_capture_on_commit_callbacks(execute=True):
            route = model_route_save(route=ModelRoute(public_name="acme-chat"), actor="system:test")
            route_target_set(route=route, deployment=dep, weight=100, actor="system:test")
        _applied(gateway, v)

        v = _version(gateway)
        with django_capture_on_commit_callbacks(execute=True):
            r = admin_client.post(
                reverse("billing:price_create"),
                {"public_model": "acme-chat", "input_per_million": "1000", "output_per_million": "3000"},
            )
        assert r.status_code == 302
        _applied(gateway, v)

        v = _version(gateway)
        with django_capture_on_commit_callbacks(execute=True):
            r = tenant_admin_client.post(
                reverse("billing:key_create"),
                {"tenant": tenant.pk, "name": "chatbot", "rpm_limit": 3, "tpm_limit": 0},
            )
        assert r.status_code == 200
        secret = r.context["secret"]
        _applied(gateway, v)

        client = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["acme-chat"]
        for _ in range(3):
            out = client.chat.completions.create(
                model="acme-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=10
            )
            assert out.model == "acme-chat" and out.usage.completion_tokens == 10
        with pytest.raises(openai.RateLimitError) as exc:
            client.chat.completions.create(
                model="acme-chat", messages=[{"role": "user", "content": "x"}], max_tokens=10
            )
        assert exc.value.body["code"] == "rate_limit_exceeded"
        assert int(exc.value.response.headers["retry-after"]) >= 1

        # A budget of ~3 worst cases (≈ 8 prompt + 200 output tokens at $1000/$3000 per M ≈ $0.61 each).
        v = _version(gateway)
        with django_capture_on_commit_callbacks(execute=True):
            r = admin_client.post(
                reverse("billing:budget_edit", args=[tenant.slug]),
                {
                    "amount_usd": "2",
                    "period": "monthly",
                    "soft_threshold_percents": "50",
                    "hard_cap_percent": "100",
                    "rpm_limit": 0,
                    "tpm_limit": 0,
                    "max_input_tokens": 0,
                    "max_output_tokens": 0,
                },  # fmt: skip
            )
        assert r.status_code == 302
        _applied(gateway, v)
        with django_capture_on_commit_callbacks(execute=True):
            r = tenant_admin_client.post(
                reverse("billing:key_create"),
                {"tenant": tenant.pk, "name": "batch", "rpm_limit": 0, "tpm_limit": 0},
            )
        batch = openai.OpenAI(base_url=gateway + "/v1", api_key=r.context["secret"], max_retries=0)
        # The new key works once the gateway applied the snapshot that carries it.
        wait_until(lambda: _models_ok(gateway, r.context["secret"]), what="the new key accepted")
        codes = []
        for _ in range(8):
            try:
                stream = batch.chat.completions.create(
                    model="acme-chat",
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=200,
                    stream=True,
                )
                assert sum(1 for _ in stream) > 0
                codes.append("ok")
            except openai.RateLimitError as e:
                codes.append(e.body["code"])
        assert codes[0] == "ok" and codes[-1] in ("budget_exceeded", "worst_case_over_budget")

        # The tenant's own usage page: requests, tokens, cost and budget left.
        deadline = time.monotonic() + 10
        ok = 3 + codes.count("ok")
        while time.monotonic() < deadline:
            page = member_client.get(reverse("billing:usage"))
            if page.context["totals"]["requests"] >= ok:
                break
            time.sleep(0.2)
        totals = page.context["totals"]
        assert totals["requests"] == ok and totals["completion_tokens"] == 30 + 200 * codes.count("ok")
        budget = page.context["budgets"][0]
        assert budget["spent_usd"] > 0 and budget["left_usd"] < 2
        csv = b"".join(
            member_client.get(reverse("billing:usage"), {"format": "csv"}).streaming_content
        ).decode()
        assert csv.count("acme-chat") == ok
    finally:
        engine.stop()
