"""The pipeline's hooks: a cache, an admission controller and a router plug in without editing a
stage, and whatever a hook does, an admitted request settles (docs/decisions/0025, 0014).

Each test runs the whole ASGI app in this process (``tests/gateway/inproc.py``): real stages, real
Redis scripts, a fake engine on a socket."""

from __future__ import annotations

import asyncio

import orjson

from gateway.config import load_config
from gateway.hooks import Hooks, load_hooks
from gateway.pipeline import Pipeline
from gateway.replies import Reply, error_reply
from snapshot.contract import Price, Route
from tests.gateway.inproc import chat, target, tenant_budget

CAP = {"budget": tenant_budget(cap=10**9)}


class Cache:
    """A toy answer cache: answers a prompt it has seen before routing, learns after the response."""

    sees_stream_body = True

    def __init__(self, gateway=None) -> None:
        self.answers: dict[str, bytes] = {}
        self.streams: list[bytes] = []

    async def before_route(self, ctx):
        hit = self.answers.get(ctx.body["messages"][-1]["content"])
        return Reply(200, hit, reason="cache_hit") if hit else None

    async def after_response(self, ctx):
        if ctx.status != "ok":
            return
        if ctx.response_body is not None:
            self.answers[ctx.body["messages"][-1]["content"]] = ctx.response_body
        if ctx.response_chunks is not None:
            self.streams.append(b"".join(ctx.response_chunks))


async def test_a_cache_answers_before_routing_and_nothing_is_held_or_forwarded(inproc):
    inproc.install(tenant=CAP)
    cache = Cache()
    inproc.hooks(cache)
    first = await inproc.post(chat())
    spent = (await inproc.budget())["spent"]
    assert first.status == 200 and len(inproc.engine.requests) == 1 and spent > 0
    again = await inproc.post(chat())
    assert again.status == 200 and again.body == first.body and again.headers["x-request-id"]
    assert len(inproc.engine.requests) == 1  # answered by the cache
    assert await inproc.budget() == {"spent": spent, "held": 0} and await inproc.ledger() == {}
    assert len(inproc.events()) == 1  # unmetered, like a refusal


async def test_a_cache_hit_after_admission_is_billed_for_what_the_hook_says_and_settles(inproc):
    inproc.install(tenant=CAP)

    class BilledCache:
        async def before_forward(self, ctx):
            ctx.prompt_tokens, ctx.completion_tokens = 0, 2
            return Reply(200, b'{"cached":true}', reason="cache_hit")

    inproc.hooks(BilledCache())
    answer = await inproc.post(chat())
    assert answer.status == 200 and answer.json() == {"cached": True}
    assert inproc.engine.requests == []
    [event] = inproc.events()
    assert answer.headers["x-request-id"] == event["event_id"].replace("-", "")
    assert (event["status"], event["completion_tokens"], event["cost_nanos"], event["deployment_id"]) == (
        "ok", 2, 4000, None,
    )  # fmt: skip
    assert await inproc.budget() == {"spent": 4000, "held": 0} and await inproc.ledger() == {}


async def test_an_admission_controller_may_refuse_after_the_hold_and_the_hold_is_released(inproc):
    inproc.install(tenant=CAP)

    class Full:
        async def before_forward(self, ctx):
            assert (await inproc.budget())["held"] == ctx.hold.amount > 0  # held while it decides
            return error_reply(
                429, "the queue is full", "rate_limit_error", "queue_full", reason="queue_full"
            )

    inproc.hooks(Full())
    answer = await inproc.post(chat())
    assert answer.status == 429 and answer.json()["error"]["code"] == "queue_full"
    assert inproc.engine.requests == []
    assert await inproc.budget() == {"spent": 0, "held": 0} and await inproc.ledger() == {}
    [event] = inproc.events()
    assert (event["status"], event["error_type"], event["http_status"], event["cost_nanos"]) == (
        "error", "queue_full", 429, 0,
    )  # fmt: skip


async def test_an_admission_controller_may_queue_a_request_which_stays_held_until_it_goes(inproc):
    inproc.install(tenant=CAP)
    gate = asyncio.Event()
    waiting = asyncio.Event()

    class Queue:
        async def before_forward(self, ctx):
            waiting.set()
            await gate.wait()

    inproc.hooks(Queue())
    request = asyncio.ensure_future(inproc.post(chat()))
    await asyncio.wait_for(waiting.wait(), 30)
    assert (await inproc.budget())["held"] > 0 and len(inproc.gw.ledger.active) == 1
    gate.set()
    answer = await asyncio.wait_for(request, 30)
    assert answer.status == 200 and len(inproc.engine.requests) == 1
    assert (await inproc.budget())["held"] == 0 and not inproc.gw.ledger.active


async def test_a_router_hook_may_send_the_request_to_another_deployment(inproc):
    inproc.install(targets=[target(1, inproc.engine.url), target(2, inproc.engine_b.url, weight=0.0)])

    class PreferTwo:
        async def before_forward(self, ctx):
            ctx.target = next(t for t in ctx.route.targets if t.deployment_id == 2)

    inproc.hooks(PreferTwo())
    answer = await inproc.post(chat())
    assert answer.status == 200 and answer.headers["x-governor-deployment"] == "dep-2"
    assert inproc.engine.requests == [] and len(inproc.engine_b.requests) == 1
    assert inproc.events()[0]["deployment_id"] == 2


