"""Running a batch: its lines sent through the gateway as sheddable traffic, each answered once.

A run (one Celery task, ``batches.run``) works for a slice of time, then hands over to the next:

- it **claims** lines with ``SELECT … FOR UPDATE SKIP LOCKED`` (pending ones whose retry time came,
  and running ones whose lease ran out: their runner died), marking them ``running`` under its own
  lease token until ``lease_until``, which it renews while they are in flight;
- it **sends** each through the gateway (``GATEWAY_INTERNAL_URL``) with a signed
  ``X-Governor-Batch-Line`` header (``snapshot.batchline``): the gateway serves it as the batch's
  key, sheddable, at the batch price, holds budget and meters it like any request, and answers a
  line it already answered with the stored answer, unmetered (``gateway.batchlines``);
- it **records** the answer only while it still holds the line (``lease_token``), so two runs never
  both record one line;
- when the gateway has no headroom (503 ``overloaded``, 429 rate limits, 409 line in flight,
  connection refused while it restarts) the line goes back to pending after ``Retry-After`` or a
  backoff, never failed, and the run halves how many lines it keeps in flight (it adds one back
  per success): the batch fills what interactive traffic leaves idle.

When no line is open the batch is **finalized**: output and error files written from the lines, in
line order, and the status set, in one transaction. Off-peak windows (``BATCH_OFF_PEAK_WINDOWS``)
hold the run until one opens. docs/decisions/0036.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import httpx
import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from batches import constants as c
from batches.models import Batch, BatchFile, BatchLine
from snapshot.batchline import HEADER, line_secret, sign

log = logging.getLogger(__name__)

# Retried however often (until the batch expires): the gateway has no room for sheddable traffic now.
NO_HEADROOM = frozenset({"overloaded", "rate_limit_exceeded", "batch_line_in_progress", "limits_unavailable"})
# Retried up to MAX_ATTEMPTS: the deployment or the gateway failed (a restart, a broken answer).
TRANSIENT_STATUSES = frozenset({502, 503, 504})
MAX_ATTEMPTS = 30


@dataclass
class Outcome:
    """What one attempt of a line came to."""

    kind: str  # "ok", "retry", "fail"
    response: dict | None = None
    error: dict | None = None
    retry_after: float | None = None
    shed: bool = False


def off_peak_wait(now: dt.datetime, windows: str) -> float:
    """Seconds until an off-peak window opens (0: inside one, or no windows set). ``windows`` is
    ``"HH:MM-HH:MM,…"`` in UTC; a window may wrap midnight."""
    if not windows.strip():
        return 0.0
    minute = now.hour * 60 + now.minute
    waits = []
    for part in windows.split(","):
        start_s, end_s = part.strip().split("-")
        start = int(start_s[:2]) * 60 + int(start_s[3:5])
        end = int(end_s[:2]) * 60 + int(end_s[3:5])
        inside = start <= minute < end if start <= end else (minute >= start or minute < end)
        if inside:
            return 0.0
        waits.append(((start - minute) % 1440) * 60 - now.second)
    return float(max(1, min(waits)))


def classify(status: int, headers: httpx.Headers, data: bytes, attempts: int) -> Outcome:
    """An answer of the gateway as the line's outcome."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = {"raw": data[:2000].decode("utf-8", "replace")}
    rid = headers.get("x-request-id", "")
    response = {"status_code": status, "request_id": rid, "body": body}
    if status == 200:
        return Outcome("ok", response=response)
    err = (body or {}).get("error") if isinstance(body, dict) else None
    code = (err or {}).get("code") if isinstance(err, dict) else None
    message = (err or {}).get("message") if isinstance(err, dict) else None
    retry_after = None
    if headers.get("retry-after"):
        try:
            retry_after = float(headers["retry-after"])
        except ValueError:
            retry_after = None
    if code in NO_HEADROOM or status == 409:
        return Outcome("retry", retry_after=retry_after, shed=code == "overloaded")
    if status in TRANSIENT_STATUSES and attempts < MAX_ATTEMPTS:
        return Outcome("retry", retry_after=retry_after)
    return Outcome(
        "fail",
        response=response,
        error={"code": code or f"http_{status}", "message": message or f"the gateway answered {status}"},
    )


