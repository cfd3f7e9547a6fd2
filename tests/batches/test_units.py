"""The Batch API's pieces that need no processes: the signed line header, off-peak windows, how a
gateway answer becomes a line's outcome, reading a JSONL file, and the pages' and API's access."""

from __future__ import annotations

import datetime as dt

import httpx
import orjson
import pytest

from batches.services.batches import parse_input
from batches.services.runner import classify, off_peak_wait
from snapshot.batchline import line_secret, sign, verify


def test_a_signed_line_header_names_its_line_and_key_and_nothing_else_passes():
    secret = line_secret(None, "a-secret-key-of-the-console")
    value = sign(secret, batch_id="batch_abc", line_no=7, key_id=42)
    assert verify(secret, value) == ("batch_abc", 7, 42)
    assert verify(line_secret(None, "another-installation-key"), value) == "bad batch line signature"
    forged = value.replace(b":42:", b":43:")
    assert verify(secret, forged) == "bad batch line signature"
    assert verify(secret, b"garbage") == "malformed batch line header"
    assert verify(secret, value, now=10**12) == "expired batch line signature"
    assert "not enabled" in verify(None, value)


@pytest.mark.parametrize(
    ("windows", "at", "wait"),
    [
        ("", "12:00", 0),
        ("22:00-06:00", "23:30", 0),
        ("22:00-06:00", "05:59", 0),
        ("22:00-06:00", "21:00", 3600),
        ("01:00-02:00,12:00-13:00", "11:30", 1800),
    ],
)
def test_off_peak_windows_hold_a_batch_until_one_opens(windows, at, wait):
    h, m = map(int, at.split(":"))
    now = dt.datetime(2026, 1, 1, h, m, tzinfo=dt.UTC)
    assert off_peak_wait(now, windows) == wait


def _answer(status, code=None, retry_after=None):
    headers = httpx.Headers({"x-request-id": "r1", **({"retry-after": retry_after} if retry_after else {})})
    body = {"error": {"code": code, "message": "m"}} if code else {"choices": []}
    return classify(status, headers, orjson.dumps(body), attempts=1)


def test_no_headroom_is_retried_never_failed_and_a_refusal_fails_the_line():
    shed = _answer(503, "overloaded", "2")
    assert (shed.kind, shed.retry_after, shed.shed) == ("retry", 2.0, True)
    assert _answer(429, "rate_limit_exceeded").kind == "retry"
    assert _answer(409, "batch_line_in_progress").kind == "retry"
    assert _answer(502, "upstream_broken").kind == "retry"
    spent = _answer(429, "budget_exceeded")
    assert spent.kind == "fail" and spent.error["code"] == "budget_exceeded"
    bad = _answer(400, "invalid_value")
    assert bad.kind == "fail" and bad.response["status_code"] == 400
    ok = _answer(200)
    assert ok.kind == "ok" and ok.response["request_id"] == "r1"


def test_a_bad_line_fails_alone_with_its_line_number():
    good = orjson.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": []}})  # fmt: skip
    content = b"\n".join([good, b"{not json", b"[1]", good.replace(b'"a"', b'""'),
                          good.replace(b"}}", b', "stream": true}}'),
                          good.replace(b"}}", b', "service_tier": "priority"}}'), b"", good])  # fmt: skip
    parsed = parse_input(content, "/v1/chat/completions")
    codes = {x.line_no: (x.error or {}).get("code") for x in parsed.lines}
    assert codes == {1: None, 2: "invalid_json", 3: "invalid_request", 4: "missing_custom_id",
                     5: "stream_not_supported", 6: "traffic_class_not_allowed", 8: None}  # fmt: skip
    assert all(x.error["line"] == x.line_no for x in parsed.lines if x.error)
    assert parsed.models == {"m"}


@pytest.fixture
def batches_of_two_tenants(tenant, other_tenant):
    from batches.models import Batch, BatchFile

    def make(t, content=b"x"):
        f = BatchFile.objects.create(tenant=t, purpose="batch", filename="in.jsonl", bytes=1, content=content)
        return Batch.objects.create(tenant=t, endpoint="/v1/chat/completions", model="m", input_file=f,
                                    total=4, completed=2, status="in_progress",
                                    expires_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))  # fmt: skip

    return make(tenant, b"ours"), make(other_tenant, b"theirs")


def test_a_member_sees_and_downloads_only_their_tenants_batches(member_client, batches_of_two_tenants):
    ours, theirs = batches_of_two_tenants
    page = member_client.get("/batches/")
    assert page.status_code == 200 and ours.pk in page.text and theirs.pk not in page.text
    detail = member_client.get(f"/batches/{ours.pk}/")
    assert detail.status_code == 200 and "50%" in detail.text and 'hx-trigger="every 2s"' in detail.text
    assert member_client.get(f"/batches/{ours.pk}/files/input/").content == b"ours"
    assert member_client.get(f"/batches/{theirs.pk}/").status_code == 404
    assert member_client.get(f"/batches/{theirs.pk}/files/input/").status_code == 404
    api = member_client.get("/api/batches/").json()
    assert [b["id"] for b in api["results"]] == [ours.pk]
    assert member_client.get(f"/api/batches/{theirs.pk}/").status_code == 404


def test_only_a_tenant_admin_cancels_and_an_outsider_gets_404(
    member_client, tenant_admin_client, outsider_client, batches_of_two_tenants
):
    ours, _ = batches_of_two_tenants
    assert member_client.post(f"/batches/{ours.pk}/cancel/").status_code == 403
    assert outsider_client.post(f"/batches/{ours.pk}/cancel/").status_code == 404
    ours.refresh_from_db()
    assert ours.status == "in_progress"
    assert tenant_admin_client.post(f"/batches/{ours.pk}/cancel/").status_code == 302
    ours.refresh_from_db()
    assert ours.status == "cancelling" and ours.cancelling_at is not None


def test_batch_prices_page_is_the_admins_and_refuses_what_cannot_be_derived(admin_client, member_client):
    from billing.models import Price

    assert member_client.get("/batches/prices/").status_code in (302, 403)
    assert admin_client.get("/batches/prices/").status_code == 200
    r = admin_client.post(
        "/batches/prices/", {"public_model": "no-such-model", "fingerprint": "x"}, follow=True
    )
    assert "No route serves this model" in r.text
    assert not Price.objects.filter(kind="batch").exists()
