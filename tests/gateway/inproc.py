"""A gateway in the test's own process: the real stages and hooks, the real Redis scripts under a key
prefix of the test's own, the spool in a temporary directory, and a fake engine on an asyncio server
in the same event loop. No subprocess, no uvicorn, no Ray: the ASGI app is called directly.

``InProc.install`` builds the snapshot (one tenant, one key, routes, prices) the way
``snapshot.contract.parse_snapshot`` reads the published one; ``InProc.post`` runs one request and
returns what the client would have received.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import redis.asyncio as aioredis

from gateway.app import Gateway
from gateway.config import GatewayConfig
from gateway.context import RequestContext
from gateway.hooks import Hooks
from gateway.pipeline import Pipeline
from gateway.stages.parse import parse
from gateway.stages.route import route
from snapshot.contract import budget_hash_key, parse_snapshot, period_key
from tests.gateway.conftest import REDIS_URL

SECRET = "gk-inproc-secret"
PROMPT_TOKENS = 10  # what the fake engine reports as the prompt


def config(tmp: Path, prefix: str, **overrides) -> GatewayConfig:
    values = {
        "redis_url": REDIS_URL,
        "database_url": None,
        "key_prefix": prefix,
        "spool_dir": tmp / "spool",
        "max_body_bytes": 64 * 1024,
        "default_max_tokens": 16,
        "absurd_max_tokens": 1_000_000,
        "upstream_connect_timeout_s": 5.0,
        "upstream_idle_timeout_s": 30.0,
        "eject_s": 10.0,
        "snapshot_poll_s": 60.0,
        "spool_commit_interval_s": 0.002,
        "ship_interval_s": 60.0,
        "ship_batch": 100,
        "session_header": "x-session-id",
        "max_header_bytes": 32 * 1024,
        "lease_s": 15.0,
        "journal_s": 0.5,
    }
    return GatewayConfig(**(values | overrides))


def target(dep: int, base_url: str, *, engine_model: str = "eng-m", task: str = "generate", **extra) -> dict:
    return {
        "deployment_id": dep,
        "deployment_slug": f"dep-{dep}",
        "version_id": None,
        "base_url": base_url,
        "engine_model": engine_model,
        "weight": 1.0,
        "pool": "online",
        "status": "RUNNING",
        "task": task,
    } | extra


def snapshot(
    *,
    routes: dict,
    prices: dict | None = None,
    tenant: dict | None = None,
    key: dict | None = None,
    secret: str = SECRET,
):
    """A parsed snapshot with tenant 1 and its one key ``secret``."""
    data = {
        "version": 1,
        "generated_at": 0,
        "keys": {
            hashlib.sha256(secret.encode()).hexdigest(): {
                "id": 7,
                "prefix": "gk-in",
                "tenant_id": 1,
                "models": None,
                "expires_at": None,
                "revoked": False,
                "rpm": 0,
                "tpm": 0,
            }
            | (key or {})
        },
        "tenants": {"1": {"slug": "t1", "rpm": 0, "tpm": 0, "budget": None} | (tenant or {})},
        "routes": routes,
        "prices": prices or {},
    }
    return parse_snapshot(orjson.dumps(data))


def tenant_budget(
    *, cap: int | None, amount: int = 10**12, spent: int = 0, soft: tuple[int, ...] = ()
) -> dict:
    """A tenant's monthly budget as the snapshot carries it (``spent`` is this period's)."""
    return {
        "period": "monthly",
        "amount_nanos": amount,
        "hard_cap_nanos": cap,
        "soft_percents": list(soft),
        "spent_period_key": period_key("monthly", time.time())[0],
        "spent_nanos": spent,
    }


# ------------------------------------------------------------------ the fake engine


class FakeEngine:
    """OpenAI-shaped answers on a real socket: ``tokens`` tokens, ``PROMPT_TOKENS`` prompt tokens.
    ``fail_status`` answers that status instead; every request's path and JSON body is kept. With
    ``hold`` set to an event, each answer waits for it (``active``/``peak``: requests it holds now, and
    at most). ``GET /metrics`` answers ``metrics_text`` (404 while it is None), outside ``requests``
    and ``hold``: that is the gateway's engine-signal scraper, not traffic."""

    def __init__(self, tokens: int = 4) -> None:
        self.tokens = tokens
        self.fail_status: int | None = None
        self.hold: asyncio.Event | None = None
        self.metrics_text: str | None = None
        self.scrapes = 0
        self.active = self.peak = 0
        self.requests: list[tuple[str, dict]] = []
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                if path.endswith("/metrics"):
                    self.scrapes += 1
                    text = self.metrics_text
                    writer.write(
                        _response(404, b"text/plain", b"no metrics")
                        if text is None
                        else _response(200, b"text/plain; version=0.0.4", text.encode())
                    )
                    await writer.drain()
                    continue
                self.requests.append((path, body))
                if self.hold is not None:
                    self.active += 1
                    self.peak = max(self.peak, self.active)
                    try:
                        await self.hold.wait()
                    finally:
                        self.active -= 1
                writer.write(self._answer(body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, req: dict) -> bytes:
        if self.fail_status:
            data = orjson.dumps({"error": {"message": "injected", "type": "server_error"}})
            return _response(self.fail_status, b"application/json", data)
        n = min(self.tokens, int(req.get("max_tokens") or self.tokens))
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n}
        model = req.get("model")
        if not req.get("stream"):
            msg = {"role": "assistant", "content": "x" * n}
            data = orjson.dumps(
                {"id": "c1", "object": "chat.completion", "model": model, "usage": usage,
                 "choices": [{"index": 0, "message": msg, "finish_reason": "length"}]}
            )  # fmt: skip
            return _response(200, b"application/json", data)
        events = [{"id": "c1", "model": model, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        events += [{"id": "c1", "model": model, "choices": [{"index": 0, "delta": {"content": "x"}}]}] * n
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "c1", "model": model, "choices": [], "usage": usage})
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        out = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
        out += [b"%x\r\n%b\r\n" % (len(c), c) for c in chunks]
        out.append(b"0\r\n\r\n")
        return b"".join(out)


