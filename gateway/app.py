"""The gateway: a raw ASGI app in front of the deployments (no framework in the hot path).

Per request: authenticate the key against the in-memory snapshot, validate, admit (rate limits +
budget hold in one Redis script), pick a deployment, forward, stream bytes back, then make the
usage event durable in the spool and settle the hold *before* the final chunk goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
import uuid

import aiohttp
import orjson
import redis.asyncio as aioredis

from asgistream import BodyPusher
from gateway import metrics as m
from gateway.config import GatewayConfig, load_config
from gateway.embeddings import context_error, validate_embeddings
from gateway.endpoints import MAX_TOKENS_FIELD, PATHS, serves, upstream_url
from gateway.ledger import Ledger, ledger_record
from gateway.limits import REASONS, Limiter
from gateway.pricing import MIN_HOLD_NANOS, price_refusal
from gateway.redisfast import FastRedis
from gateway.responses import FINAL_EVENTS, responses_usage, validate_responses
from gateway.router import Router
from gateway.spool import SCHEMA_VERSION as SPOOL_SCHEMA_VERSION
from gateway.spool import Shipper, SpoolWriter
from gateway.upstream import UpstreamPool
from gateway.validation import (
    BadRequest,
    choices_per_request,
    ensure_serialisable,
    estimate_prompt_tokens,
    normalise_output_limit,
    prompt_token_bound,
    validate,
)
from snapshot.contract import ALERTS_LIST, KeyInfo, SnapshotHolder, Target, TenantInfo, period_key

log = logging.getLogger("gateway")

JSON_CT = (b"content-type", b"application/json")
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"
# Failures to reach a deployment (nothing was answered, so another one may be tried).
CONNECT_ERRORS = (ConnectionError, OSError, TimeoutError)
# Failures while reading an answer (aiohttp only for https targets).
READ_ERRORS = (TimeoutError, ConnectionError, aiohttp.ClientError)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def new_request_id() -> bytes:
    return uuid.uuid4().hex.encode()


async def send_json(send, status: int, body: bytes, headers: list | None = None) -> None:
    """Every response the gateway writes carries an ``x-request-id`` (admitted requests use their
    usage event's id, so support can find the event; rejections get a fresh one)."""
    h = [JSON_CT, (b"content-length", str(len(body)).encode())]
    if headers:
        h.extend(headers)
        if not any(k == b"x-request-id" for k, _ in headers):
            h.append((b"x-request-id", new_request_id()))
    else:
        h.append((b"x-request-id", new_request_id()))
    await send({"type": "http.response.start", "status": status, "headers": h})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send,
    status: int,
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: list | None = None,
    reason: str | None = None,
) -> None:
    if reason:
        m.child(m.REJECTIONS, reason).inc()
    await send_json(send, status, error_body(message, type_, code, param), headers)


def _may_use(key: KeyInfo, tenant: TenantInfo, route) -> bool:
    """A key may use a route when its tenant may (``tenant_ids`` empty = every tenant) and the key's
    allowed models, if it has a list, name it."""
    if route.tenant_ids is not None and tenant.id not in route.tenant_ids:
        return False
    return key.models is None or route.name in key.models


# Answers that say the deployment itself is unavailable, which eject it for ``eject_s``. A 500 may
# be about one request (vLLM answers 500 for some inputs it cannot handle); ejecting on it would let
# one tenant's crafted request take a model away from every tenant.
EJECTING_STATUSES = frozenset({502, 503, 504})