class LineSender:
    """One run's lines in flight: claimed, sent on a thread pool, recorded and their leases renewed
    on this thread (the only one that touches the database)."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.token = uuid.uuid4().hex
        self.lease = dt.timedelta(seconds=settings.BATCH_LINE_LEASE_S)
        self.max_window = max(1, settings.BATCH_CONCURRENCY)
        self.window = self.max_window
        self.secret = line_secret(settings.GOVERNOR_BATCH_SECRET, settings.SECRET_KEY)
        self.url = settings.GATEWAY_INTERNAL_URL.rstrip("/") + batch.endpoint
        self.sent = 0

    def claim(self, n: int) -> list[BatchLine]:
        now = timezone.now()
        with transaction.atomic():
            ids = list(
                BatchLine.objects.select_for_update(skip_locked=True)
                .filter(batch_id=self.batch.pk)
                .filter(
                    Q(status=c.LINE_PENDING, next_attempt_at__isnull=True)
                    | Q(status=c.LINE_PENDING, next_attempt_at__lte=now)
                    | Q(status=c.LINE_RUNNING, lease_until__lt=now)
                )
                .order_by("line_no")
                .values_list("pk", flat=True)[:n]
            )
            if not ids:
                return []
            BatchLine.objects.filter(pk__in=ids).update(
                status=c.LINE_RUNNING,
                lease_token=self.token,
                lease_until=now + self.lease,
                attempts=F("attempts") + 1,
            )
        return list(BatchLine.objects.filter(pk__in=ids).only("pk", "line_no", "body", "attempts"))

    def send(self, client: httpx.Client, line: BatchLine) -> Outcome:
        header = sign(
            self.secret, batch_id=self.batch.pk, line_no=line.line_no, key_id=self.batch.api_key_id or 0
        )
        try:
            r = client.post(
                self.url,
                content=orjson.dumps(line.body),
                headers={"content-type": "application/json", HEADER.decode(): header.decode()},
            )
        except httpx.HTTPError as exc:
            # The gateway is restarting or the connection broke: the line is sent again (and the
            # gateway answers it from its store if this attempt got through).
            return Outcome("retry", error={"code": "gateway_unreachable", "message": str(exc)[:300]})
        return classify(r.status_code, r.headers, r.content, line.attempts)

    def record(self, line: BatchLine, out: Outcome) -> None:
        held = BatchLine.objects.filter(pk=line.pk, status=c.LINE_RUNNING, lease_token=self.token)
        now = timezone.now()
        if out.kind == "retry":
            if out.shed:
                self.window = max(1, self.window // 2)
            delay = (
                out.retry_after
                if out.retry_after is not None
                else min(10.0, 0.25 * 2 ** min(line.attempts, 6))
            )
            held.update(
                status=c.LINE_PENDING, lease_token="", next_attempt_at=now + dt.timedelta(seconds=delay)
            )
            return
        if out.kind == "ok":
            self.window = min(self.max_window, self.window + 1)
            if held.update(status=c.LINE_SUCCEEDED, response=out.response, lease_token="", finished_at=now):
                Batch.objects.filter(pk=self.batch.pk).update(completed=F("completed") + 1)
            return
        error = {**(out.error or {}), "line": line.line_no}
        if held.update(
            status=c.LINE_FAILED, response=out.response, error=error, lease_token="", finished_at=now
        ):
            Batch.objects.filter(pk=self.batch.pk).update(failed=F("failed") + 1)

    def renew(self, lines: list[BatchLine]) -> None:
        now = timezone.now()
        BatchLine.objects.filter(
            pk__in=[x.pk for x in lines], lease_token=self.token, status=c.LINE_RUNNING
        ).update(lease_until=now + self.lease)
        Batch.objects.filter(pk=self.batch.pk).update(heartbeat_at=now)

    def run(self, deadline: float) -> None:
        """Send lines until none can be claimed now, the batch is cancelled, or ``deadline`` passes
        (then the lines in flight are finished and recorded)."""
        renew_every = max(0.2, self.lease.total_seconds() / 3)
        inflight: dict[Future, BatchLine] = {}
        last_renew = last_status = time.monotonic()
        stopping = False
        with (
            httpx.Client(
                timeout=httpx.Timeout(300.0, connect=5.0),
                limits=httpx.Limits(max_connections=self.max_window),
            ) as client,
            ThreadPoolExecutor(self.max_window, thread_name_prefix="batch-line") as pool,
        ):
            while True:
                t = time.monotonic()
                if t >= deadline:
                    stopping = True
                if not stopping and len(inflight) < self.window:
                    for line in self.claim(self.window - len(inflight)):
                        inflight[pool.submit(self.send, client, line)] = line
                        self.sent += 1
                if not inflight:
                    return
                done, _ = wait(inflight, timeout=renew_every, return_when=FIRST_COMPLETED)
                for f in done:
                    self.record(inflight.pop(f), f.result())
                t = time.monotonic()
                if t - last_renew >= renew_every:
                    self.renew(list(inflight.values()))
                    last_renew = t
                if t - last_status >= 1.0:
                    last_status = t
                    status = Batch.objects.filter(pk=self.batch.pk).values_list("status", flat=True).first()
                    if status != c.IN_PROGRESS:
                        stopping = True


def _open_lines(batch: Batch):
    return BatchLine.objects.filter(batch_id=batch.pk, status__in=c.LINE_OPEN)


def _soonest_retry(batch: Batch) -> float:
    """Seconds until an open line can be sent or taken up again (its retry time, or its lease's end)."""
    now = timezone.now()
    times = [
        t
        for t in (
            _open_lines(batch)
            .filter(status=c.LINE_PENDING)
            .order_by("next_attempt_at")
            .values_list("next_attempt_at", flat=True)
            .first(),
            _open_lines(batch)
            .filter(status=c.LINE_RUNNING)
            .order_by("lease_until")
            .values_list("lease_until", flat=True)
            .first(),
        )
        if t is not None
    ]
    if not times:
        return 0.5
    return max(0.2, min((x - now).total_seconds() for x in times) + 0.1)


def _close_open(batch: Batch, status: str, code: str, message: str, *, running_too: bool) -> None:
    """End the open lines a cancel or an expiry leaves (running ones only when their lease ran out)."""
    now = timezone.now()
    qs = BatchLine.objects.filter(batch_id=batch.pk, status=c.LINE_PENDING)
    if running_too:
        qs = BatchLine.objects.filter(batch_id=batch.pk).filter(
            Q(status=c.LINE_PENDING) | Q(status=c.LINE_RUNNING, lease_until__lt=now)
        )
    for pk, n in qs.values_list("pk", "line_no"):
        BatchLine.objects.filter(pk=pk, status__in=c.LINE_OPEN).update(
            status=status,
            lease_token="",
            finished_at=now,
            error={"code": code, "message": message, "line": n},
        )


def _jsonl(rows) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def batch_finalize(*, batch_id: str, status: str) -> bool:
    """Write the output and error files and end the batch in ``status``, once no line is open.
    One transaction: a run killed here leaves the batch ``finalizing`` and the next run redoes it."""
    Batch.objects.filter(pk=batch_id, status__in=(c.IN_PROGRESS, c.CANCELLING, c.VALIDATING)).update(
        status=c.FINALIZING if status == c.COMPLETED else F("status"), finalizing_at=timezone.now()
    )
    with transaction.atomic():
        b = Batch.objects.select_for_update().get(pk=batch_id)
        if b.status in c.ENDED:
            return False
        if _open_lines(b).exists():
            return False
        short = b.pk.removeprefix("batch_")
        lines = BatchLine.objects.filter(batch_id=b.pk).order_by("line_no")
        out_rows, err_rows = [], []
        for n, custom_id, st, response, error in lines.values_list(
            "line_no", "custom_id", "status", "response", "error"
        ).iterator(chunk_size=2000):
            row = {
                "id": f"batch_req_{short}_{n}",
                "custom_id": custom_id,
                "response": response,
                "error": None,
            }
            if st == c.LINE_SUCCEEDED:
                out_rows.append(row)
            else:
                err_rows.append({**row, "error": error})
        now = timezone.now()
        for rows, attr, name in ((out_rows, "output_file", "output"), (err_rows, "error_file", "error")):
            if rows:
                content = _jsonl(rows)
                f = BatchFile.objects.create(
                    tenant_id=b.tenant_id,
                    api_key_id=b.api_key_id,
                    purpose=c.PURPOSE_OUTPUT,
                    filename=f"{b.pk}_{name}.jsonl",
                    bytes=len(content),
                    content=content,
                )
                setattr(b, attr, f)
        b.completed, b.failed = len(out_rows), len(err_rows)
        b.status = status
        stamp = {
            c.COMPLETED: "completed_at",
            c.CANCELLED: "cancelled_at",
            c.EXPIRED: "expired_at",
            c.FAILED: "failed_at",
        }[status]
        setattr(b, stamp, now)
        b.save()
    return True


def batch_run(*, batch_id: str, slice_s: float | None = None) -> tuple[str, float]:
    """Work on a batch for a slice; what next: ``("ended", 0)``, ``("more", 0)`` or ``("wait", s)``."""
    b = Batch.objects.filter(pk=batch_id).first()
    if b is None or b.status in c.ENDED:
        return "ended", 0.0
    now = timezone.now()
    if b.status == c.VALIDATING:
        Batch.objects.filter(pk=b.pk, status=c.VALIDATING).update(status=c.IN_PROGRESS, in_progress_at=now)
        b.refresh_from_db()
    Batch.objects.filter(pk=b.pk).update(heartbeat_at=now)
    if b.status == c.CANCELLING:
        _close_open(
            b,
            c.LINE_CANCELLED,
            "batch_cancelled",
            "the batch was cancelled before this line ran",
            running_too=True,
        )
        if batch_finalize(batch_id=b.pk, status=c.CANCELLED):
            return "ended", 0.0
        return "wait", _soonest_retry(b)
    if b.status == c.IN_PROGRESS and now >= b.expires_at:
        _close_open(
            b,
            c.LINE_EXPIRED,
            "batch_expired",
            "the batch's completion window ended before this line ran",
            running_too=True,
        )
        if batch_finalize(batch_id=b.pk, status=c.EXPIRED):
            return "ended", 0.0
        return "wait", _soonest_retry(b)
    if b.status == c.FINALIZING:
        batch_finalize(batch_id=b.pk, status=c.COMPLETED)
        return "ended", 0.0
    pause = off_peak_wait(now, settings.BATCH_OFF_PEAK_WINDOWS)
    if pause:
        # Next run expected then: the sweep does not take the batch for abandoned meanwhile.
        Batch.objects.filter(pk=b.pk).update(heartbeat_at=now + dt.timedelta(seconds=min(pause, 300)))
        return "wait", min(pause, 300.0)
    sender = LineSender(b)
    sender.run(time.monotonic() + (slice_s if slice_s is not None else settings.BATCH_RUN_SLICE_S))
    if not _open_lines(b).exists():
        status = Batch.objects.filter(pk=b.pk).values_list("status", flat=True).first()
        if status == c.IN_PROGRESS:
            batch_finalize(batch_id=b.pk, status=c.COMPLETED)
            return "ended", 0.0
        return "more", 0.0  # cancelled meanwhile: the next run closes it
    return ("more", 0.0) if sender.sent else ("wait", _soonest_retry(b))


def batches_abandoned() -> list[str]:
    """Active batches no runner has touched for two leases: their runs died with a worker."""
    stale = timezone.now() - dt.timedelta(seconds=2 * settings.BATCH_LINE_LEASE_S)
    return list(
        Batch.objects.filter(status__in=c.ACTIVE)
        .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale))
        .values_list("pk", flat=True)
    )
