"""Each hand-tuned piece of the gateway can be swapped for the library it replaced (ADR 0029), and
each swap is a working gateway: streamed and unary requests through the whole pipeline, in this
process, answered, billed and settled as with the default. ``benchmarks.gateway --swaps`` measures
what each piece saves; these tests make sure it measures gateways that work."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from asgistream import BodyPusher, TaskPusher
from gateway.app import Gateway
from gateway.config import load_config
from gateway.redisfast import FastRedis, RedisPyScripts
from gateway.upstream import AiohttpUpstream, UpstreamPool
from tests.gateway.inproc import PROMPT_TOKENS, SECRET, InProc, asgi_post, chat, config, tenant_budget

SWAPS = {
    "default": ({}, (FastRedis, UpstreamPool, BodyPusher)),
    "redis-py": ({"redis_client": "redis-py"}, (RedisPyScripts, UpstreamPool, BodyPusher)),
    "aiohttp": ({"upstream_client": "aiohttp"}, (FastRedis, AiohttpUpstream, BodyPusher)),
    "task-pusher": ({"stream_pusher": "task"}, (FastRedis, UpstreamPool, TaskPusher)),
}


@pytest.fixture(params=list(SWAPS), ids=list(SWAPS))
async def swapped(request, tmp_path):
    settings, pieces = SWAPS[request.param]
    g = InProc(tmp_path)
    g.gw = Gateway(config(tmp_path, g.prefix, **settings))
    await g.start()
    try:
        yield g, pieces
    finally:
        await g.stop()


async def test_each_swap_runs_its_piece_and_answers_streams_and_unary_requests(swapped):
    g, (redis_cls, http_cls, pusher_cls) = swapped
    assert type(g.gw.fast_redis) is redis_cls and g.gw.limiter.redis is g.gw.fast_redis
    assert type(g.gw.http) is http_cls and g.gw.pusher is pusher_cls
    g.install(tenant={"budget": tenant_budget(cap=10**9), "rpm": 1000, "tpm": 10**6})

    # A stream, with the task that sent each of its chunks: the pusher under test decides.
    sent: list[tuple[dict, asyncio.Task | None]] = []
    request_task: list[asyncio.Task] = []
    body = chat(stream=True, stream_options={"include_usage": True})

    async def receive():
        if not request_task:
            request_task.append(asyncio.current_task())
            return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
        await asyncio.Event().wait()

    async def send(msg):
        sent.append((msg, asyncio.current_task()))

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer " + SECRET.encode())],
    }
    await g.gw(scope, receive, send)
    assert sent[0][0]["status"] == 200
    stream_bytes = b"".join(m.get("body", b"") for m, _ in sent[1:])
    events = [e for e in stream_bytes.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]" and b'"completion_tokens":4' in events[-2]
    assert len(events) == 1 + 4 + 1 + 1  # role, four tokens, usage, [DONE]
    middle = {task for m, task in sent[1:] if m.get("more_body")}
    assert middle, "the chunks went out before the last message"
    if pusher_cls is TaskPusher:
        # The ordinary way: every chunk is sent by one task of the stream's own, awaiting send.
        [task] = middle
        assert task is not None and task is not request_task[0]
        for _ in range(3):
            await asyncio.sleep(0)  # its cancellation runs
        assert task.done(), "the pusher's task ends with its stream"
    elif http_cls is UpstreamPool:
        # BodyPusher: stepped in the upstream callback (no task) or, for what arrived before the
        # stream began, in the request's own task; never in a task of its own. (aiohttp's reader
        # delivers from a task of aiohttp's, so only the default client shows it.)
        assert middle <= {None, request_task[0]}

    unary = await g.post(chat(max_tokens=3))
    assert unary.status == 200 and unary.json()["usage"]["completion_tokens"] == 3

    events = g.events()
    assert [(e["status"], e["completion_tokens"]) for e in events] == [("ok", 4), ("ok", 3)]
    assert await g.budget() == {"spent": 2 * PROMPT_TOKENS * 1000 + 7 * 2000, "held": 0}
    assert await g.ledger() == {}


async def test_each_swap_reports_an_unreachable_deployment_as_503(swapped):
    from procs import free_port
    from tests.gateway.inproc import target

    g, _ = swapped
    g.install(targets=[target(1, f"http://127.0.0.1:{free_port()}/v1")])
    answer = await g.post(chat(stream=True))
    assert answer.status == 503 and answer.json()["error"]["code"] == "upstream_unavailable"


async def test_the_healthz_answer_names_the_pieces_that_run(swapped):
    g, _ = swapped
    answer = await asgi_post(g.gw, "/healthz", b"", [])
    pieces = answer.json()["pieces"]
    cfg = g.gw.config
    assert pieces == {
        "GATEWAY_REDIS_CLIENT": cfg.redis_client,
        "GATEWAY_UPSTREAM_CLIENT": cfg.upstream_client,
        "GATEWAY_STREAM_PUSHER": cfg.stream_pusher,
    }


def test_the_settings_default_to_the_hand_tuned_pieces_and_refuse_unknown_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("GOVERNOR_VAR_DIR", str(tmp_path))
    for name in ("GATEWAY_REDIS_CLIENT", "GATEWAY_UPSTREAM_CLIENT", "GATEWAY_STREAM_PUSHER"):
        monkeypatch.delenv(name, raising=False)
    cfg = load_config()
    assert (cfg.redis_client, cfg.upstream_client, cfg.stream_pusher) == ("fastredis", "http1", "bodypusher")
    monkeypatch.setenv("GATEWAY_REDIS_CLIENT", "Redis-Py")
    monkeypatch.setenv("GATEWAY_UPSTREAM_CLIENT", "aiohttp")
    monkeypatch.setenv("GATEWAY_STREAM_PUSHER", "task")
    cfg = load_config()
    assert (cfg.redis_client, cfg.upstream_client, cfg.stream_pusher) == ("redis-py", "aiohttp", "task")
    monkeypatch.setenv("GATEWAY_UPSTREAM_CLIENT", "httpx")
    with pytest.raises(ValueError, match="GATEWAY_UPSTREAM_CLIENT='httpx': expected one of http1, aiohttp"):
        load_config()
