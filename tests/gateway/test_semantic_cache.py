"""The semantic cache in the request path (gateway.semcache, docs/semantic-cache.md, ADR 0042).

The whole ASGI app runs in this process (tests/gateway/inproc.py) with the real Redis (the cache's
entries, stream and counters under the test's key prefix) and an engine on a socket that answers
chat, completions and ``/v1/embeddings`` (the light encoder the simulated engines serve). Its answer
to a prompt is decided by the prompt's longest word and a ``tag`` the test sets, so that a test can
tell which entry an answer came from."""

from __future__ import annotations

import asyncio
import hashlib
import random

import numpy as np
import orjson
import pytest

from engines import textvec
from gateway.semcache.hook import SemanticCache
from snapshot.contract import CACHE_STATS_FIELDS, cache_stats_key, parse_snapshot
from tests.gateway.inproc import SECRET, FakeEngine, _response, target

SECRET_B = "gk-inproc-other-tenant"
CACHE_PRICE = (100, 200)  # nanos per input and output token; the online price is (1000, 2000)


class AnsweringEngine(FakeEngine):
    """Chat and completions answer ``"<tag> about <longest word>"`` (the last of them); embeddings use the light encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.tag = "A"
        self.embeddings = 0

    def _answer(self, req: dict) -> bytes:
        if "input" in req:
            self.embeddings += 1
            data = [{"object": "embedding", "index": 0, "embedding": textvec.encode(req["input"]).tolist()}]
            return _response(
                200,
                b"application/json",
                orjson.dumps({"object": "list", "data": data, "model": req["model"]}),
            )
        if "prompt" in req:
            text = req["prompt"]
        else:
            text = " ".join(m["content"] for m in req["messages"] if m["role"] != "system")
        word = max(reversed(text.replace("?", " ").split()), key=len)  # the last of the longest
        content = f"{self.tag} about {word}"
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        model = req.get("model")
        chat = "messages" in req
        if not req.get("stream"):
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                if chat
                else {"index": 0, "text": content, "finish_reason": "stop"}
            )
            obj = "chat.completion" if chat else "text_completion"
            body = {"id": "c1", "object": obj, "model": model, "usage": usage, "choices": [choice]}
            return _response(200, b"application/json", orjson.dumps(body))
        events = []
        for i, piece in enumerate(content.split(" ")):
            piece = piece if i == 0 else " " + piece
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            events.append({"id": "c1", "object": "chat.completion.chunk", "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})  # fmt: skip
        events.append({"id": "c1", "object": "chat.completion.chunk", "model": model,
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})  # fmt: skip
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "c1", "model": model, "choices": [], "usage": usage})
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        out = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
        out += [b"%x\r\n%b\r\n" % (len(c), c) for c in chunks]
        out.append(b"0\r\n\r\n")
        return b"".join(out)


def cached_snapshot(url: str, *, version_id: int = 11, generation: int = 0, target_error: float = 0.1,
                    verify_share: float = 0.05, cache: bool = True, embed_url: str | None = None):  # fmt: skip
    """Route "m" (cached unless ``cache`` is false) and its embedding route "emb", two tenants."""
    key = {"prefix": "gk-in", "models": None, "expires_at": None, "revoked": False, "rpm": 0, "tpm": 0}
    spec = {"ttl_s": 600, "target_error": target_error, "verify_share": verify_share,
            "embedding_model": "emb", "generation": generation}  # fmt: skip
    data = {
        "version": 1,
        "generated_at": 0,
        "keys": {
            hashlib.sha256(SECRET.encode()).hexdigest(): key | {"id": 7, "tenant_id": 1},
            hashlib.sha256(SECRET_B.encode()).hexdigest(): key | {"id": 8, "tenant_id": 2},
        },
        "tenants": {str(t): {"slug": f"t{t}", "rpm": 0, "tpm": 0, "budget": None} for t in (1, 2)},
        "routes": {
            "m": {"targets": [target(1, url, version_id=version_id)], "cache": spec if cache else None},
            "emb": {"targets": [target(2, embed_url or url, task="embed", version_id=5)]},
        },
        "prices": {"m": {"price_id": 3, "input_nanos": 1000, "output_nanos": 2000}},
        "cache_prices": {"m": {"price_id": 4, "input_nanos": CACHE_PRICE[0], "output_nanos": CACHE_PRICE[1]}},
    }
    return parse_snapshot(orjson.dumps(data))


@pytest.fixture
async def cached(inproc):
    eng = AnsweringEngine()
    await eng.start()
    inproc.engine_answering = eng
    inproc.gw.snapshots.current = cached_snapshot(eng.url)
    cache = SemanticCache(inproc.gw)
    inproc.cache = cache
    inproc.hooks(cache)
    try:
        yield inproc
    finally:
        await cache.close()
        await eng.stop()


def ask(text: str, **extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 8} | extra


def chats(eng: AnsweringEngine) -> int:
    return sum(1 for path, _ in eng.requests if path.endswith("/chat/completions"))


async def until_hit(g, body: dict, *, secret: str = SECRET, tries: int = 120):
    """Send ``body`` until the cache answers it (the policy serves an entry once it learned enough);
    every answer on the way is returned too."""
    seen = []
    for _ in range(tries):
        a = await g.post(body, secret=secret)
        assert a.status == 200, a.body
        seen.append(a)
        if a.headers.get("x-governor-cache") == "hit":
            return a, seen
    raise AssertionError(f"no cache hit in {tries} requests")


def content(a) -> str:
    if a.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for e in a.sse_events():
            if e != b"[DONE]":
                for c in orjson.loads(e)["choices"]:
                    out.append(c["delta"].get("content") or "")
        return "".join(out)
    return a.json()["choices"][0]["message"]["content"]


# ------------------------------------------------------------------ hits: answered, metered, streamed


async def test_a_repeated_question_is_answered_from_the_cache_at_the_cache_price(cached):
    g, eng = cached, cached.engine_answering
    first = await g.post(ask("What is the capital of Austria?"))
    assert first.status == 200 and "x-governor-cache" not in first.headers
    hit, seen = await until_hit(g, ask("What is the capital of Austria?"))
    assert content(hit) == content(first) == "A about Austria"
    # The engine answered every request but the hit.
    assert chats(eng) == len(seen)  # the first + every miss before the hit
    body = hit.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-cache-")
    ev = next(e for e in g.events() if e["event_id"].replace("-", "") == hit.headers["x-request-id"])
    assert ev["cache_hit"] is True and ev["status"] == "ok" and ev["deployment_id"] is None
    assert ev["price_id"] == 4
    p, c = ev["prompt_tokens"], ev["completion_tokens"]
    assert c == 3 and body["usage"] == {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    assert ev["cost_nanos"] == p * CACHE_PRICE[0] + c * CACHE_PRICE[1]
    assert ev["saved_nanos"] == p * 1000 + c * 2000 - ev["cost_nanos"]
    misses = [e for e in g.events() if not e["cache_hit"]]
    assert misses and all(e["saved_nanos"] == 0 and e["price_id"] == 3 for e in misses)
    # The counters land in the fields the route page reads (nothing else): one lookup per request,
    # the hit, and each miss after the first as an exploration the model's same answer confirmed.
    await g.cache.store.flush()
    stats = {k.decode(): int(v) for k, v in (await g.redis.hgetall(cache_stats_key(g.prefix, "m"))).items()}
    assert set(stats) <= set(CACHE_STATS_FIELDS), set(stats) - set(CACHE_STATS_FIELDS)
    assert stats["lookups"] == len(seen) + 1 and stats["hits"] == 1 and stats["inserted"] == 1
    assert stats.get("explored", 0) + stats.get("verified", 0) == len(seen) - 1
    assert stats.get("explored_wrong", 0) == stats.get("verified_wrong", 0) == 0


async def test_a_streamed_hit_has_the_models_stream_shape_and_its_usage_chunk(cached):
    g = cached
    body = ask("Translate butterfly into French", stream=True, stream_options={"include_usage": True})
    first = await g.post(body)
    hit, _ = await until_hit(g, body)
    assert hit.headers["content-type"].startswith("text/event-stream")
    events = hit.sse_events()
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert content(hit) == content(first) == "A about butterfly"
    # Without include_usage no usage chunk, as from the model.
    plain, _ = await until_hit(g, ask("Translate butterfly into French", stream=True))
    assert all(orjson.loads(e)["choices"] for e in plain.sse_events()[:-1])


async def test_a_text_completion_is_cached_in_its_own_shape(cached):
    g = cached
    body = {"model": "m", "prompt": "Explain photosynthesis briefly", "max_tokens": 8}
    first = await g.post(body, path="/v1/completions")
    assert first.status == 200
    for _ in range(120):
        a = await g.post(body, path="/v1/completions")
        if a.headers.get("x-governor-cache") == "hit":
            break
    else:
        raise AssertionError("no hit")
    j = a.json()
    assert j["object"] == "text_completion" and j["choices"][0]["text"] == first.json()["choices"][0]["text"]


# ------------------------------------------------------------------ scoping and invalidation


async def test_another_tenant_never_gets_an_entry_of_the_first(cached):
    g, eng = cached, cached.engine_answering
    q = ask("How do I reset my password on Android?")
    await until_hit(g, q)  # tenant 1's entry is learned and served
    eng.tag = "B"  # from now on the model's answers say B: an answer saying A can only come from tenant 1
    hit, seen = await until_hit(g, q, secret=SECRET_B)
    assert all(content(a) == "B about password" for a in seen)
    assert seen[0].headers.get("x-governor-cache") is None  # the first of tenant 2 went to the model


@pytest.mark.parametrize(
    "change",
    [
        "version",
        "generation",
        "system_prompt",
        "knowledge_base",
        "prompt_version",
        "temperature",
        "max_tokens",
    ],
)
async def test_a_new_version_prompt_or_knowledge_base_is_not_served_older_entries(cached, change):
    g, eng = cached, cached.engine_answering
    base = {"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "Be brief."},
                                                        {"role": "user", "content": "Who wrote Moby Dick?"}],
            "governor_cache": {"knowledge_base": "books@1", "prompt_version": "p1"}}  # fmt: skip
    await until_hit(g, base)
    eng.tag = "NEW"
    body = orjson.loads(orjson.dumps(base))
    if change == "version":
        g.gw.snapshots.current = cached_snapshot(eng.url, version_id=12)
    elif change == "generation":
        g.gw.snapshots.current = cached_snapshot(eng.url, generation=1)
    elif change == "system_prompt":
        body["messages"][0]["content"] = "Be very brief."
    elif change in ("knowledge_base", "prompt_version"):
        body["governor_cache"][change] = "2"
    elif change == "temperature":
        body["temperature"] = 0.7
    else:
        body["max_tokens"] = 9
    a = await g.post(body)
    assert a.status == 200 and a.headers.get("x-governor-cache") is None
    assert content(a) == "NEW about wrote"
    # What did not change still finds its own entry, never the changed request's. Its answer is the
    # one learned before ("A"), or a later one of its own: the policy sends a share of would-be hits
    # to the model, whose answers are now tagged "LATER".
    if change not in ("version", "generation"):
        eng.tag = "LATER"
        hit, _ = await until_hit(g, base)
        assert content(hit) in ("A about wrote", "LATER about wrote")


async def test_a_request_may_skip_the_cache_and_bad_options_are_refused(cached):
    g, eng = cached, cached.engine_answering
    q = ask("What is 17 times 23?")
    await until_hit(g, q)
    before = chats(eng)
    for _ in range(5):
        a = await g.post(q | {"governor_cache": {"skip": True}})
        assert a.status == 200 and a.headers.get("x-governor-cache") is None
    assert chats(eng) == before + 5
    assert "governor_cache" not in eng.requests[-1][1]  # the gateway's field is never forwarded
    n_events = len(g.events())
    for bad in ("yes", {"skip": "yes"}, {"ttl": 5}, {"knowledge_base": ""}):
        a = await g.post(q | {"governor_cache": bad})
        assert a.status == 400 and a.json()["error"]["code"] == "invalid_cache_options"
        assert "governor_cache" in a.json()["error"]["message"]
    assert len(g.events()) == n_events and chats(eng) == before + 5  # nothing billed, nothing sent


async def test_a_route_without_the_cache_is_never_answered_from_it(cached):
    g, eng = cached, cached.engine_answering
    g.gw.snapshots.current = cached_snapshot(eng.url, cache=False)
    for _ in range(15):
        a = await g.post(ask("What is the capital of Austria?"))
        assert a.status == 200 and a.headers.get("x-governor-cache") is None
    assert chats(eng) == 15 and eng.embeddings == 0


# ------------------------------------------------------------------ failures fall back to the model


async def test_an_embedding_deployment_that_fails_sends_requests_to_the_model(cached):
    g, eng = cached, cached.engine_answering
    down = FakeEngine()
    await down.start()
    down_url = down.url
    await down.stop()  # nothing listens there any more
    g.gw.snapshots.current = cached_snapshot(eng.url, embed_url=down_url)
    for _ in range(4):
        a = await g.post(ask("What is the capital of Austria?"))
        assert a.status == 200 and content(a) == "A about Austria"
    await g.cache.store.flush()
    stats = await g.redis.hgetall(cache_stats_key(g.prefix, "m"))
    assert int(stats[b"fallbacks"]) == 4


async def test_a_redis_outage_of_the_cache_sends_requests_to_the_model(cached):
    import redis.asyncio as aioredis

    g, eng = cached, cached.engine_answering
    q = ask("What is the capital of Austria?")
    await until_hit(g, q)
    g.cache.store.redis = aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
    before = chats(eng)
    for _ in range(6):
        a = await g.post(q)
        assert a.status == 200 and content(a) == "A about Austria"
        assert a.headers.get("x-governor-cache") is None
    assert chats(eng) == before + 6


async def test_an_entry_made_for_a_near_miss_starts_knowing_it(cached):
    """The neighbour's answer was wrong for the new prompt at a similarity s, so the new prompt's answer
    is wrong for the neighbour's at s too: both entries learn it from the one comparison (ADR 0042)."""
    g = cached
    g.gw.snapshots.current = cached_snapshot(g.engine_answering.url, target_error=0.001)
    g.cache.store.policy("m", 0.001).rng = random.Random(3)  # no chance hit: the near-miss goes to the model
    a = await g.post(ask("What is the capital of Austria?"))
    b = await g.post(ask("What is the capital of Australia?"))
    assert b.headers.get("x-governor-cache") is None
    assert (content(a), content(b)) == ("A about Austria", "A about Australia")
    local = g.cache.store.local.by_key
    await asyncio.wait_for(_until(lambda: len(local) == 2 and all(e.n for _, e in local.values())), 10)
    first, second = (local[k][1] for k in sorted(local))
    assert (first.n, first.wrong) == (second.n, second.wrong) == (1, 1)
    np.testing.assert_allclose(first.ll, second.ll)  # one observation, (s, wrong), on both


