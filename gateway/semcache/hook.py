"""The semantic cache as a gateway hook (``gateway/hooks.py``): ``GATEWAY_HOOKS`` names
``gateway.semcache.hook:SemanticCache``; a route uses it only when an admin turned it on (the
route's ``cache`` in the snapshot).

``before_route`` checks the request's ``governor_cache`` field (skip, knowledge base and prompt
versions) and takes it out of the body. ``before_forward`` runs after admission, when the model
version that would answer is known (``ctx.target``): it embeds the prompt on the route's embedding
deployment, finds the nearest entry of the request's scope and asks the policy. A hit is answered
there, metered like any admitted answer (``gateway.stages.settle.answer``: usage event, hold
settled) at the model's cache price, as JSON or as the model's stream. Anything else goes to the
model; ``after_response`` then keeps its answer (a new entry) or compares it with the neighbour's
(an observation, and for a verification sample the route's error estimate).

Everything fails open: Redis away, the embedding deployment down or slow, an entry gone: the
request goes to the model as if the cache were off (``fallbacks`` on the route page), never to an
error and never to another scope's entry.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from dataclasses import dataclass

import numpy as np
import orjson

from gateway import batchlines
from gateway import metrics as m
from gateway.endpoints import serves, upstream_url
from gateway.replies import Reply, error_reply
from gateway.semcache import answers, request
from gateway.semcache.store import Store
from gateway.voting import STATE as VOTE

log = logging.getLogger("gateway.semcache")

STATE = "semcache"
EMBED_TIMEOUT_S = 2.0
HIT_HEADER = (b"x-governor-cache", b"hit")


@dataclass(slots=True)
class Pending:
    """What ``before_forward`` left for ``after_response``: the request went to the model."""

    route: str
    scope: str
    vec: np.ndarray
    ttl_s: int
    # "insert" (no neighbour), "explored" (not served), "verified" (a verification sample): the last
    # two are also the route page's counters (``snapshot.contract.CACHE_STATS_FIELDS``).
    action: str
    version: str = ""  # the model version the scope was made for
    key: int = 0
    s: float = 0.0


def _version(target) -> str:
    return f"v{target.version_id}" if target.version_id is not None else f"d{target.deployment_id}"


class SemanticCache:
    name = "semantic-cache"
    fail_open = True  # a cache only saves work: when it fails, the model answers

    def __init__(self, gw) -> None:
        self.gw = gw
        prefix = gw.config.key_prefix if gw.config else "gw:"
        # Unique per process and start: a worker skips only the stream events it wrote itself.
        self.store = Store(gw.redis, prefix, f"{gw.name}:{uuid.uuid4().hex[:8]}")
        self.rng = random.Random()

    # --- before routing: the request's own options ------------------------------------------------

    async def before_route(self, ctx) -> Reply | None:
        body = ctx.body
        if request.OPTIONS_FIELD not in body:
            return None
        raw = body.pop(request.OPTIONS_FIELD)
        why = request.options_refusal(raw)
        if why:
            return error_reply(400, why, "invalid_request_error", "invalid_cache_options", request.OPTIONS_FIELD,
                               reason="bad_request")  # fmt: skip
        ctx.state[request.OPTIONS_FIELD] = raw
        return None

    # --- before forwarding: look up ----------------------------------------------------------------

    async def before_forward(self, ctx) -> Reply | None:
        r = ctx.route
        cfg = r.cache if r is not None else None
        if cfg is None or ctx.kind not in ("chat", "text") or ctx.choices != 1 or ctx.target is None:
            return None
        if batchlines.STATE in ctx.state or VOTE in ctx.state:
            # A batch line's answer is stored for re-sends and billed at the batch price; a vote
            # samples the model on purpose: neither is the cache's to answer.
            return None
        opts = ctx.state.get(request.OPTIONS_FIELD) or {}
        store = self.store
        if store.task is None:
            store.start()
            self.gw._tasks.append(store.task)  # cancelled with the gateway's own tasks at shutdown
        if opts.get("skip"):
            store.count(r.name, "skipped")
            return None
        try:
            system, text = request.prompt_parts(ctx.kind, ctx.body)
        except request.NotCacheable:
            return None
        store.count(r.name, "lookups")
        try:
            embedder, vec = await asyncio.wait_for(
                self._embed(ctx, cfg.embedding_model, text), EMBED_TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - the embedding deployment failed: the model answers
            log.info(
                "semantic cache: no embedding for %s (%s); sent to the model", r.name, type(exc).__name__
            )
            store.count(r.name, "fallbacks")
            m.child(m.ERRORS, "cache_fallback").inc()
            return None
        version = _version(ctx.target)
        scope = request.scope_id(
            tenant_id=ctx.tenant.id,
            key_models=ctx.key.models,
            route=r.name,
            version=version,
            embedder=embedder,
            generation=cfg.generation,
            system=system,
            options=opts,
            body=ctx.body,
            kind=ctx.kind,
            max_tokens=ctx.max_tokens,
        )
        pending = Pending(r.name, scope, vec, cfg.ttl_s, "insert", version)
        found = store.nearest(scope, vec)
        if found is not None:
            entry, s = found
            pending.key, pending.s = entry.key, s
            policy = store.policy(r.name, cfg.target_error)
            if not policy.serve(entry.ll, s):
                pending.action = "explored"
            elif self.rng.random() < cfg.verify_share:
                pending.action = "verified"
            else:
                try:
                    ans = await store.answer(entry.key)
                except Exception:  # noqa: BLE001 - Redis away: the model answers
                    store.count(r.name, "fallbacks")
                    return None
                if ans is not None:
                    store.count(r.name, "hits")
                    return self._hit(ctx, ans)
                pending.action = "insert"  # the entry expired meanwhile
        ctx.state[STATE] = pending
        if ctx.stream and ctx.response_chunks is None:
            ctx.response_chunks = []  # the streamed answer is kept for after_response
        return None

    async def _embed(self, ctx, model: str, text: str) -> tuple[str, np.ndarray]:
        """(the embedding deployment's version, the prompt's vector) from the route ``model``."""
        er = ctx.snapshot.routes.get(model) if ctx.snapshot is not None else None
        if er is None:
            raise LookupError(f"no embedding route {model!r}")
        targets = [
            t for t in er.targets if serves(t, "embeddings") and t.status == "RUNNING" and t.weight > 0
        ]
        if not targets:
            raise LookupError(f"no running embedding deployment for {model!r}")
        t = self.rng.choices(targets, weights=[x.weight for x in targets])[0]
        resp = await self.gw.http.post(
            upstream_url(t, "embeddings"),
            orjson.dumps({"model": t.engine_model, "input": text or " ", "encoding_format": "float"}),
        )
        try:
            data = await resp.read_all()
            if resp.status != 200:
                raise RuntimeError(f"embedding deployment answered {resp.status}")
        finally:
            resp.release()
        vec = np.asarray(orjson.loads(data)["data"][0]["embedding"], dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        if vec.ndim != 1 or not vec.size or norm == 0:
            raise ValueError("an empty embedding")
        version = f"v{t.version_id}" if t.version_id is not None else f"d{t.deployment_id}"
        return f"{model}:{version}:{vec.size}", vec / norm

    def _hit(self, ctx, ans: answers.Answer) -> Reply:
        """The hit, metered at the cache price: the tokens are the request's prompt and the cached
        completion; what the model would have cost beyond that is the tenant's saving."""
        h = ctx.hold
        ctx.prompt_tokens = ctx.prompt_est
        ctx.usage_estimated = True  # the prompt is the gateway's count: no engine read it
        ctx.completion_tokens = ans.completion_tokens
        full = ctx.prompt_tokens * h.in_p + ctx.completion_tokens * h.out_p
        price = ctx.snapshot.cache_prices.get(ctx.model) if ctx.snapshot is not None else None
        if price is not None:
            h.in_p, h.out_p, h.price_id = price.input_nanos, price.output_nanos, price.price_id
        ctx.cache_hit = True
        ctx.saved_nanos = max(0, full - (ctx.prompt_tokens * h.in_p + ctx.completion_tokens * h.out_p))
        ctx.ttft = 0.0
        ctx.state[STATE] = None
        if ctx.stream:
            body = answers.as_stream(ctx.kind, ctx.model, ans, ctx.prompt_tokens, with_usage=ctx.wants_usage)
            return Reply(200, body, [HIT_HEADER], sse=True)
        return Reply(200, answers.as_json(ctx.kind, ctx.model, ans, ctx.prompt_tokens), [HIT_HEADER])

    # --- after the response: learn -----------------------------------------------------------------

    async def after_response(self, ctx) -> None:
        pending = ctx.state.get(STATE)
        if pending is None or ctx.status != "ok" or ctx.http_status != 200:
            return
        if ctx.target is None or _version(ctx.target) != pending.version:
            return  # retried on a deployment of another version: not this scope's answer
        if ctx.stream:
            ans = answers.from_stream(ctx.kind, ctx.response_chunks, ctx.completion_tokens)
        else:
            ans = answers.from_json(ctx.kind, ctx.response_body, ctx.completion_tokens)
        if ans is None:
            return
        store = self.store
        route = pending.route
        near_miss = False  # the neighbour's answer was compared with the model's and differed
        if pending.action != "insert":
            cached = await store.answer(pending.key)
            if cached is not None:
                right = answers.same(cached.text, ans.text)
                await store.observe(route, pending.key, pending.s, right)
                store.count(route, pending.action)
                if right:
                    return
                store.count(route, pending.action + "_wrong")
                near_miss = True
        key = await store.insert(route, pending.scope, pending.vec, ans, pending.ttl_s)
        if near_miss:
            # The comparison runs both ways: the neighbour's answer was wrong for this prompt at
            # ``s``, so this prompt's answer is wrong for the neighbour's at ``s`` too. The new entry
            # starts out knowing a near-miss that close, instead of being served for it on the
            # route's prior alone (ADR 0042, second amendment).
            await store.observe(route, key, pending.s, False)

    async def close(self) -> None:
        await self.store.close()
