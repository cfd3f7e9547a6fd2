"""The gateway: a raw ASGI app in front of the deployments (no framework in the hot path).

This module holds the process: its lifecycle (Redis, snapshot, spool, shipper, ledger, upstream
pool, hooks), the dispatch of paths, and the endpoints that answer from the snapshot alone
(``/v1/models``, ``/healthz``, ``/metrics``); ``/v1/files`` and ``/v1/batches`` go on to the console
(``gateway.batchapi``). The completion endpoints go through
``gateway.pipeline``: authenticate, parse, route, admit, forward, settle, with hooks between them
(docs/decisions/0025).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

import orjson
import redis.asyncio as aioredis

from asgistream import BodyPusher, TaskPusher
from gateway import metrics as m
from gateway.admission import DEFAULT_SHARES, DEFAULT_WAIT_S, AdmissionController, parse_per_class
from gateway.batchapi import ConsoleClient, is_batch_api, proxy
from gateway.config import CHOICES, GatewayConfig, load_config
from gateway.engine_signals import EngineSignals
from gateway.hooks import Hooks, load_hooks
from gateway.ledger import Ledger
from gateway.limits import Limiter
from gateway.pipeline import Pipeline
from gateway.redisfast import FastRedis, RedisPyScripts, redis_client
from gateway.replies import new_request_id, send_error, send_json, send_reply
from gateway.router import Router
from gateway.spool import Shipper, SpoolWriter
from gateway.stages.admit import Periods
from gateway.stages.authenticate import auth_refusal, identify, may_use
from gateway.upstream import AiohttpUpstream, UpstreamPool, upstream_client
from snapshot.contract import SnapshotHolder

log = logging.getLogger("gateway")


class Gateway:
    """Process-wide state and the ASGI entry point."""

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config
        self.session_header = config.session_header.encode() if config else b"x-session-id"
        self.redis = None
        self.limiter: Limiter | None = None
        self.fast_redis: FastRedis | RedisPyScripts | None = None
        self.snapshots: SnapshotHolder | None = None
        self.router: Router | None = None
        self.spool: SpoolWriter | None = None
        self.shipper: Shipper | None = None
        self.http: UpstreamPool | AiohttpUpstream | None = None
        self.pusher = BodyPusher
        self._tasks: list[asyncio.Task] = []
        self.periods = Periods()
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.ledger: Ledger | None = None
        self.pipeline = Pipeline()
        self.admission: AdmissionController | None = None
        self.console: ConsoleClient | None = None
        self.signals: EngineSignals | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def startup(self) -> None:
        cfg = self.config = self.config or load_config()
        self.session_header = cfg.session_header.encode()
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        # A blocking pool: under a burst, requests queue for a connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            cfg.redis_url, max_connections=256, timeout=5, socket_connect_timeout=3, socket_timeout=5
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self.fast_redis = redis_client(cfg.redis_client, cfg.redis_url)
        # Unique across restarts (a pid is reused): the reaper must never take a new worker for a dead one.
        worker_id = f"{self.name}:{uuid.uuid4().hex[:8]}"
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
        self.http = upstream_client(
            cfg.upstream_client,
            connect_timeout=cfg.upstream_connect_timeout_s,
            idle_timeout=cfg.upstream_idle_timeout_s,
        )
        self.pusher = TaskPusher if cfg.stream_pusher == "task" else BodyPusher
        for name, value in self.pieces().items():
            if value != CHOICES[name][0]:
                log.warning("%s=%s: running with the library instead of %s", name, value, CHOICES[name][0])
        if cfg.admission and cfg.engine_signals:
            self.signals = EngineSignals(
                self.redis,
                cfg.key_prefix,
                worker_id,
                interval_s=cfg.engine_scrape_s,
                queue_threshold=cfg.saturation_queue,
                kv_threshold=cfg.saturation_kv,
            )
        if cfg.admission:
            self.admission = AdmissionController(
                signals=self.signals,
                workers=cfg.workers,
                shares=parse_per_class(cfg.admission_shares, DEFAULT_SHARES, what="GATEWAY_ADMISSION_SHARES"),
                wait_s=parse_per_class(cfg.admission_wait_s, DEFAULT_WAIT_S, what="GATEWAY_ADMISSION_WAIT_S"),
            )
        # Last: a hook's factory may use any of the above.
        self.pipeline = Pipeline(Hooks(load_hooks(cfg.hooks, self)))
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.snapshots.run_poll()),
            loop.create_task(self.snapshots.run_subscribe()),
            loop.create_task(self.ledger.run()),
        ]
        if self.signals is not None:
            self._tasks.append(loop.create_task(self.signals.run(self._targets, self._relieve)))

    def _relieve(self, deployment_id: int) -> None:
        if self.admission is not None:
            self.admission.relieve(deployment_id)

    def _targets(self):
        """Every target of the snapshot in force (what the engine signals scrape)."""
        snap = self.snapshots.current if self.snapshots else None
        if snap is None:
            return ()
        return (t for route in snap.routes.values() for t in route.targets)

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
        if self.signals:
            await self.signals.close()
        if self.http:
            await self.http.close()
        if self.console:
            await self.console.close()
        if self.redis:
            await self.redis.aclose()
        if self.fast_redis:
            await self.fast_redis.aclose()

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
                await self.pipeline(
                    self, scope, receive, send, "chat" if path == "/v1/chat/completions" else "text"
                )
            elif path == "/v1/embeddings" or path == "/v1/responses":
                if scope["method"] != "POST":
                    await send_error(send, 405, "use POST", "invalid_request_error", "method_not_allowed")
                    return
                await self.pipeline(self, scope, receive, send, path[4:])
            elif is_batch_api(path):
                await proxy(self, scope, receive, send)
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
                            "pieces": self.pieces(),
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

    def pieces(self) -> dict[str, str]:
        """Which hand-tuned pieces run, or which libraries instead (``/healthz`` says; ADR 0029)."""
        cfg = self.config
        if cfg is None:
            return {}
        return {
            "GATEWAY_REDIS_CLIENT": cfg.redis_client,
            "GATEWAY_UPSTREAM_CLIENT": cfg.upstream_client,
            "GATEWAY_STREAM_PUSHER": cfg.stream_pusher,
        }

    # --- what the snapshot alone answers -------------------------------------------------------

    def _head_too_large(self, scope) -> bool:
        limit = self.config.max_header_bytes if self.config else 32 * 1024
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        for k, v in scope["headers"]:
            size += len(k) + len(v) + 4
        return size > limit

    async def models(self, scope, send) -> None:
        key, tenant, err, _ = identify(self.snapshots.current, scope["headers"], self.session_header)
        if err:
            await send_reply(send, auth_refusal(err))
            return
        snap = self.snapshots.current
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "governor"}
            for name, r in sorted(snap.routes.items())
            if r.targets and may_use(key, tenant, r)
        ]
        await send_json(send, 200, orjson.dumps({"object": "list", "data": data}))

    async def model_retrieve(self, scope, send, model: str) -> None:
        """``GET /v1/models/{id}`` (the SDK's ``models.retrieve``): listed exactly when ``/v1/models``
        lists it; a forbidden and an unknown name get the same 404."""
        key, tenant, err, _ = identify(self.snapshots.current, scope["headers"], self.session_header)
        if err:
            await send_reply(send, auth_refusal(err))
            return
        r = self.snapshots.current.routes.get(model)
        if r is None or not r.targets or not may_use(key, tenant, r):
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


app = Gateway()