async def test_an_entry_made_after_its_neighbour_expired_starts_knowing_nothing(cached):
    """Nothing was compared (the neighbour's answer was gone from Redis): no observation is made up."""
    g = cached
    g.gw.snapshots.current = cached_snapshot(g.engine_answering.url, target_error=0.001)
    g.cache.store.policy("m", 0.001).rng = random.Random(3)  # no chance hit
    await g.post(ask("What is the capital of Austria?"))
    local = g.cache.store.local.by_key
    await asyncio.wait_for(_until(lambda: len(local) == 1), 10)
    (first,) = local
    async for k in g.redis.scan_iter(match=g.prefix + "sc:a:*"):
        await g.redis.delete(k)  # expired in Redis, still in this worker's index
    b = await g.post(ask("What is the capital of Australia?"))
    assert content(b) == "A about Australia"
    await asyncio.wait_for(_until(lambda: set(local) - {first}), 10)
    (second,) = set(local) - {first}
    assert (local[second][1].n, local[second][1].wrong) == (0, 0)


async def test_the_workers_share_entries_and_what_they_learned_through_redis(cached):
    """A second gateway worker on the same Redis finds the first one's entry and its observations."""
    g = cached
    q = ask("Which city is the capital of Austria?")
    await until_hit(g, q)
    other = SemanticCache(g.gw)
    other.store.start()
    try:
        first = g.cache.store.local.by_key
        await asyncio.wait_for(_until(lambda: set(other.store.local.by_key) >= set(first)), 10)
        for k, (_, e) in first.items():
            e2 = other.store.local.entry(k)
            await asyncio.wait_for(_until(lambda e=e, e2=e2: e2.n == e.n), 10)
            assert e2.wrong == e.wrong
    finally:
        await other.close()


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.02)


