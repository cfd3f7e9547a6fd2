"""A tenant's usage by traffic class in a real browser (ADR 0035): the table of requests, shed and
cost per class, and the class filter, which swaps the table in place (htmx) and keeps the URL."""

from __future__ import annotations

import pytest

from tests.billing.test_traffic_classes import _event
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_reads_usage_by_class_and_filters_to_one(page, live_server, member_user, tenant):
    for cls in ("interactive", "standard", "standard", "sheddable"):
        _event(tenant, cls)
    _event(tenant, "sheddable", error_type="shed_sheddable", cost=0)
    login(page, live_server.url, member_user.username)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/billing/usage/")
    table = page.get_by_role("table", name="Usage by traffic class")
    rows = [r.inner_text().split("\t")[:3] for r in table.locator("tbody tr").all()]
    assert rows == [["interactive", "1", "0"], ["standard", "2", "0"], ["sheddable", "2", "1"]]
    page.select_option("#id_traffic_class", "sheddable")
    page.wait_for_url("**traffic_class=sheddable**")
    page.wait_for_function("document.querySelectorAll('#usage-table tbody tr td:nth-child(6)').length === 2")
    cells = page.locator("#usage-table table:not([aria-label]) tbody tr td:nth-child(6)").all_inner_texts()
    assert cells == ["sheddable", "sheddable"]
