"""The Batch API end to end, through the official ``openai`` client against the real gateway: a
batch runs as sheddable lines, each metered once at the batch price; a bad line fails alone with
its line number; refusals are OpenAI errors that change nothing; cancel; and a gateway restart and
a killed worker mid-batch lose no line and run none twice."""

from __future__ import annotations

import io

import openai
import orjson
import pytest

from tests.batches.conftest import MODEL
from tests.gateway.conftest import wait_shipped, wait_until

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def client(gw_url: str, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw_url + "/v1", api_key=secret, max_retries=0, timeout=60)


def line(i: int, *, model: str = MODEL, url: str = "/v1/chat/completions") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": f"say {i}"}], "max_tokens": 4}
    return orjson.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url, "body": body})


def upload(c: openai.OpenAI, lines: list[bytes]):
    return c.files.create(file=("in.jsonl", io.BytesIO(b"\n".join(lines) + b"\n")), purpose="batch")


def wait_ended(c: openai.OpenAI, batch_id: str, timeout: float = 180):
    return wait_until(
        lambda: (
            (b := c.batches.retrieve(batch_id)).status in ("completed", "cancelled", "failed", "expired")
            and b
        ),
        timeout=timeout,
        what=f"batch {batch_id} ended",
        interval=0.3,
    )