async def test_entries_live_for_the_routes_ttl_and_an_expired_one_is_never_served(cached):
    g, eng = cached, cached.engine_answering
    q = ask("What is the capital of Austria?")
    await until_hit(g, q)
    keys = [k async for k in g.redis.scan_iter(match=g.prefix + "sc:a:*")]
    assert keys
    for k in keys:
        assert 0 < await g.redis.ttl(k) <= 600  # the route's TTL
    await g.redis.delete(*keys)  # what Redis does when the TTL runs out
    eng.tag = "FRESH"
    a = await g.post(q)
    assert a.headers.get("x-governor-cache") is None and content(a) == "FRESH about Austria"
    # The fresh answer is the new entry.
    hit, _ = await until_hit(g, q)
    assert content(hit) == "FRESH about Austria"


@pytest.mark.parametrize("state", ["batch_line", "vote"])
async def test_batch_lines_and_votes_are_never_the_caches_to_answer(cached, state):
    from gateway import batchlines
    from gateway.voting import STATE as VOTE

    g, eng = cached, cached.engine_answering
    ctx = g.routed(ask("What is the capital of Austria?"))
    ctx.target = ctx.candidates[0]
    ctx.state[batchlines.STATE if state == "batch_line" else VOTE] = {}
    assert await g.cache.before_forward(ctx) is None
    assert eng.embeddings == 0 and "semcache" not in ctx.state