def _response(status: int, ctype: bytes, data: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: %b\r\ncontent-length: %d\r\n\r\n%b" % (
        status,
        ctype,
        len(data),
        data,
    )


# ------------------------------------------------------------------ calling the app


@dataclass
class Answer:
    """What the client received."""

    status: int
    headers: dict[str, str]
    body: bytes
    messages: list[dict] = field(default_factory=list)

    def json(self):
        return orjson.loads(self.body)

    def sse_events(self) -> list[bytes]:
        return [e[6:] for e in self.body.split(b"\n\n") if e.startswith(b"data: ")]


async def asgi_post(app, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
    sent: list[dict] = []
    state = {"first": True}
    never = asyncio.Event()

    async def receive():
        if state["first"]:
            state["first"] = False
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()  # the client stays until the answer ends
        return {"type": "http.disconnect"}

    async def send(msg):
        sent.append(msg)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-length", str(len(body)).encode()), *headers],
    }
    await app(scope, receive, send)
    start = next(x for x in sent if x["type"] == "http.response.start")
    return Answer(
        status=start["status"],
        headers={k.decode(): v.decode() for k, v in start["headers"]},
        body=b"".join(x.get("body", b"") for x in sent if x["type"] == "http.response.body"),
        messages=sent,
    )


class InProc:
    """One in-process gateway, its Redis key space and its fake engines."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.prefix = f"gwinproc-{uuid.uuid4().hex[:10]}:"
        self.gw = Gateway(config(tmp, self.prefix))
        self.engine = FakeEngine()
        self.engine_b = FakeEngine()
        self.redis = aioredis.Redis.from_url(REDIS_URL)

    async def start(self) -> None:
        await self.engine.start()
        await self.engine_b.start()
        await self.gw.startup()

    async def stop(self) -> None:
        await self.gw.shutdown()
        await self.engine.stop()
        await self.engine_b.stop()
        keys = [k async for k in self.redis.scan_iter(match=self.prefix + "*", count=1000)]
        if keys:
            await self.redis.delete(*keys)
        await self.redis.aclose()

    def install(
        self, *, model: str = "m", targets: list[dict] | None = None, price=(1000, 2000), **kw
    ) -> None:
        """Serve ``model`` from the fake engine (or ``targets``) at ``price`` (nanos per input and
        output token; None: unpriced)."""
        routes = {model: {"targets": targets or [target(1, self.engine.url)]}}
        prices = (
            {}
            if price is None
            else {model: {"price_id": 3, "input_nanos": price[0], "output_nanos": price[1]}}
        )
        self.gw.snapshots.current = snapshot(routes=routes, prices=prices, **kw)

    def routed(self, body: dict, kind: str = "chat") -> RequestContext:
        """A context that went through authenticate, parse and route: what admission starts from."""
        snap = self.gw.snapshots.current
        ctx = RequestContext(kind)
        ctx.key = next(iter(snap.keys.values()))
        ctx.tenant = snap.tenants[ctx.key.tenant_id]
        ctx.raw = orjson.dumps(body)
        assert parse(self.gw.config, ctx) is None
        assert route(self.gw, ctx) is None
        return ctx

    def hooks(self, *hooks) -> None:
        self.gw.pipeline = Pipeline(Hooks(hooks))

    async def post(
        self,
        body: dict | bytes,
        *,
        path: str = "/v1/chat/completions",
        secret: str | None = SECRET,
        headers=(),
    ) -> Answer:
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        h = list(headers)
        if secret:
            h.append((b"authorization", b"Bearer " + secret.encode()))
        return await asgi_post(self.gw, path, raw, h)

    async def budget(self, tenant_id: int = 1) -> dict[str, int]:
        """The period's ``spent`` and ``held`` in Redis (nano-dollars)."""
        pkey = period_key("monthly", time.time())[0]
        raw = await self.redis.hgetall(budget_hash_key(self.prefix, tenant_id, pkey))
        return {k.decode(): int(v) for k, v in raw.items() if k in (b"spent", b"held")}

    async def ledger(self) -> dict:
        """This worker's in-flight ledger entries."""
        return await self.redis.hgetall(self.gw.limiter.ledger_key(self.gw.limiter.worker_id))

    def events(self) -> list[dict]:
        """Every usage event in the spool (each is durable before its request's last bytes)."""
        out = []
        for seg in sorted((self.tmp / "spool").glob("*.jsonl")):
            out += [orjson.loads(line) for line in seg.read_bytes().splitlines() if line]
        return out


def chat(model: str = "m", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]} | extra