class _Period:
    """Caches the current budget period key per period kind until it ends."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, float]] = {}

    def get(self, period: str, now: float) -> tuple[str, float]:
        c = self._cache.get(period)
        if c is None or now >= c[1]:
            c = self._cache[period] = period_key(period, now)
        return c


class Gateway:
    """Process-wide state and the ASGI entry point."""

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config
        self.redis = None
        self.limiter: Limiter | None = None
        self.fast_redis: FastRedis | None = None
        self.snapshots: SnapshotHolder | None = None
        self.router: Router | None = None
        self.spool: SpoolWriter | None = None
        self.shipper: Shipper | None = None
        self.http: UpstreamPool | None = None
        self._tasks: list[asyncio.Task] = []
        self._periods = _Period()
        self._name = f"{socket.gethostname()}:{os.getpid()}"
        self.ledger: Ledger | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def startup(self) -> None:
        cfg = self.config = self.config or load_config()
        self._name = f"{socket.gethostname()}:{os.getpid()}"
        # A blocking pool: under a burst, requests queue for a connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            cfg.redis_url, max_connections=256, timeout=5, socket_connect_timeout=3, socket_timeout=5
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self.fast_redis = FastRedis(cfg.redis_url)
        # Unique across restarts (a pid is reused): the reaper must never take a new worker for a dead one.
        worker_id = f"{self._name}:{uuid.uuid4().hex[:8]}"
        self.limiter = Limiter(self.fast_redis, cfg.key_prefix, worker_id)
        self.snapshots = SnapshotHolder(self.redis, cfg.key_prefix, cfg.snapshot_poll_s)
        try:
            await self.snapshots.refresh()
        except Exception as exc:  # noqa: BLE001 - start anyway; the poller keeps trying
            log.warning("could not load the config snapshot at start: %s", exc)
        self.router = Router(cfg.eject_s)
        self.spool = SpoolWriter(cfg.spool_dir)
        self.spool.start()
        self.shipper = Shipper(
            cfg.spool_dir, cfg.database_url, interval_s=cfg.ship_interval_s, batch=cfg.ship_batch
        )
        self.shipper.start()
        self.ledger = Ledger(
            redis=self.redis,
            limiter=self.limiter,
            spool=self.spool,
            worker_id=worker_id,
            lease_s=cfg.lease_s,
            journal_s=cfg.journal_s,
        )
        with contextlib.suppress(Exception):  # the ledger's loop keeps trying
            await self.ledger.renew_lease()
        self.http = UpstreamPool(
            connect_timeout=cfg.upstream_connect_timeout_s, idle_timeout=cfg.upstream_idle_timeout_s
        )
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.snapshots.run_poll()),
            loop.create_task(self.snapshots.run_subscribe()),
            loop.create_task(self.ledger.run()),
        ]

    async def shutdown(self) -> None:
        if self.snapshots:
            self.snapshots.stop()
        for t in self._tasks:
            t.cancel()
        if self.ledger and not self.ledger.active:
            with contextlib.suppress(Exception):
                await self.ledger.release_lease()
        if self.spool:
            await self.spool.close()
        if self.shipper:
            await asyncio.get_running_loop().run_in_executor(None, self.shipper.stop)
        if self.http:
            await self.http.close()
        if self.redis:
            await self.redis.aclose()
        if self.fast_redis:
            self.fast_redis.close()

    async def __call__(self, scope, receive, send) -> None:
        t = scope["type"]
        if t == "http":
            path = scope["path"]
            if self._head_too_large(scope):
                await send_error(
                    send,
                    431,
                    f"request headers larger than {self.config.max_header_bytes} bytes",
                    "invalid_request_error",
                    "headers_too_large",
                    headers=[(b"connection", b"close")],
                    reason="headers_too_large",
                )
                return
            if path == "/v1/chat/completions" or path == "/v1/completions":
                if scope["method"] != "POST":
                    await send_error(send, 405, "use POST", "invalid_request_error", "method_not_allowed")
                    return
                await self.completions(
                    scope, receive, send, "chat" if path == "/v1/chat/completions" else "text"
                )
            elif path == "/v1/embeddings" or path == "/v1/responses":
                if scope["method"] != "POST":
                    await send_error(send, 405, "use POST", "invalid_request_error", "method_not_allowed")
                    return
                await self.completions(scope, receive, send, path[4:])
            elif path == "/v1/models":
                await self.models(scope, send)
            elif path.startswith("/v1/models/"):
                await self.model_retrieve(scope, send, path[len("/v1/models/") :])
            elif path == "/metrics":
                body, ct = m.render()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [(b"content-type", ct.encode()), (b"x-request-id", new_request_id())],
                    }
                )
                await send({"type": "http.response.body", "body": body})
            elif path == "/healthz":
                snap = self.snapshots.current if self.snapshots else None
                await send_json(
                    send,
                    200,
                    orjson.dumps(
                        {
                            "ok": True,
                            "snapshot_version": snap.version if snap else 0,
                            "spool_events": self.spool.events if self.spool else 0,
                            "shipped": self.shipper.shipped if self.shipper else 0,
                            "ship_error": self.shipper.last_error if self.shipper else None,
                            "pid": os.getpid(),
                        }
                    ),
                )
            else:
                await send_error(send, 404, f"no route for {path}", "invalid_request_error", "not_found")
        elif t == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    try:
                        await self.startup()
                    except Exception as exc:
                        log.exception("gateway failed to start")
                        await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                        return
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await self.shutdown()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    # --- auth ---------------------------------------------------------------------------------

    def _head_too_large(self, scope) -> bool:
        limit = self.config.max_header_bytes if self.config else 32 * 1024
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        for k, v in scope["headers"]:
            size += len(k) + len(v) + 4
        return size > limit

    def _authenticate(self, headers) -> tuple[KeyInfo | None, TenantInfo | None, str | None, bytes | None]:
        """Returns (key, tenant, error message, session header value)."""
        auth = None
        session = None
        sh = self.config.session_header.encode()
        for k, v in headers:
            if k == b"authorization":
                auth = v
            elif k == sh:
                session = v
        if not auth:
            return None, None, "missing API key: send 'Authorization: Bearer <key>'", session
        snap = self.snapshots.current
        # No cache keyed by what the client sent (it grew with every invalid key): hashing a key is
        # about a microsecond and the snapshot's dict holds only keys that exist.
        token = auth[7:] if auth[:7].lower() == b"bearer " else auth
        key = snap.keys.get(hashlib.sha256(token.strip()).hexdigest())
        if key is None:
            return None, None, "invalid API key", session
        if key.revoked:
            return None, None, "this API key has been revoked", session
        if key.expires_at is not None and time.time() >= key.expires_at:
            return None, None, "this API key has expired", session
        tenant = snap.tenants.get(key.tenant_id)
        if tenant is None:
            return None, None, "this API key's tenant is not active", session
        return key, tenant, None, session

    async def models(self, scope, send) -> None:
        key, tenant, err, _ = self._authenticate(scope["headers"])
        if err:
            await send_error(send, 401, err, "invalid_request_error", "invalid_api_key", reason="auth")
            return
        snap = self.snapshots.current
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "governor"}
            for name, r in sorted(snap.routes.items())
            if r.targets and _may_use(key, tenant, r)
        ]
        await send_json(send, 200, orjson.dumps({"object": "list", "data": data}))

    async def model_retrieve(self, scope, send, model: str) -> None:
        """``GET /v1/models/{id}`` (the SDK's ``models.retrieve``): listed exactly when ``/v1/models``
        lists it; a forbidden and an unknown name get the same 404."""
        key, tenant, err, _ = self._authenticate(scope["headers"])
        if err:
            await send_error(send, 401, err, "invalid_request_error", "invalid_api_key", reason="auth")
            return
        r = self.snapshots.current.routes.get(model)
        if r is None or not r.targets or not _may_use(key, tenant, r):
            await send_error(
                send,
                404,
                f"the model '{model}' does not exist or you do not have access to it",
                "invalid_request_error",
                "model_not_found",
                "model",
                reason="unknown_model",
            )
            return
        await send_json(
            send, 200, orjson.dumps({"id": model, "object": "model", "created": 0, "owned_by": "governor"})
        )

    # --- completions --------------------------------------------------------------------------

    async def _read_body(self, scope, receive) -> bytes | None:
        limit = self.config.max_body_bytes
        for k, v in scope["headers"]:
            if k == b"content-length":
                try:
                    if int(v) > limit:
                        return None
                except ValueError:
                    return None
                break
        msg = await receive()
        body = msg.get("body", b"")
        if not msg.get("more_body"):
            return body
        parts = [body]
        size = len(body)
        while msg.get("more_body"):
            msg = await receive()
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
        return b"".join(parts)

    async def completions(self, scope, receive, send, kind: str) -> None:
        t0 = time.perf_counter()
        started_at = time.time()
        cfg = self.config
        key, tenant, err, session = self._authenticate(scope["headers"])
        body_raw = await self._read_body(scope, receive)
        if body_raw is None:
            await send_error(
                send,
                413,
                f"request body larger than {cfg.max_body_bytes} bytes",
                "invalid_request_error",
                "body_too_large",
                reason="body_too_large",
            )
            return
        if err:
            await send_error(send, 401, err, "invalid_request_error", "invalid_api_key", reason="auth")
            return
        try:
            body = orjson.loads(body_raw)
        except orjson.JSONDecodeError:
            await send_error(
                send,
                400,
                "could not parse the request body as JSON",
                "invalid_request_error",
                "invalid_json",
                reason="bad_request",
            )
            return
        longest_ids = None
        try:
            if kind == "embeddings":
                model, prompt_est, prompt_bound, longest_ids = validate_embeddings(body)
                stream, max_tokens, n, wants_usage = False, 0, 1, False  # nothing generated
            elif kind == "responses":
                model, stream, max_tokens, prompt_est, prompt_bound = validate_responses(
                    body, len(body_raw), absurd_max_tokens=cfg.absurd_max_tokens
                )
                n, wants_usage = 1, True  # its final event carries the usage: always passed on
            else:
                model, stream, max_tokens, n, wants_usage = validate(
                    kind, body, absurd_max_tokens=cfg.absurd_max_tokens
                )
                prompt_est = estimate_prompt_tokens(kind, body)
                # The hold's prompt bound needs the route's allowance per image: set at admission.
                prompt_bound = None
            choices = choices_per_request(kind, body, n) if kind in ("chat", "text") else 1
        except BadRequest as exc:
            await self._bad_request(send, exc)
            return
        snap = self.snapshots.current
        route = snap.routes.get(model)
        if route is None or not route.targets or not _may_use(key, tenant, route):
            # One answer for "no such model" and "not yours": which names exist is not disclosed.
            await send_error(
                send,
                404,
                f"the model '{model}' does not exist or you do not have access to it",
                "invalid_request_error",
                "model_not_found",
                "model",
                reason="unknown_model",
            )
            return
        if not any(serves(t, kind) for t in route.targets):
            await send_error(
                send,
                404,
                f"the model '{model}' is not served at {PATHS[kind]}: its deployments do not run that endpoint",
                "invalid_request_error",
                "unsupported_endpoint",
                "model",
                reason="unsupported_endpoint",
            )
            return
        ctx_err = context_error(longest_ids, [t for t in route.targets if serves(t, kind)])
        if ctx_err is not None:
            await send_error(
                send,
                400,
                ctx_err,
                "invalid_request_error",
                "context_length_exceeded",
                "input",
                reason="bad_request",
            )
            return
        if tenant.max_input_tokens and prompt_est > tenant.max_input_tokens:
            await send_error(
                send,
                400,
                f"the prompt is about {prompt_est} tokens; this tenant may send at most {tenant.max_input_tokens}",
                "invalid_request_error",
                "input_tokens_over_limit",
                "messages" if kind == "chat" else "prompt",
                reason="admission_input",
            )
            return
        if max_tokens is not None and tenant.max_output_tokens and max_tokens > tenant.max_output_tokens:
            await send_error(
                send,
                400,
                f"max_tokens={max_tokens} is over this tenant's limit of {tenant.max_output_tokens}",
                "invalid_request_error",
                "max_tokens_over_limit",
                "max_tokens",
                reason="admission_output",
            )
            return
        if max_tokens is None:
            # The worst case must be bounded to hold budget for it, so the gateway always sets one.
            max_tokens = min(tenant.max_output_tokens or cfg.default_max_tokens, cfg.default_max_tokens)
            if kind == "responses":
                body[MAX_TOKENS_FIELD[kind]] = max_tokens
        if kind in ("chat", "text"):
            # One limit goes to the engine, the one held for: no other length field can raise it.
            normalise_output_limit(body, max_tokens)
        if stream and kind != "responses":
            so = body.get("stream_options")
            body["stream_options"] = (
                {**so, "include_usage": True} if isinstance(so, dict) else {"include_usage": True}
            )
        try:
            # What cannot be forwarded is refused now, before anything is held.
            ensure_serialisable(body)
        except BadRequest as exc:
            await self._bad_request(send, exc)
            return
        candidates = [t for t in self.router.candidates(route, prompt_est) if serves(t, kind)]
        if not candidates:
            # Unknown (not heard from since the start), failing or ejected: 503 with a time to retry.
            retry_s = self.router.retry_after_s(route.targets)
            await send_error(
                send,
                503,
                f"no healthy deployment serves '{model}' right now; retry after {retry_s}s",
                "service_unavailable",
                "no_deployment",
                headers=[(b"retry-after", str(retry_s).encode())],
                reason="no_deployment",
            )
            return

        # --- admission: limits, budget hold and ledger entry in one atomic step -------------
        price = snap.prices.get(model)
        refusal = price_refusal(model=model, route=route, price=price, tenant=tenant)
        if refusal is not None:
            await send_error(
                send, 403, refusal, "invalid_request_error", "price_missing", "model", reason="price_missing"
            )
            return
        in_p = price.input_nanos if price else 0
        out_p = price.output_nanos if price else 0
        tokens_est = prompt_est + max_tokens * choices
        # The hold covers whatever the engine can count (tools, schemas, template, images at the
        # route's bound) and everything it may generate (every choice, every prompt of a batch).
        if prompt_bound is None:
            prompt_bound = prompt_token_bound(
                kind, body, len(body_raw), tokens_per_image=route.tokens_per_image
            )
        hold = prompt_bound * in_p + max_tokens * choices * out_p
        budget = tenant.budget
        now = started_at
        pkey = ""
        seed = 0
        ttl = 0
        cap = -1
        if budget is not None:
            pkey, pend = self._periods.get(budget.period, now)
            seed = budget.spent_nanos if budget.spent_period_key == pkey else 0
            ttl = int(pend - now) + 7 * 86400
            if budget.hard_cap_nanos is not None:
                cap = budget.hard_cap_nanos
        # No hard cap: nothing to hold. With one, every request holds something, free ones too.
        hold = 0 if cap < 0 else max(hold, MIN_HOLD_NANOS)
        limited = key.rpm or key.tpm or tenant.rpm or tenant.tpm
        event_id = uuid.uuid4()
        record = ledger_record(
            gateway=self._name,
            tenant_id=tenant.id,
            api_key_id=key.id,
            model=model,
            price_id=price.price_id if price else None,
            in_p=in_p,
            out_p=out_p,
            prompt_est=prompt_est,
            hold=hold,
            budget_active=budget is not None,
            period_key=pkey,
            seed=seed,
            ttl=ttl,
            stream=stream,
            started_at=started_at,
        )
        rl_headers: list = []
        recorded = True
        try:
            adm = await self.limiter.admit(
                key_id=key.id,
                tenant_id=tenant.id,
                key_rpm=key.rpm,
                key_tpm=key.tpm,
                tenant_rpm=tenant.rpm,
                tenant_tpm=tenant.tpm,
                tokens=tokens_est,
                hold_nanos=hold,
                cap_nanos=cap,
                seed_spent_nanos=seed,
                period_key=pkey or "none",
                budget_ttl_s=ttl or 60,
                event_id=event_id.hex,
                record=record,
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("admission failed (Redis): %s", exc)
            if limited or cap >= 0:
                # Fail closed: limits and budgets cannot be checked.
                await send_error(
                    send,
                    503,
                    "the gateway cannot check limits right now; retry shortly",
                    "service_unavailable",
                    "limits_unavailable",
                    reason="redis_unavailable",
                )
                return
            # Nothing to check and nothing held: serve, without a ledger entry (only a worker's
            # death during this request would then go unbilled).
            adm, recorded = None, False
        if adm is not None and not adm.admitted:
            await self._refuse(send, adm, key, tenant, hold, cap)
            return
        if adm is not None and limited:
            reset = f"{adm.limit_or_reset_ms / 1000:.3f}s".encode()
            rpm = min(x for x in (key.rpm, tenant.rpm, 1 << 62) if x)
            tpm = min(x for x in (key.tpm, tenant.tpm, 1 << 62) if x)
            if adm.remaining_requests >= 0:
                rl_headers += [
                    (b"x-ratelimit-limit-requests", str(rpm).encode()),
                    (b"x-ratelimit-remaining-requests", str(adm.remaining_requests).encode()),
                    (b"x-ratelimit-reset-requests", reset),
                ]
            if adm.remaining_tokens >= 0:
                rl_headers += [
                    (b"x-ratelimit-limit-tokens", str(tpm).encode()),
                    (b"x-ratelimit-remaining-tokens", str(adm.remaining_tokens).encode()),
                    (b"x-ratelimit-reset-tokens", reset),
                ]

        # --- forward and settle -------------------------------------------------------------
        ctx = _Request(
            gw=self,
            kind=kind,
            model=model,
            key=key,
            tenant=tenant,
            stream=stream,
            wants_usage=wants_usage,
            prompt_est=prompt_est,
            tokens_est=tokens_est,
            hold=hold,
            cap=cap,
            in_p=in_p,
            out_p=out_p,
            price_id=price.price_id if price else None,
            pkey=pkey,
            seed=seed,
            ttl=ttl,
            limited=bool(limited),
            t0=t0,
            started_at=started_at,
            event_id=event_id,
            recorded=recorded,
        )
        sticky = body.get("user") or (session.decode("latin-1") if session else None)
        await ctx.run(send, receive, body, candidates, sticky, rl_headers)

    async def _bad_request(self, send, exc: BadRequest) -> None:
        await send_error(
            send,
            exc.status,
            exc.message,
            "invalid_request_error",
            exc.code or "invalid_value",
            exc.param,
            reason="bad_request",
        )

    async def _refuse(self, send, adm, key: KeyInfo, tenant: TenantInfo, hold: int, cap: int) -> None:
        """Answer a request ADMIT turned down: the budget, or which rate limit and when to retry."""
        reason = REASONS[adm.reason]
        if reason == "budget_exceeded":
            left = cap - adm.budget_spent_nanos
            if hold > left > 0:
                # Nothing else could make room: this request alone is larger than what is left.
                # A quota condition like the next one (429 insufficient_quota, not retried), with its
                # own code: the client can still get through by asking for less.
                await send_error(
                    send,
                    429,
                    f"this request's worst case, {_usd(hold)}, exceeds the budget's remaining {_usd(left)}; "
                    "lower max_tokens (or max_completion_tokens) or send a shorter prompt",
                    "insufficient_quota",
                    "worst_case_over_budget",
                    "max_tokens",
                    headers=[(b"x-should-retry", b"false")],
                    reason="worst_case_over_budget",
                )
                return
            if left > 0:
                message = (
                    f"this tenant's budget for the period has {_usd(left)} left, all of it held by "
                    "requests in flight; retry when they finish"
                )
            else:
                message = "this tenant's budget for the period is spent (hard cap reached)"
            await send_error(
                send,
                429,
                message,
                "insufficient_quota",
                "budget_exceeded",
                headers=[(b"x-should-retry", b"false")],
                reason="budget_exceeded",
            )
            return
        retry_s = max(1, -(-adm.retry_ms // 1000))
        which = "requests" if reason.endswith("requests") else "tokens"
        scope_ = "API key" if reason.startswith("key") else "tenant"
        await send_error(
            send,
            429,
            f"rate limit reached for {which} per minute on this {scope_} (limit {adm.limit_or_reset_ms}); "
            f"retry after {retry_s}s",
            "rate_limit_error",
            "rate_limit_exceeded",
            headers=[
                (b"retry-after", str(retry_s).encode()),
                (b"retry-after-ms", str(adm.retry_ms).encode()),
                (f"x-ratelimit-limit-{which}".encode(), str(adm.limit_or_reset_ms).encode()),
                (f"x-ratelimit-remaining-{which}".encode(), b"0"),
                (f"x-ratelimit-reset-{which}".encode(), f"{adm.retry_ms / 1000:.3f}s".encode()),
            ],
            reason=reason,
        )


def _usd(nanos: int) -> str:
    """Nano-dollars as dollars, with enough places that a small amount does not read as $0."""
    return f"${nanos / 1e9:.9f}".rstrip("0").rstrip(".") if nanos else "$0"


class _Request:
    """One admitted request: forwarding, metering and settling."""

    __slots__ = (
        "gw",
        "kind",
        "model",
        "key",
        "tenant",
        "stream",
        "wants_usage",
        "prompt_est",
        "tokens_est",
        "hold",
        "cap",
        "in_p",
        "out_p",
        "price_id",
        "pkey",
        "seed",
        "ttl",
        "limited",
        "t0",
        "started_at",
        "event_id",
        "target",
        "ttft",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "usage_estimated",
        "status",
        "error_type",
        "http_status",
        "settled",
        "recorded",
        "committed",
        "fw",
    )

    def __init__(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self, k, v)
        self.committed = False
        self.fw: _SseForward | None = None
        self.target: Target | None = None
        self.ttft = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.usage_estimated = False
        self.status = "ok"
        self.error_type = ""
        self.http_status = 200
        self.settled = False

    async def run(self, send, receive, body: dict, candidates: list[Target], sticky, rl_headers) -> None:
        """Forward, then make sure the request settled: the one place that guarantees it.

        Every path of ``forward`` commits (usage event + settle) before its final bytes. Whatever
        escapes it (a bug, an error serialising, a cancelled task) is settled here: billed for what
        the client was seen to receive, the rest of the hold released."""
        ledger = self.gw.ledger
        eid = self.event_id.hex
        if ledger is not None:
            ledger.active[eid] = self
        m.IN_FLIGHT.inc()
        try:
            await self.forward(send, receive, body, candidates, sticky, rl_headers)
        except Exception as exc:
            # Most likely an answer the gateway could not read; the request is settled all the same.
            log.exception("request %s failed after admission", eid)
            if not self.committed:
                self.status, self.error_type, self.http_status = "error", "gateway_error", 502
                await self._commit_delivered()
                with contextlib.suppress(Exception):  # fails when the response had already started
                    await send_json(
                        send,
                        502,
                        error_body(
                            f"the gateway could not complete this request ({type(exc).__name__}); "
                            "only what was delivered is billed",
                            "upstream_error",
                            "gateway_error",
                        ),
                        self._headers(rl_headers),
                    )
        finally:
            m.IN_FLIGHT.dec()
            if not self.committed:
                # Cancelled (server shutdown, a client gone at the wrong moment): settle all the same.
                if self.status == "ok":
                    self.status, self.error_type, self.http_status = "error", "cancelled", 499
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._commit_delivered())
            if ledger is not None:
                ledger.active.pop(eid, None)

    def delivered_tokens(self) -> int | None:
        """Completion tokens the client was sent so far (None before any output went out)."""
        fw = self.fw
        if fw is None or fw.events == 0:
            return None
        # vLLM sends one role chunk, then one chunk per token.
        return max(0, fw.events - 1)

    def progress(self) -> dict | None:
        """What the journal records for a reaper: delivered tokens and the deployment they came from."""
        n = self.delivered_tokens()
        if n is None:
            return None
        tg = self.target
        return {"n": n, "d": tg.deployment_id, "s": tg.slug, "v": tg.version_id}

    async def _commit_delivered(self) -> None:
        """Commit with the tokens seen delivered (the engine's usage never arrived)."""
        n = self.delivered_tokens()
        if n is None:
            self.prompt_tokens = self.completion_tokens = 0
        else:
            self.usage_estimated = True
            self.prompt_tokens = self.prompt_est
            self.completion_tokens = n
        await self._commit()

    def _headers(self, rl_headers: list) -> list:
        h = [(b"x-request-id", self.event_id.hex.encode()), *rl_headers]
        if self.target is not None:
            h.append((b"x-governor-deployment", self.target.slug.encode()))
        return h

    async def forward(self, send, receive, body: dict, candidates: list[Target], sticky, rl_headers) -> None:
        gw = self.gw
        tried: set[int] = set()
        resp = None
        last_exc: Exception | None = None
        # Retry once on another deployment when the connection fails before any answer.
        for _attempt in range(2):
            target = gw.router.pick(candidates, sticky, tried)
            if target is None:
                break
            tried.add(target.deployment_id)
            self.target = target
            body["model"] = target.engine_model
            url = upstream_url(target, self.kind)
            try:
                resp = await gw.http.post(url, orjson.dumps(body))
                break
            except CONNECT_ERRORS as exc:
                gw.router.mark_failed(target)
                m.child(m.ERRORS, "upstream_connect").inc()
                last_exc = exc
                resp = None
        if resp is None:
            # Nothing answered a connection (each failure ejected its target): the service is
            # unavailable for now rather than broken, so 503 with when to retry, not 502.
            retry_s = gw.router.retry_after_s(candidates)
            self.status, self.error_type, self.http_status = "error", "upstream_unavailable", 503
            await self._finish_without_output()
            await send_json(
                send,
                503,
                error_body(
                    f"no deployment of '{self.model}' could be reached"
                    f"{f' ({type(last_exc).__name__})' if last_exc else ''}; retry after {retry_s}s",
                    "service_unavailable",
                    "upstream_unavailable",
                ),
                [*self._headers(rl_headers), (b"retry-after", str(retry_s).encode())],
            )
            m.child(m.REQUESTS, self.model, "503").inc()
            return
        try:
            if resp.status != 200:
                await self._upstream_error(resp, send, rl_headers)
            elif self.stream:
                await self._stream(resp, send, receive, rl_headers)
            else:
                await self._unary(resp, send, rl_headers)
        finally:
            resp.release()

    def _cost(self) -> int:
        return self.prompt_tokens * self.in_p + self.completion_tokens * self.out_p

    async def _settle(self) -> None:
        """Release the hold and book the real cost/tokens in Redis."""
        if self.settled:
            return
        self.settled = True
        t = self.tenant
        b = t.budget
        if not (self.recorded or self.limited or b is not None):
            return
        before, after = await self.gw.limiter.settle(
            key_id=self.key.id,
            tenant_id=t.id,
            token_delta=(self.prompt_tokens + self.completion_tokens) - self.tokens_est,
            key_tpm_active=bool(self.key.tpm),
            tenant_tpm_active=bool(t.tpm),
            budget_active=b is not None,
            hold_nanos=self.hold,
            cost_nanos=self._cost(),
            seed_spent_nanos=self.seed,
            period_key=self.pkey or "none",
            budget_ttl_s=self.ttl or 60,
            event_id=self.event_id.hex if self.recorded else "",
        )
        if before < 0:
            log.warning(
                "request %s was settled by the reaper (this worker's lease had lapsed)", self.event_id
            )
            return
        if b is not None and b.amount_nanos:
            for pct in b.soft_percents:
                thr = b.amount_nanos * pct // 100
                if before < thr <= after:
                    alert = {
                        "tenant_id": t.id,
                        "period_key": self.pkey,
                        "percent": pct,
                        "spent_nanos": after,
                        "at": time.time(),
                    }
                    await self.gw.redis.rpush(self.gw.config.key_prefix + ALERTS_LIST, orjson.dumps(alert))

    def _event(self, finished_at: float, e2e: float) -> dict:
        tg = self.target
        tpot = None  # undefined for a non-streamed answer: it arrives whole, with no gap between tokens
        if self.stream and self.ttft is not None and self.completion_tokens > 1:
            tpot = (e2e - self.ttft) / (self.completion_tokens - 1) * 1000
        return {
            "schema_version": SPOOL_SCHEMA_VERSION,
            "event_id": str(self.event_id),
            "tenant_id": self.tenant.id,
            "api_key_id": self.key.id,
            "public_model": self.model,
            "deployment_id": tg.deployment_id if tg else None,
            "deployment_slug": tg.slug if tg else "",
            "version_id": tg.version_id if tg else None,
            "price_id": self.price_id,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_nanos": self._cost(),
            "ttft_ms": None if self.ttft is None else self.ttft * 1000,
            "tpot_ms": tpot,
            "e2e_ms": e2e * 1000,
            "status": self.status,
            "error_type": self.error_type,
            "http_status": self.http_status,
            "stream": self.stream,
            "usage_estimated": self.usage_estimated,
            "started_at": self.started_at,
            "finished_at": finished_at,
            "gateway": self.gw._name,
        }

    async def _commit(self) -> None:
        """Make the usage event durable and settle the hold, together, before the final bytes go out."""
        if self.committed:
            return
        self.committed = True
        e2e = time.perf_counter() - self.t0
        fut = self.gw.spool.append(self._event(time.time(), e2e))
        try:
            await self._settle()
        except Exception as exc:  # noqa: BLE001 - the event is what bills; Redis drift heals from Postgres
            log.warning("settle failed: %s", exc)
        await fut
        tg = self.target
        if tg is not None and self.status == "ok":
            dep = tg.slug
            if self.ttft is not None:
                m.child(m.TTFT, self.model, dep).observe(self.ttft)
                if self.completion_tokens > 1:
                    m.child(m.TPOT, self.model, dep).observe((e2e - self.ttft) / (self.completion_tokens - 1))
            m.child(m.E2E, self.model, dep).observe(e2e)
        m.child(m.TOKENS, self.model, "prompt").inc(self.prompt_tokens)
        m.child(m.TOKENS, self.model, "completion").inc(self.completion_tokens)

    async def _finish_without_output(self) -> None:
        """Nothing was generated: book a zero-cost event and release the hold."""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        if self.error_type:
            m.child(m.ERRORS, self.error_type).inc()
        await self._commit()

    async def _upstream_error(self, resp, send, rl_headers) -> None:
        try:
            data = await resp.read_all()
        except READ_ERRORS:
            data = b""
        if resp.status in EJECTING_STATUSES:
            self.gw.router.mark_failed(self.target)
        self.status, self.error_type, self.http_status = "error", f"upstream_{resp.status}", resp.status
        await self._finish_without_output()
        try:
            parsed = orjson.loads(data)
            ok_shape = isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)
        except orjson.JSONDecodeError:
            ok_shape = False
        if not ok_shape:
            data = error_body(
                data[:500].decode("utf-8", "replace") or f"upstream answered {resp.status}",
                "upstream_error",
                f"upstream_{resp.status}",
            )
        await send_json(send, resp.status, data, self._headers(rl_headers))
        m.child(m.REQUESTS, self.model, str(resp.status)).inc()

    def _rewrite(self, data: bytes) -> bytes:
        eng = self.target.engine_model
        if eng == self.model:
            return data
        a = f'"model":"{eng}"'.encode()
        b = f'"model": "{eng}"'.encode()
        pub = orjson.dumps(self.model)
        return data.replace(a, b'"model":' + pub).replace(b, b'"model": ' + pub)

    def _take_usage(self, usage: dict | None) -> None:
        if isinstance(usage, dict) and "input_tokens" in usage:
            usage = responses_usage(usage)
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        else:
            self.usage_estimated = True
            self.prompt_tokens = self.prompt_est

    async def _unary(self, resp, send, rl_headers) -> None:
        try:
            data = await resp.read_all()
        except READ_ERRORS as exc:
            self.gw.router.mark_failed(self.target)
            self.status, self.error_type, self.http_status = "error", "upstream_broken", 502
            await self._finish_without_output()
            await send_json(
                send,
                502,
                error_body(
                    f"the deployment failed mid-response ({type(exc).__name__})",
                    "upstream_error",
                    "upstream_broken",
                ),
                self._headers(rl_headers),
            )
            m.child(m.REQUESTS, self.model, "502").inc()
            return
        self.gw.router.mark_ok(self.target)
        self.ttft = time.perf_counter() - self.t0
        try:
            parsed = orjson.loads(data)
            usage = parsed.get("usage") if isinstance(parsed, dict) else None
        except orjson.JSONDecodeError:
            usage = None
        self._take_usage(usage)
        if usage is None:
            self.completion_tokens = self.tokens_est - self.prompt_est  # worst case when unknown
        await self._commit()
        data = self._rewrite(data)
        await send_json(send, 200, data, self._headers(rl_headers))
        m.child(m.REQUESTS, self.model, "200").inc()

    async def _stream(self, resp, send, receive, rl_headers) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + self._headers(rl_headers)}
        )
        loop = asyncio.get_running_loop()
        fw = self.fw = _SseForward(self, resp, send, loop)
        # receive() returns http.disconnect when the client goes away.
        disc = asyncio.ensure_future(receive())
        disc.add_done_callback(fw.client_gone)
        resp.stream(fw.on_data, fw.on_end)
        try:
            await fw.finished
        except asyncio.CancelledError:
            resp.stop_stream()
            disc.cancel()
            raise
        resp.stop_stream()
        usage, usage_chunk, done, events = fw.usage, fw.usage_chunk, fw.done, fw.events
        broken = fw.broken
        rewrite = fw.rewrite
        if disc.done() and not done:
            # Client went away: stop the engine, bill what was produced, release the rest of the hold.
            resp.close()
            self.status, self.error_type, self.http_status = "client_disconnected", "client_disconnected", 499
            self._take_usage(usage)
            if usage is None:
                self.completion_tokens = max(0, events - 1)
            await self._commit()
            m.child(m.ERRORS, "client_disconnected").inc()
            m.child(m.REQUESTS, self.model, "499").inc()
            return
        disc.cancel()
        # Everything forwarded so far has gone out before the final bytes (a slow client may hold
        # some in flow control).
        await fw.pusher.drain()
        if not done and broken is None and usage is None:
            broken = "stream ended without [DONE]"
        self._take_usage(usage)
        if usage is None:
            # vLLM sends one role chunk then one chunk per token; count what the client received.
            self.completion_tokens = max(0, events - 1)
        if broken is not None and not done:
            resp.close()
            self.gw.router.mark_failed(self.target)
            self.status, self.error_type, self.http_status = "error", "upstream_stream_broken", 200
            m.child(m.ERRORS, "upstream_stream_broken").inc()
            await self._commit()
            err = {
                "error": {
                    "message": f"the deployment's stream broke ({broken})",
                    "type": "upstream_error",
                    "param": None,
                    "code": "stream_broken",
                }
            }
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + orjson.dumps(err) + b"\n\n" + DONE,
                    "more_body": False,
                }
            )
            m.child(m.REQUESTS, self.model, "stream_error").inc()
            return
        self.gw.router.mark_ok(self.target)
        await self._commit()
        tail = b"" if self.kind == "responses" else DONE  # a Responses stream ends on its final event
        if self.wants_usage and usage_chunk is not None:
            tail = (self._rewrite(usage_chunk) if rewrite else usage_chunk) + DONE
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        m.child(m.REQUESTS, self.model, "200").inc()


