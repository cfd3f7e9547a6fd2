"""A tiny OpenAI-shaped backend for failure injection (streams that break, 500s).

The gateway's functional tests run against the real simulated engine; this exists for the faults
that a healthy engine never produces. ``python -m tests.gateway.fake_backend --port P [--break-after N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson


def make_app(
    *,
    tokens: int,
    tpot_ms: float,
    ttft_ms: float,
    break_after: int | None,
    fail_status: int | None,
    prompt_tokens_per_byte: float = 0.0,
    bad_usage: bool = False,
):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["path"].endswith("/models"):
            await _json(send, 200, {"object": "list", "data": []})
            return
        if scope["path"].endswith("/metrics"):  # the gateway's engine-signal scraper: none here
            await _json(send, 404, {"error": {"message": "no metrics", "type": "not_found"}})
            return
        if fail_status:
            await _json(send, fail_status, {"error": {"message": "injected", "type": "server_error"}})
            return
        req = orjson.loads(body)
        # The output limit as vLLM applies it: on chat ``max_completion_tokens`` when set, else
        # ``max_tokens`` (vllm/entrypoints/openai/chat_completion/protocol.py); on completions only
        # ``max_tokens``.
        limit = req.get("max_tokens")
        if scope["path"].endswith("/chat/completions") and req.get("max_completion_tokens") is not None:
            limit = req["max_completion_tokens"]
        n = min(tokens, int(limit or tokens))
        model = req.get("model")
        # A tokenizer's worst case counts every byte of the request it renders (tools included).
        prompt_tokens = int(len(body) * prompt_tokens_per_byte) if prompt_tokens_per_byte else 10
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if bad_usage:
            usage["prompt_tokens"] = "many"  # a broken engine's answer the gateway cannot read
        if ttft_ms:
            await asyncio.sleep(ttft_ms / 1000)
        if not req.get("stream"):
            await asyncio.sleep(tpot_ms * n / 1000)
            await _json(
                send,
                200,
                {
                    "id": "cmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "x " * n},
                            "finish_reason": "length",
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}
        await send(
            {
                "type": "http.response.body",
                "body": b"data: "
                + orjson.dumps(
                    {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                )
                + b"\n\n",
                "more_body": True,
            }
        )
        for i in range(n):
            if break_after is not None and i >= break_after:
                raise RuntimeError("injected stream break")  # uvicorn drops the connection mid-body
            if tpot_ms:
                await asyncio.sleep(tpot_ms / 1000)
            chunk = {**base, "choices": [{"index": 0, "delta": {"content": "x "}, "finish_reason": None}]}
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + orjson.dumps(chunk) + b"\n\n",
                    "more_body": True,
                }
            )
        tail = b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    return app


async def _json(send, status, obj):
    body = orjson.dumps(obj)
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--tpot-ms", type=float, default=1.0)
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--break-after", type=int, default=None)
    p.add_argument("--fail-status", type=int, default=None)
    p.add_argument("--prompt-tokens-per-byte", type=float, default=0.0)
    p.add_argument("--bad-usage", type=int, default=0)
    a = p.parse_args()
    import uvicorn

    uvicorn.run(
        make_app(
            tokens=a.tokens,
            tpot_ms=a.tpot_ms,
            ttft_ms=a.ttft_ms,
            break_after=a.break_after,
            fail_status=a.fail_status,
            prompt_tokens_per_byte=a.prompt_tokens_per_byte,
            bad_usage=bool(a.bad_usage),
        ),
        host="127.0.0.1",
        port=a.port,
        log_level="error",
        loop="uvloop",
        http="httptools",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
