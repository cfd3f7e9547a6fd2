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
