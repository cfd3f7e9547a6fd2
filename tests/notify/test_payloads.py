"""Webhook signatures and payloads against references this project did not write: the Standard
Webhooks library verifies the signatures, and Alertmanager's documented webhook format (copied
verbatim in ``reference/``) defines the keys and value kinds of the Alertmanager payload."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import orjson
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from notify import payloads, signing
from notify.models import Notification, new_webhook_secret

REFERENCE = Path(__file__).parent / "reference" / "alertmanager_webhook_format.txt"
# RFC 3339, section 5.6 (date-time), with the fraction optional.
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
# Alertmanager's <labelname> (the same page's generic placeholders).
LABELNAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _documented_format() -> tuple[dict[str, str], dict[str, str]]:
    """The top-level keys and the alert's keys, each with its placeholder, from the copied text."""
    text = REFERENCE.read_text(encoding="utf-8").split("--- verbatim ---", 1)[1]
    block = text.split("```", 2)[1]
    top, alert = {}, {}
    for line in block.splitlines():
        m = re.match(r'^(\s*)"(\w+)":\s*(.*?),?\s*(//.*)?$', line)
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2), m.group(3).strip().rstrip(",")
        (top if indent == 2 else alert)[key] = value
    return top, alert


def _check(value, placeholder: str, where: str) -> None:
    if placeholder == "<string>":
        assert isinstance(value, str), where
    elif placeholder == "<int>":
        assert isinstance(value, int) and not isinstance(value, bool), where
    elif placeholder == "<object>":
        assert isinstance(value, dict), where
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()), where
    elif placeholder == '"<resolved|firing>"':
        assert value in ("resolved", "firing"), where
    elif placeholder == '"<rfc3339>"':
        assert isinstance(value, str) and RFC3339.match(value), (where, value)
    elif placeholder == "[":
        assert isinstance(value, list) and value, where
    else:
        assert value == orjson.loads(placeholder), (where, value, placeholder)


def _note(**kw) -> Notification:
    fields = {
        "pk": 41,
        "audience": "oncall",
        "kind": "deployments.cluster_unreachable",
        "severity": "critical",
        "title": "Ray cluster unreachable",
        "body": "The reconciler cannot reach Ray.",
        "payload": {"event": "deployments.cluster_unreachable", "labels": {"cluster": "local"}},
        "created_at": dt.datetime(2026, 12, 3, 1, 2, 3, 456000, tzinfo=dt.UTC),
    }
    fields.update(kw)
    return Notification(**fields)


def test_the_reference_text_names_the_documented_keys():
    top, alert = _documented_format()
    assert list(top) == [
        "version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
        "commonLabels", "commonAnnotations", "externalURL", "alerts",
    ]  # fmt: skip
    assert list(alert) == [
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint",
    ]  # fmt: skip


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_the_alertmanager_payload_has_exactly_the_documented_keys_and_kinds(status):
    resolved = dt.datetime(2026, 12, 3, 2, 0, tzinfo=dt.UTC) if status == "resolved" else None
    body = payloads.alertmanager_payload(
        _note(resolved_at=resolved),
        status=status,
        tenant_slug=None,
        console_url="https://governor.example/notifications/#n41",
        receiver="governor",
    )
    body = orjson.loads(orjson.dumps(body))  # what the receiver parses
    top, alert_fmt = _documented_format()
    assert set(body) == set(top)
    for key, placeholder in top.items():
        _check(body[key], placeholder, key)
    for alert in body["alerts"]:
        assert set(alert) == set(alert_fmt)
        for key, placeholder in alert_fmt.items():
            _check(alert[key], placeholder, f"alerts[].{key}")
        assert all(LABELNAME.match(k) for k in alert["labels"])
        assert alert["status"] == status == body["status"]
    a = body["alerts"][0]
    assert a["labels"]["alertname"] == "deployments.cluster_unreachable" and a["labels"]["cluster"] == "local"
    assert a["startsAt"] == "2026-12-03T01:02:03.456Z"
    assert a["endsAt"] == ("2026-12-03T02:00:00.000Z" if resolved else payloads.GO_ZERO_TIME)
    assert body["commonAnnotations"]["summary"] == "Ray cluster unreachable"


def test_fingerprints_follow_the_label_set_only():
    a = payloads.labels_of(_note(), None)
    b = payloads.labels_of(_note(title="other words", pk=7), None)
    c = payloads.labels_of(_note(), "acme")
    assert payloads.fingerprint(a) == payloads.fingerprint(b) != payloads.fingerprint(c)
    assert re.fullmatch(r"[0-9a-f]{16}", payloads.fingerprint(a))


def test_signatures_verify_with_the_standard_webhooks_library():
    secret = new_webhook_secret()
    body = b'{"event":"budget.threshold_crossed","percent":50}'
    headers = signing.sign_headers(secret, "msg_17", body)
    # The specification's reference library accepts them: same id, timestamp, body, secret.
    verified = Webhook(secret).verify(body, headers)
    assert verified == {"event": "budget.threshold_crossed", "percent": 50}
    # And refuses what it should: another body, another secret, a replay from ten minutes ago.
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_webhook_secret()).verify(body, headers)
    old = signing.sign_headers(secret, "msg_17", body, timestamp=int(dt.datetime.now().timestamp()) - 600)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, old)


def test_our_verifier_agrees_with_the_librarys_signer():
    secret = new_webhook_secret()
    body = b'{"a":1}'
    now = dt.datetime.now(dt.UTC)
    lib_sig = Webhook(secret).sign("msg_3", now, body.decode())
    headers = {
        "webhook-id": "msg_3",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": lib_sig,
    }
    signing.verify(secret, headers, body)
    assert lib_sig == signing.signature(secret, "msg_3", int(now.timestamp()), body)
    # Several signatures (a key rotation on the receiver's side): one match is enough.
    headers["webhook-signature"] = "v1,AAAA " + lib_sig
    signing.verify(secret, headers, body)
    for bad in ({**headers, "webhook-signature": "v1,AAAA"}, {**headers, "webhook-timestamp": "0"}, {}):
        with pytest.raises(signing.SignatureError):
            signing.verify(secret, bad, body)
    with pytest.raises(ValueError, match="whsec_"):
        signing.signature("not-a-secret", "m", 1, body)
