"""Upload a batch file, create a batch from it, cancel one: the writes the OpenAI surface calls.

Every refusal is a ``BatchError`` with the HTTP status and OpenAI error code the endpoint answers;
nothing is written before every check passed. A line that cannot be read fails alone: it is
stored ``failed`` with its line number and goes to the batch's error file (docs/decisions/0036).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import orjson
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from batches import constants as c
from batches.models import Batch, BatchFile, BatchLine
from batches.selectors import served_routes


@dataclass
class BatchError(Exception):
    """A refusal in the OpenAI error shape."""

    status: int
    message: str
    code: str
    param: str | None = None


def batch_file_create(*, api_key, filename: str, purpose: str, content: bytes) -> BatchFile:
    """Keep an uploaded input file. Only ``purpose="batch"`` JSONL up to ``BATCH_FILE_MAX_BYTES``."""
    if purpose != c.PURPOSE_BATCH:
        raise BatchError(400, f"purpose must be 'batch' (got {purpose!r})", "invalid_purpose", "purpose")
    limit = settings.BATCH_FILE_MAX_BYTES
    if len(content) > limit:
        raise BatchError(
            413,
            f"the file is {len(content)} bytes; a batch file may be at most {limit}",
            "file_too_large",
            "file",
        )
    if not content.strip():
        raise BatchError(400, "the file is empty", "empty_file", "file")
    return BatchFile.objects.create(
        tenant=api_key.tenant,
        api_key=api_key,
        purpose=purpose,
        filename=(filename or "batch.jsonl")[:255],
        bytes=len(content),
        content=content,
    )


@dataclass
class Parsed:
    lines: list[BatchLine]
    models: set[str]


def _line_error(n: int, code: str, message: str, custom_id: str = "") -> BatchLine:
    return BatchLine(
        line_no=n,
        custom_id=custom_id[:512],
        status=c.LINE_FAILED,
        error={"code": code, "message": message, "line": n},
        finished_at=timezone.now(),
    )


def _parse_line(n: int, raw: bytes, endpoint: str) -> tuple[BatchLine, str | None]:
    """One JSONL line as a pending line and its model, or a failed line saying why."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _line_error(n, "invalid_json", f"line {n} is not valid JSON ({exc})"), None
    if not isinstance(obj, dict):
        return _line_error(n, "invalid_request", f"line {n} is not a JSON object"), None
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _line_error(n, "missing_custom_id", f"line {n} has no custom_id (a non-empty string)"), None
    if obj.get("method", "POST") != "POST":
        return _line_error(n, "invalid_method", f"line {n}: method must be POST", custom_id), None
    if obj.get("url") != endpoint:
        return _line_error(
            n, "invalid_url", f"line {n}: url must be the batch's endpoint {endpoint!r}", custom_id
        ), None
    body = obj.get("body")
    if not isinstance(body, dict):
        return _line_error(n, "invalid_body", f"line {n}: body must be a JSON object", custom_id), None
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _line_error(n, "missing_model", f"line {n}: body.model is required", custom_id), None
    if body.get("stream"):
        return _line_error(
            n, "stream_not_supported", f"line {n}: a batch line cannot stream", custom_id
        ), None
    tier = body.get("service_tier")
    if tier not in (None, "auto", "default", "flex"):
        return _line_error(
            n,
            "traffic_class_not_allowed",
            f"line {n}: a batch runs as sheddable traffic; service_tier {tier!r} is not allowed in it",
            custom_id,
        ), None
    return BatchLine(line_no=n, custom_id=custom_id[:512], body=body), model


def parse_input(content: bytes, endpoint: str) -> Parsed:
    lines, models = [], set()
    n = 0
    for raw in content.splitlines():
        n += 1
        if not raw.strip():
            continue  # blank lines (a trailing newline) are not requests
        line, model = _parse_line(n, raw, endpoint)
        lines.append(line)
        if model:
            models.add(model)
    return Parsed(lines, models)


def _check_model(api_key, model: str) -> None:
    route = served_routes().get(model)
    tids = (route or {}).get("tenant_ids")
    if route is None or (tids and api_key.tenant_id not in tids):
        raise BatchError(
            404,
            f"the model '{model}' does not exist or you do not have access to it",
            "model_not_found",
            "model",
        )
    if api_key.allowed_models and model not in api_key.allowed_models:
        raise BatchError(403, f"this API key may not use the model '{model}'", "model_not_allowed", "model")


