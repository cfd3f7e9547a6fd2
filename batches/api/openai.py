"""The OpenAI Batch API as the console serves it (the gateway passes ``/v1/files*`` and
``/v1/batches*`` on to here, ``gateway.batchapi``): files.create / retrieve / content,
batches.create / retrieve / list / cancel, in OpenAI's shapes and error format.

Authenticated by the API key itself (``Authorization: Bearer``), checked against Postgres: a key
sees only its tenant's files and batches, and another tenant's id is a 404 like an unknown one.
"""

from __future__ import annotations

import json

from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from batches import constants as c
from batches.models import Batch, BatchFile
from batches.selectors import batch_of_tenant, batches_of_tenant, file_of_tenant
from batches.services.batches import BatchError, batch_cancel, batch_create, batch_file_create
from billing.selectors.keys import api_key_for_secret


def error(
    status: int, message: str, code: str, param: str | None = None, type_: str = "invalid_request_error"
):
    return JsonResponse(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}, status=status
    )


def _ts(d) -> int | None:
    return int(d.timestamp()) if d else None


def file_json(f: BatchFile) -> dict:
    return {
        "id": f.id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": _ts(f.created_at),
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_json(b: Batch) -> dict:
    return {
        "id": b.id,
        "object": "batch",
        "endpoint": b.endpoint,
        "model": b.model,
        "errors": b.errors,
        "input_file_id": b.input_file_id,
        "completion_window": b.completion_window,
        "status": b.status,
        "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id,
        "created_at": _ts(b.created_at),
        "in_progress_at": _ts(b.in_progress_at),
        "expires_at": _ts(b.expires_at),
        "finalizing_at": _ts(b.finalizing_at),
        "completed_at": _ts(b.completed_at),
        "failed_at": _ts(b.failed_at),
        "expired_at": _ts(b.expired_at),
        "cancelling_at": _ts(b.cancelling_at),
        "cancelled_at": _ts(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata,
    }


def _key(request):
    auth = request.headers.get("Authorization", "")
    secret = auth[7:].strip() if auth[:7].lower() == "bearer " else auth.strip()
    return api_key_for_secret(secret=secret) if secret else None


def keyed(view):
    """The view with the request's API key, or a 401 in OpenAI's shape; a ``BatchError`` answered."""

    @csrf_exempt
    def wrapped(request, *args, **kwargs):
        key = _key(request)
        if key is None:
            return error(401, "invalid, revoked or expired API key", "invalid_api_key")
        try:
            return view(request, key, *args, **kwargs)
        except BatchError as exc:
            return error(exc.status, exc.message, exc.code, exc.param)

    return wrapped


def _methods(request, *allowed):
    if request.method not in allowed:
        return error(405, f"use {' or '.join(allowed)}", "method_not_allowed")
    return None


@keyed
def files(request, key):
    if (refused := _methods(request, "POST", "GET")) is not None:
        return refused
    if request.method == "GET":
        rows = BatchFile.objects.filter(tenant_id=key.tenant_id).order_by("-created_at")[:100]
        return JsonResponse({"object": "list", "data": [file_json(f) for f in rows], "has_more": False})
    upload = request.FILES.get("file")
    if upload is None:
        return error(400, "send the JSONL file as multipart field 'file'", "missing_file", "file")
    if upload.size > request_limit():
        raise BatchError(
            413,
            f"the file is {upload.size} bytes; a batch file may be at most {request_limit()}",
            "file_too_large",
            "file",
        )
    f = batch_file_create(
        api_key=key, filename=upload.name, purpose=request.POST.get("purpose", ""), content=upload.read()
    )
    return JsonResponse(file_json(f))


def request_limit() -> int:
    from django.conf import settings

    return settings.BATCH_FILE_MAX_BYTES


@keyed
def file_detail(request, key, file_id: str):
    if (refused := _methods(request, "GET")) is not None:
        return refused
    f = file_of_tenant(tenant_id=key.tenant_id, file_id=file_id)
    if f is None:
        return error(404, f"no file {file_id!r}", "file_not_found")
    return JsonResponse(file_json(f))


@keyed
def file_content(request, key, file_id: str):
    if (refused := _methods(request, "GET")) is not None:
        return refused
    f = file_of_tenant(tenant_id=key.tenant_id, file_id=file_id)
    if f is None:
        return error(404, f"no file {file_id!r}", "file_not_found")
    resp = HttpResponse(bytes(f.content), content_type="application/jsonl")
    resp["Content-Disposition"] = f'attachment; filename="{f.filename}"'
    return resp


@keyed
def batches(request, key):
    if (refused := _methods(request, "POST", "GET")) is not None:
        return refused
    if request.method == "GET":
        return _batch_list(request, key)
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return error(400, "could not parse the request body as JSON", "invalid_json")
    if not isinstance(body, dict):
        return error(400, "the request body must be a JSON object", "invalid_json")
    for field in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(field), str):
            return error(400, f"{field} is required (a string)", "missing_required_parameter", field)
    b = batch_create(
        api_key=key,
        input_file_id=body["input_file_id"],
        endpoint=body["endpoint"],
        completion_window=body["completion_window"],
        metadata=body.get("metadata"),
        traffic_class=request.headers.get("X-Governor-Traffic-Class"),
    )
    return JsonResponse(batch_json(b))


def _batch_list(request, key):
    try:
        limit = min(100, max(1, int(request.GET.get("limit", 20))))
    except ValueError:
        return error(400, "limit must be an integer from 1 to 100", "invalid_value", "limit")
    qs = batches_of_tenant(tenant_id=key.tenant_id)
    after = request.GET.get("after")
    if after:
        anchor = batch_of_tenant(tenant_id=key.tenant_id, batch_id=after)
        if anchor is None:
            return error(404, f"no batch {after!r}", "batch_not_found", "after")
        qs = qs.filter(created_at__lte=anchor.created_at).exclude(
            created_at=anchor.created_at, pk__gte=anchor.pk
        )
    rows = list(qs[: limit + 1])
    data = [batch_json(b) for b in rows[:limit]]
    return JsonResponse(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(rows) > limit,
        }
    )


@keyed
def batch_detail(request, key, batch_id: str):
    if (refused := _methods(request, "GET")) is not None:
        return refused
    b = batch_of_tenant(tenant_id=key.tenant_id, batch_id=batch_id)
    if b is None:
        return error(404, f"no batch {batch_id!r}", "batch_not_found")
    return JsonResponse(batch_json(b))


@keyed
def batch_cancel_view(request, key, batch_id: str):
    if (refused := _methods(request, "POST")) is not None:
        return refused
    b = batch_of_tenant(tenant_id=key.tenant_id, batch_id=batch_id)
    if b is None:
        return error(404, f"no batch {batch_id!r}", "batch_not_found")
    if b.status in c.ENDED and b.status != c.CANCELLED:
        return error(
            409,
            f"batch {b.id} is {b.status}; only a batch in progress can be cancelled",
            "batch_not_cancellable",
        )
    return JsonResponse(batch_json(batch_cancel(batch=b)))