class _SseForward:
    """Forwards one stream's SSE bytes from the deployment to the client, inside the upstream
    connection's callbacks: no task switch, no timer and no JSON per chunk.

    Whole events go out as they arrive, undecoded. Only a block that contains ``[DONE]`` or a usage
    object is split and parsed: the usage-only chunk and ``[DONE]`` are held back for the request's
    task, which sends them after the usage event is durable. ``finished`` resolves when ``[DONE]``
    arrived, the body ended or broke, or the client went away.
    """

    __slots__ = (
        "req", "resp", "pusher", "finished", "buf", "usage", "usage_chunk", "done", "events", "broken",
        "rewrite", "gone",
    )  # fmt: skip

    def __init__(self, req: _Request, resp, send, loop: asyncio.AbstractEventLoop) -> None:
        self.req = req
        self.resp = resp
        # A slow client pauses the send (uvicorn's flow control): stop reading from the deployment
        # until it drained, so nothing piles up in the gateway.
        self.pusher = BodyPusher(send, loop, on_idle=resp.resume)
        self.finished: asyncio.Future = loop.create_future()
        self.buf = b""
        self.usage: dict | None = None
        self.usage_chunk: bytes | None = None
        self.done = False
        self.events = 0
        self.broken: str | None = None
        self.rewrite = req.target.engine_model != req.model
        self.gone = False

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    def client_gone(self, _fut) -> None:
        self.gone = True
        self._finish()

    def on_end(self, exc: BaseException | None) -> None:
        if exc is not None and self.broken is None:
            self.broken = type(exc).__name__
        self._finish()

    def on_data(self, block: bytes) -> None:
        if self.gone or self.done:
            return
        if self.buf:
            block = self.buf + block
            self.buf = b""
        cut = block.rfind(b"\n\n")
        if cut < 0:
            self.buf = block
            return
        cut += 2
        if cut != len(block):
            self.buf = block[cut:]
            block = block[:cut]
        req = self.req
        if req.ttft is None:
            req.ttft = time.perf_counter() - req.t0
        if b"[DONE]" in block or b'"usage":{' in block or b'"usage": {' in block:
            block = self._split(block)
            if not block:
                if self.done:
                    self._finish()
                return
        else:
            self.events += block.count(b"data:")
        pusher = self.pusher
        pusher.push_body(req._rewrite(block) if self.rewrite else block)
        if self.done:
            self._finish()
        elif pusher.busy:
            self.resp.pause()

    def _split(self, block: bytes) -> bytes:
        """Takes out ``[DONE]`` and the usage-only chunk (kept for later); returns what to forward."""
        keep = []
        for ev in block.split(b"\n\n"):
            if not ev:
                continue
            payload = ev[5:].strip() if ev.startswith(b"data:") else b""
            if payload == b"[DONE]":
                self.done = True
                continue
            if not payload and ev.startswith(b"event:"):  # Responses API: "event: <type>\ndata: {...}"
                at = ev.find(b"\ndata:")
                payload = ev[at + 6 :].strip() if at >= 0 else b""
            if payload and (b'"usage":{' in payload or b'"usage": {' in payload):
                try:
                    obj = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict) and str(obj.get("type") or "").encode() in FINAL_EVENTS:
                    obj = obj.get("response") or {}
                    self.done = True  # a Responses stream has no [DONE]: its final event ends it
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if not obj.get("choices"):
                        # The usage-only chunk: held back until the event is durable.
                        self.usage_chunk = ev + b"\n\n"
                        continue
            self.events += 1
            keep.append(ev + b"\n\n")
        return b"".join(keep)


app = Gateway()