def jsonl(c: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [orjson.loads(x) for x in c.files.content(file_id).content.splitlines() if x.strip()]


def usage_events(key_id: int):
    from billing.models import UsageEvent

    return list(UsageEvent.objects.filter(api_key_id=key_id))


def test_batch_runs_through_the_gateway_each_line_once_at_the_batch_price(stack):
    gw, c = stack["gateway"], client(stack["gateway"].url, stack["secret"])
    lines = [line(i) for i in range(1, 21)]
    lines[6] = b'{"custom_id": "req-7", "method": "POST", "url": '  # malformed JSON, line 7
    lines[11] = line(12, url="/v1/completions")  # not the batch's endpoint, line 12
    f = upload(c, lines)
    assert f.purpose == "batch" and f.bytes > 0
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                         metadata={"job": "nightly"})  # fmt: skip
    assert b.status in ("validating", "in_progress") and b.request_counts.total == 20
    b = wait_ended(c, b.id)
    assert b.status == "completed", b
    assert (b.request_counts.completed, b.request_counts.failed) == (18, 2)
    assert b.metadata == {"job": "nightly"}

    out = jsonl(c, b.output_file_id)
    assert sorted(r["custom_id"] for r in out) == sorted(f"req-{i}" for i in range(1, 21) if i not in (7, 12))
    assert all(r["response"]["status_code"] == 200 and r["response"]["body"]["choices"] for r in out)
    errors = {r["error"]["line"]: r for r in jsonl(c, b.error_file_id)}
    assert set(errors) == {7, 12}
    assert errors[7]["error"]["code"] == "invalid_json"
    assert errors[12]["custom_id"] == "req-12" and errors[12]["error"]["code"] == "invalid_url"

    # Metered per line, once each, sheddable, at the batch price.
    wait_shipped(gw.url, timeout=180)
    events = [e for e in usage_events(stack["key"].pk) if e.status == "ok"]
    assert sorted(e.event_id.hex for e in events) == sorted(r["response"]["request_id"] for r in out)
    _, batch_price = stack_prices()
    for e in events:
        assert e.traffic_class == "sheddable"
        assert e.price_id == batch_price.pk
        assert (
            e.cost_nanos
            == e.prompt_tokens * batch_price.input_nanos + e.completion_tokens * batch_price.output_nanos
        )

    # Another tenant's key sees neither the batch nor its files.
    other = client(gw.url, stack["other"])
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(b.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(b.output_file_id)
    assert other.batches.list().data == []


def stack_prices():
    from billing.models import Price

    return Price.objects.get(kind="online"), Price.objects.get(kind="batch")


def test_refusals_are_openai_errors_and_change_nothing(stack, settings):
    from batches.models import Batch, BatchFile

    gw = stack["gateway"]
    c = client(gw.url, stack["secret"])
    f = upload(c, [line(1), line(2)])
    files_before, batches_before = BatchFile.objects.count(), Batch.objects.count()

    settings.BATCH_FILE_MAX_BYTES = 100
    with pytest.raises(openai.APIStatusError) as exc:
        upload(c, [line(i) for i in range(10)])
    assert exc.value.status_code == 413 and exc.value.code == "file_too_large"
    settings.BATCH_FILE_MAX_BYTES = 10_000_000

    with pytest.raises(openai.BadRequestError) as exc:
        c.files.create(file=("in.jsonl", io.BytesIO(line(1))), purpose="fine-tune")
    assert exc.value.code == "invalid_purpose"

    narrow = client(gw.url, stack["narrow"])
    nf = upload(narrow, [line(1)])
    with pytest.raises(openai.PermissionDeniedError) as exc:
        narrow.batches.create(input_file_id=nf.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert exc.value.code == "model_not_allowed" and MODEL in exc.value.message

    with pytest.raises(openai.PermissionDeniedError) as exc:
        c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                         extra_headers={"X-Governor-Traffic-Class": "interactive"})  # fmt: skip
    assert exc.value.code == "traffic_class_not_allowed"

    mixed = upload(c, [line(1), line(2, model="another")])
    with pytest.raises(openai.BadRequestError) as exc:
        c.batches.create(input_file_id=mixed.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert exc.value.code == "mixed_models"

    with pytest.raises(openai.NotFoundError):
        client(gw.url, stack["other"]).batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(openai.AuthenticationError):
        client(gw.url, "gk-not-a-key").batches.list()

    # Nothing was created by the refusals (the two good uploads only), and the accepted file still works.
    assert Batch.objects.count() == batches_before
    assert BatchFile.objects.count() == files_before + 2
    b = wait_ended(
        c, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id
    )
    assert b.status == "completed" and b.request_counts.completed == 2


def test_cancel_keeps_what_was_answered(stack):
    c = client(stack["gateway"].url, stack["secret"])
    f = upload(c, [line(i) for i in range(1, 401)])
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_until(
        lambda: c.batches.retrieve(b.id).request_counts.completed >= 5, timeout=120, what="lines answered"
    )
    cancelled = c.batches.cancel(b.id)
    assert cancelled.status in ("cancelling", "cancelled")
    b = wait_ended(c, b.id)
    assert b.status == "cancelled" and b.cancelled_at is not None
    counts = b.request_counts
    assert counts.completed + counts.failed == counts.total == 400
    assert 5 <= counts.completed < 400
    out, errors = jsonl(c, b.output_file_id), jsonl(c, b.error_file_id)
    assert len(out) == counts.completed and len({r["custom_id"] for r in out}) == len(out)
    assert {r["error"]["code"] for r in errors} == {"batch_cancelled"}


def test_gateway_restart_and_killed_worker_lose_no_line_and_run_none_twice(stack):
    gw, worker = stack["gateway"], stack["worker"]
    c = client(gw.url, stack["secret"])
    n = 300
    f = upload(c, [line(i) for i in range(1, n + 1)])
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")

    def done() -> int:
        from batches.models import Batch

        return Batch.objects.get(pk=b.id).completed

    wait_until(lambda: done() >= 30, timeout=120, what="a tenth of the lines answered")
    gw.restart()
    c = client(gw.url, stack["secret"])
    at_restart = done()
    wait_until(
        lambda: done() >= at_restart + 30, timeout=120, what="lines answered after the gateway restart"
    )
    worker.kill()
    # The new worker takes the killed one's lines up once their leases run out (its start sweeps).
    worker.start()
    b = wait_ended(c, b.id, timeout=300)
    assert b.status == "completed", b
    assert (b.request_counts.completed, b.request_counts.failed) == (n, 0)
    out = jsonl(c, b.output_file_id)
    ids = [r["custom_id"] for r in out]
    assert len(ids) == n and set(ids) == {f"req-{i}" for i in range(1, n + 1)}
    wait_shipped(gw.url, timeout=180)
    billed = [e.event_id.hex for e in usage_events(stack["key"].pk) if e.status == "ok"]
    assert len(billed) == len(set(billed)) == n, "a line was billed twice, or not at all"
    assert set(billed) == {r["response"]["request_id"] for r in out}