@transaction.atomic
def batch_create(
    *,
    api_key,
    input_file_id: str,
    endpoint: str,
    completion_window: str = "24h",
    metadata: dict | None = None,
    traffic_class: str | None = None,
) -> Batch:
    """Check and store a batch and its lines; the runner starts once it is committed."""
    if endpoint not in c.ENDPOINTS:
        raise BatchError(
            400, f"endpoint must be one of {', '.join(c.ENDPOINTS)}", "invalid_endpoint", "endpoint"
        )
    if completion_window not in c.COMPLETION_WINDOWS:
        raise BatchError(
            400, "completion_window must be '24h'", "invalid_completion_window", "completion_window"
        )
    if traffic_class is not None and traffic_class.strip().lower() not in ("sheddable", "batch"):
        raise BatchError(
            403,
            f"a batch runs as sheddable traffic; it cannot ask for {traffic_class!r}",
            "traffic_class_not_allowed",
            "x-governor-traffic-class",
        )
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or any(not isinstance(v, str) or len(k) > 64 or len(v) > 512 for k, v in metadata.items())
    ):
        raise BatchError(
            400,
            "metadata: at most 16 string pairs (keys ≤ 64, values ≤ 512 chars)",
            "invalid_metadata",
            "metadata",
        )
    f = BatchFile.objects.filter(
        pk=input_file_id, tenant_id=api_key.tenant_id, purpose=c.PURPOSE_BATCH
    ).first()
    if f is None:
        raise BatchError(404, f"no file {input_file_id!r}", "file_not_found", "input_file_id")
    parsed = parse_input(bytes(f.content), endpoint)
    if not parsed.lines:
        raise BatchError(400, "the input file has no requests", "empty_file", "input_file_id")
    if len(parsed.lines) > settings.BATCH_MAX_LINES:
        raise BatchError(
            400,
            f"a batch may hold at most {settings.BATCH_MAX_LINES} requests",
            "too_many_requests",
            "input_file_id",
        )
    if len(parsed.models) > 1:
        raise BatchError(
            400,
            f"every line of a batch must use one model; this file uses {', '.join(sorted(parsed.models))}",
            "mixed_models",
            "input_file_id",
        )
    if not parsed.models:
        raise BatchError(400, "no line of the input file could be read", "invalid_file", "input_file_id")
    model = next(iter(parsed.models))
    _check_model(api_key, model)
    now = timezone.now()
    batch = Batch.objects.create(
        tenant_id=api_key.tenant_id,
        api_key=api_key,
        endpoint=endpoint,
        model=model,
        input_file=f,
        completion_window=completion_window,
        metadata=metadata,
        total=len(parsed.lines),
        failed=sum(1 for x in parsed.lines if x.status == c.LINE_FAILED),
        expires_at=now + dt.timedelta(hours=24),
    )
    for x in parsed.lines:
        x.batch = batch
    BatchLine.objects.bulk_create(parsed.lines, batch_size=2000)
    audit_record(
        actor=None,
        action="batch.create",
        target=batch,
        tenant_id=api_key.tenant_id,
        after={"endpoint": endpoint, "model": model, "lines": batch.total, "api_key": api_key.pk},
    )
    transaction.on_commit(lambda: _enqueue(batch.pk))
    return batch


def _enqueue(batch_id: str) -> None:
    from batches.tasks import batch_run_task

    batch_run_task.delay(batch_id)


@transaction.atomic
def batch_cancel(*, batch: Batch, actor=None) -> Batch:
    """Ask a batch to stop: ``cancelling`` until the lines in flight finish, then ``cancelled``.
    Lines already answered stay in the output file. Cancelling an ended batch changes nothing."""
    b = Batch.objects.select_for_update().get(pk=batch.pk)
    if b.status in (c.VALIDATING, c.IN_PROGRESS):
        b.status, b.cancelling_at = c.CANCELLING, timezone.now()
        b.save(update_fields=["status", "cancelling_at"])
        audit_record(
            actor=actor, action="batch.cancel", target=b, tenant_id=b.tenant_id, after={"status": b.status}
        )
        transaction.on_commit(lambda: _enqueue(b.pk))
    return b
