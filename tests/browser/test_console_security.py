"""In a real browser: a hostile deployment name is shown, never run, and confirmations still work."""

from __future__ import annotations

import pytest

from deployments.models import Deployment
from tests.deployments.factories import DeploymentFactory
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS_NAME = "x'+alert(document.domain)+'"


def test_hostile_deployment_name_does_not_run_and_delete_still_asks(page, live_server, admin_user):
    deployment = DeploymentFactory(name=XSS_NAME, status="RUNNING")
    dialogs: list[tuple[str, str]] = []
    csp_violations: list[str] = []
    answer = {"accept": False}

    def on_dialog(dialog):
        dialogs.append((dialog.type, dialog.message))
        dialog.accept() if answer["accept"] else dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on(
        "console",
        lambda msg: csp_violations.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    login(page, live_server.url, "admin")
    page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
    assert XSS_NAME in page.locator("h1").inner_text()

    # Dismissing the confirmation keeps the deployment; the only dialog is the confirmation,
    # whose text carries the name literally (an alert would have shown document.domain).
    page.click("button:has-text('Delete')")
    page.wait_for_function("() => true")
    assert dialogs == [("confirm", f"Delete {XSS_NAME}? Ray removes its application.")]
    deployment.refresh_from_db()
    assert deployment.deleted_at is None

    answer["accept"] = True
    with page.expect_navigation():
        page.click("button:has-text('Delete')")
    assert [d[0] for d in dialogs] == ["confirm", "confirm"]
    assert Deployment.objects.get(pk=deployment.pk).deleted_at is not None
    assert not csp_violations, csp_violations


@pytest.mark.parametrize("path,ready", [("/api/docs/", ".swagger-ui .info .title"), ("/api/redoc/", "h1")])
def test_api_docs_render_offline_under_the_csp(page, live_server, admin_user, path, ready):
    external: list[str] = []
    violations: list[str] = []
    page.on(
        "request",
        lambda req: external.append(req.url) if not req.url.startswith(live_server.url) else None,
    )
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    login(page, live_server.url, "admin")
    page.goto(f"{live_server.url}{path}")
    page.wait_for_selector(ready, timeout=60_000)
    assert "Governor API" in page.inner_text("body")
    # Redoc's bundle hard-codes its "powered by" logo from its CDN; img-src 'self' blocks it and the
    # page does not need it. Everything the page needs comes from this installation.
    decorative = {"https://cdn.redoc.ly/redoc/logo-mini.svg"}
    assert not [u for u in external if u.split(":")[0] not in ("data", "blob") and u not in decorative], (
        external
    )
    assert not [v for v in violations if not any(d in v for d in decorative)], violations