async def test_a_router_hook_may_choose_the_model_and_the_key_must_still_be_allowed_it(inproc):
    inproc.install(tenant=CAP)
    snap = inproc.gw.snapshots.current
    same = snap.routes["m"].targets
    snap.routes["small"] = Route("small", None, same)
    snap.routes["private"] = Route("private", None, same, tenant_ids=frozenset({2}))
    snap.prices["small"] = Price(price_id=4, input_nanos=1, output_nanos=1)

    class Downsize:
        model = "small"

        async def before_route(self, ctx):
            ctx.model = self.model

    hook = Downsize()
    inproc.hooks(hook)
    answer = await inproc.post(chat())
    assert answer.status == 200 and answer.json()["model"] == "small"
    [event] = inproc.events()
    assert (event["public_model"], event["price_id"]) == ("small", 4)
    hook.model = "private"
    assert (await inproc.post(chat())).json()["error"]["code"] == "model_not_found"


async def test_a_hook_that_raises_is_a_500_and_never_leaks_a_hold(inproc):
    inproc.install(tenant=CAP)

    class Broken:
        def __init__(self, point: str) -> None:
            setattr(self, point, self.fail)

        async def fail(self, ctx):
            raise RuntimeError("hook bug")

    for point in ("before_route", "before_forward"):
        inproc.hooks(Broken(point))
        answer = await inproc.post(chat())
        assert answer.status == 500 and answer.json()["error"]["code"] == "hook_failed", point
        assert await inproc.budget() in ({}, {"spent": 0, "held": 0}) and await inproc.ledger() == {}
    assert inproc.engine.requests == []
    # Only the one that ran after admission has an event (booked at $0).
    assert [(e["error_type"], e["cost_nanos"]) for e in inproc.events()] == [("hook_failed", 0)]


async def test_a_fail_open_hook_that_raises_is_skipped(inproc):
    inproc.install()

    class Flaky(Cache):
        fail_open = True

        async def before_route(self, ctx):
            raise ConnectionError("cache backend down")

    inproc.hooks(Flaky())
    assert (await inproc.post(chat())).status == 200 and len(inproc.engine.requests) == 1


async def test_hooks_run_in_order_and_the_first_reply_ends_the_point(inproc):
    inproc.install()
    ran: list[str] = []

    class Step:
        def __init__(self, name: str, reply: Reply | None = None) -> None:
            self.name, self.reply = name, reply

        async def before_route(self, ctx):
            ran.append(self.name)
            return self.reply

    inproc.hooks(
        Step("a"),
        Step("b", error_reply(403, "no", "invalid_request_error", "nope", reason="nope")),
        Step("c"),
    )
    assert (await inproc.post(chat())).status == 403 and ran == ["a", "b"]


async def test_after_the_response_a_hook_sees_the_stream_and_its_errors_change_nothing(inproc):
    inproc.install(tenant=CAP)
    cache = Cache()

    class Raises:
        async def after_response(self, ctx):
            raise RuntimeError("after")

    inproc.hooks(Raises(), cache)
    answer = await inproc.post(chat(stream=True))
    assert answer.status == 200 and answer.sse_events()[-1] == b"[DONE]"
    assert cache.streams == [answer.body]  # exactly what the client received
    assert (await inproc.budget())["held"] == 0
    # Refused requests were never admitted: no after_response.
    assert (await inproc.post(chat(), secret="gk-wrong")).status == 401 and len(cache.streams) == 1


async def test_a_hook_that_returns_something_else_than_a_reply_is_a_500(inproc):
    inproc.install()

    class Wrong:
        async def before_route(self, ctx):
            return {"status": 200}

    inproc.hooks(Wrong())
    assert (await inproc.post(chat())).json()["error"]["code"] == "hook_failed"


def test_without_hooks_the_points_are_empty():
    hooks = Pipeline().hooks
    assert (hooks.before_route, hooks.before_forward, hooks.after_response, hooks.capture_streams) == (
        (),
        (),
        (),
        False,
    )
    only_after = Hooks([Cache()])
    assert (
        only_after.before_forward == () and len(only_after.before_route) == 1 and only_after.capture_streams
    )


async def test_hooks_are_configured_by_dotted_path_and_built_with_the_gateway(monkeypatch, inproc):
    monkeypatch.setenv(
        "GATEWAY_HOOKS", "tests.gateway.test_pipeline:Cache, tests.gateway.test_pipeline.Cache"
    )
    assert load_config().hooks == ("tests.gateway.test_pipeline:Cache", "tests.gateway.test_pipeline.Cache")
    monkeypatch.delenv("GATEWAY_HOOKS")
    # Unset: the semantic cache, which does nothing on a route until an admin turns it on there.
    assert load_config().hooks == ("gateway.semcache.hook:SemanticCache",)
    monkeypatch.setenv("GATEWAY_HOOKS", "none")
    assert load_config().hooks == ()
    built = load_hooks(["tests.gateway.test_pipeline:Cache"], inproc.gw)
    assert isinstance(built[0], Cache)


async def test_a_gateway_started_with_hooks_in_its_config_runs_them(tmp_path):
    from tests.gateway.inproc import InProc, config

    g = InProc(tmp_path)
    g.gw.config = config(tmp_path, g.prefix, hooks=("tests.gateway.test_pipeline:Cache",))
    await g.start()
    try:
        g.install()
        first = await g.post(chat())
        assert (await g.post(chat())).body == first.body and len(g.engine.requests) == 1
        assert orjson.loads(first.body)["model"] == "m"
    finally:
        await g.stop()
