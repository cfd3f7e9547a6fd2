"""The simulated engines' ASGI app: raw ASGI, no framework (every microsecond counts at 1000+ streams)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import struct
import time
import uuid

import orjson

from asgistream import BodyPusher
from engines.metrics import Metrics
from engines.quality import QualityProfile, answer_tokens
from engines.quality import answer as quality_answer
from engines.requests import (
    ApiError,
    Parsed,
    bad_param,
    embedding_vector,
    parse_embedding_request,
    parse_request,
    plan_output,
    responses_to_chat,
)
from engines.timing import FixedEngine, LiveEngine, Sink
from engines.tokens import CHARS_PER_TOKEN, prefix_hashes

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class OpenAIApp:
    """Raw ASGI application (no framework: every microsecond counts at 1000+ streams)."""

    def __init__(self, *, model_name: str, engine: LiveEngine | FixedEngine, metrics: Metrics,
                 quality: QualityProfile | None = None, seed: int = 0) -> None:  # fmt: skip
        self.model_name = model_name
        self.engine = engine
        self.metrics = metrics
        self.created = int(time.time())
        self.quality = quality  # simulated answer quality for eval requests (engines.quality)
        self.seed = seed

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        path = path.rstrip("/") or "/"
        method = scope["method"]
        try:
            if path.endswith("/v1/chat/completions") or path == "/v1/chat/completions":
                self._need(method, "POST")
                await self._completion(receive, send, chat=True)
            elif path.endswith("/v1/completions"):
                self._need(method, "POST")
                await self._completion(receive, send, chat=False)
            elif path.endswith("/v1/embeddings"):
                self._need(method, "POST")
                await self._embeddings(receive, send)
            elif path.endswith("/v1/responses"):
                self._need(method, "POST")
                await self._responses(receive, send)
            elif path.endswith("/tokenize"):
                self._need(method, "POST")
                await self._tokenize(receive, send)
            elif path.endswith("/v1/models"):
                self._need(method, "GET")
                await self._json(send, 200, self._models())
            elif path.endswith("/health"):
                self.engine.ensure_started()
                await self._raw(send, 200, b"", [(b"content-type", b"text/plain")])
            elif path.endswith("/metrics"):
                body = self.metrics.render(self.engine)
                await self._raw(
                    send, 200, body, [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
                )
            else:
                raise ApiError(404, f"no route for {path}", code="not_found")
        except ApiError as err:
            await self._raw(send, err.status, err.body(), _JSON_HEADERS)

    @staticmethod
    def _need(method: str, expected: str) -> None:
        if method != expected:
            raise ApiError(405, f"method {method} not allowed", code="method_not_allowed")

    async def _lifespan(self, receive, send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.engine.ensure_started()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "governor-simulated-vllm",
                    "root": self.model_name,
                    "max_model_len": self.engine.max_model_len,
                }
            ],
        }

    @staticmethod
    async def _raw(send, status: int, body: bytes, headers: list) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _json(self, send, status: int, obj: dict) -> None:
        await self._raw(send, status, orjson.dumps(obj), _JSON_HEADERS)

    async def _tokenize(self, receive, send) -> None:
        """vLLM's ``POST /tokenize`` (prompt or messages): the count this engine bills, and the context."""
        raw = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc
        chat = isinstance(body, dict) and "messages" in body
        parsed = parse_request(body, chat=chat, model_name=self.model_name)
        limit = self.engine.max_model_len
        await self._json(send, 200, {"count": parsed.prompt_tokens, "max_model_len": limit})

    async def _completion(self, receive, send, *, chat: bool) -> None:
        chunks = []
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        try:
            body = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc
        parsed = parse_request(body, chat=chat, model_name=self.model_name)
        engine = self.engine
        limit = engine.max_model_len
        if parsed.prompt_tokens >= limit or (
            parsed.max_tokens is not None and parsed.prompt_tokens + parsed.max_tokens > limit
        ):
            asked = parsed.prompt_tokens + (parsed.max_tokens or 0)
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens "
                f"({parsed.prompt_tokens} in the messages, {parsed.max_tokens or 0} in the completion). "
                "Please reduce the length of the messages or completion.",
                param="messages" if chat else "prompt",
                code="context_length_exceeded",
            )
        tokens, reason = plan_output(parsed, max_model_len=limit)
        if self.quality is not None and body.get("governor_eval") is not None:
            tokens, reason = self._eval_answer(body["governor_eval"], parsed, limit)
        n_out = len(tokens)
        if n_out == 0:
            tokens, n_out = [""], 1  # a stop string at the very start still costs one step
        why = engine.check_fits(parsed.prompt_tokens, n_out)
        if why:
            raise ApiError(400, why, code="context_length_exceeded")
        bs = engine.block_size
        n_hash = min(parsed.prompt_tokens // bs, len(parsed.prompt_text) // (bs * CHARS_PER_TOKEN))
        hashes = prefix_hashes(parsed.prompt_text, bs, n_hash)
        try:
            sink = engine.submit(prompt_tokens=parsed.prompt_tokens, max_tokens=n_out, hashes=hashes)
        except ValueError as exc:
            raise ApiError(400, str(exc), code="invalid_value") from exc
        if body.get("governor_timings") is True:
            sink.token_times = []  # no token is out yet: they come from the engine's next ticks
        disconnected = False

        async def watch() -> None:
            nonlocal disconnected
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    disconnected = True
                    sink.wake()
                    return

        watcher = asyncio.get_running_loop().create_task(watch())
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            if parsed.stream:
                await self._stream(send, sink, parsed, tokens, reason, rid, created, lambda: disconnected)
            else:
                while not sink.done and not disconnected:
                    await sink.wait()
                if disconnected or sink.finish_reason == "abort":
                    return
                text = "".join(tokens[: sink.available]).lstrip(" ")
                usage = {
                    "prompt_tokens": parsed.prompt_tokens,
                    "completion_tokens": sink.available,
                    "total_tokens": parsed.prompt_tokens + sink.available,
                }
                if chat:
                    choice = {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": reason,
                    }
                    obj = "chat.completion"
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
                    obj = "text_completion"
                self.metrics.success[reason] = self.metrics.success.get(reason, 0) + 1
                out = {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [choice],
                       "usage": usage}  # fmt: skip
                if sink.token_times is not None and sink.started >= 0:
                    # The engine's own clock, so tests bound the timing the engine kept rather than
                    # what a client starved of CPU happened to see.
                    out["governor_timings"] = {
                        "queued_s": sink.started - sink.arrival,
                        "token_s": [t - sink.started for t in sink.token_times],
                    }
                await self._json(send, 200, out)
        finally:
            watcher.cancel()
            if not sink.done or disconnected:
                engine.abort(sink)

    async def _read_json(self, receive) -> object:
        chunks = []
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        try:
            return orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON: {exc}", code="invalid_json") from exc

    async def _embeddings(self, receive, send) -> None:
        """``POST /v1/embeddings``: each input's prefill goes through the engine (so it takes the time a
        prefill takes), then a deterministic unit vector per input."""
        body = await self._read_json(receive)
        inputs, tokens, fmt, dims = parse_embedding_request(body, model_name=self.model_name)
        limit = self.engine.max_model_len
        for i, n in enumerate(tokens):
            if n > limit:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, you requested {n} tokens "
                    f"in input[{i}] for embedding generation. Please reduce the length of the input.",
                    param="input",
                    code="context_length_exceeded",
                )
        sinks = [self.engine.submit(prompt_tokens=n, max_tokens=1, hashes=[]) for n in tokens]
        try:
            for sink in sinks:
                while not sink.done:
                    await sink.wait()
        finally:
            for sink in sinks:
                if not sink.done:
                    self.engine.abort(sink)
        data = []
        for i, item in enumerate(inputs):
            vec = embedding_vector(item, dims)
            if fmt == "base64":
                emb: object = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            else:
                emb = vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        total = sum(tokens)
        await self._json(
            send,
            200,
            {"object": "list", "id": "embd-" + uuid.uuid4().hex, "created": int(time.time()),
             "model": self.model_name, "data": data, "usage": {"prompt_tokens": total, "total_tokens": total}},
        )  # fmt: skip

    async def _responses(self, receive, send) -> None:
        """``POST /v1/responses`` (text in, text out): the chat generator behind the Responses API's shape."""
        body = await self._read_json(receive)
        chat_body = responses_to_chat(body)
        parsed = parse_request(chat_body, chat=True, model_name=self.model_name)
        engine = self.engine
        limit = engine.max_model_len
        asked = parsed.prompt_tokens + (parsed.max_tokens or 0)
        if parsed.prompt_tokens >= limit or asked > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens.",
                param="input",
                code="context_length_exceeded",
            )
        tokens, reason = plan_output(parsed, max_model_len=limit)
        tokens = tokens or [""]
        sink = engine.submit(prompt_tokens=parsed.prompt_tokens, max_tokens=len(tokens), hashes=[])
        rid, mid = "resp_" + uuid.uuid4().hex, "msg_" + uuid.uuid4().hex
        created = int(time.time())

        def response(status: str, text: str, n_out: int | None) -> dict:
            usage = None
            if n_out is not None:
                usage = {
                    "input_tokens": parsed.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": n_out, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": parsed.prompt_tokens + n_out,
                }  # fmt: skip
            output = []
            if status == "completed":
                output = [{"type": "message", "id": mid, "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}]  # fmt: skip
            return {
                "id": rid, "object": "response", "created_at": created, "status": status, "model": self.model_name,
                "output": output, "usage": usage, "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "max_output_tokens": parsed.max_tokens,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": 1.0, "top_p": 1.0,
                "metadata": {}, "text": {"format": {"type": "text"}}, "truncation": "disabled",
            }  # fmt: skip

        try:
            if not parsed.stream:
                while not sink.done:
                    await sink.wait()
                text = "".join(tokens[: sink.available]).lstrip(" ")
                await self._json(send, 200, response("completed", text, sink.available))
                return
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            seq = itertools.count()

            async def event(kind: str, payload: dict) -> None:
                data = orjson.dumps({"type": kind, "sequence_number": next(seq), **payload})
                await send({"type": "http.response.body", "body": b"event: " + kind.encode() + b"\ndata: " + data
                            + b"\n\n", "more_body": True})  # fmt: skip

            await event("response.created", {"response": response("in_progress", "", None)})
            item = {"type": "message", "id": mid, "status": "in_progress", "role": "assistant", "content": []}
            await event("response.output_item.added", {"output_index": 0, "item": item})
            sent = 0
            while sent < len(tokens):
                while sink.available <= sent and not sink.done:
                    await sink.wait()
                upto = min(sink.available, len(tokens))
                for tok in tokens[sent:upto]:
                    delta = tok.lstrip(" ") if sent == 0 else tok
                    await event("response.output_text.delta", {"item_id": mid, "output_index": 0,
                                                               "content_index": 0, "delta": delta, "logprobs": []})  # fmt: skip
                    sent += 1
                if sink.done and sink.available <= sent:
                    break
            text = "".join(tokens[:sent]).lstrip(" ")
            await event("response.output_text.done", {"item_id": mid, "output_index": 0, "content_index": 0,
                                                      "text": text, "logprobs": []})  # fmt: skip
            await event("response.completed", {"response": response("completed", text, sent)})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not sink.done:
                engine.abort(sink)

    def _eval_answer(self, truth: object, parsed: Parsed, limit: int) -> tuple[list[str], str]:
        """An eval case's answer, right or wrong as the quality profile decides (simulated)."""
        try:
            text, _ = quality_answer(self.quality, truth, seed=self.seed ^ (parsed.seed or 0),  # type: ignore[arg-type]
                                     prompt_text=parsed.prompt_text)  # fmt: skip
        except ValueError as exc:
            raise bad_param("governor_eval", str(exc)) from exc
        return answer_tokens(text, max_tokens=parsed.max_tokens, room=limit - parsed.prompt_tokens)

    async def _stream(self, send, sink: Sink, parsed: Parsed, tokens: list[str], reason: str, rid: str,
                      created: int, is_gone) -> None:  # fmt: skip
        chat = parsed.chat
        model = orjson.dumps(self.model_name).decode()
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":{model},"choices":[{{"index":0,'
        if chat:
            first_pre = head + '"delta":{"role":"assistant","content":'
            pre = head + '"delta":{"content":'
            post = '},"logprobs":null,"finish_reason":null}]}\n\n'
            last_post = '},"logprobs":null,"finish_reason":"' + reason + '"}]}\n\n'
        else:
            first_pre = pre = head + '"text":'
            post = ',"logprobs":null,"finish_reason":null}]}\n\n'
            last_post = ',"logprobs":null,"finish_reason":"' + reason + '"}]}\n\n'
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        loop = asyncio.get_running_loop()
        out = _SseOut(
            sink=sink,
            pusher=BodyPusher(send, loop),
            tokens=tokens,
            first_pre=first_pre.encode(),
            pre=pre.encode(),
            post=post.encode(),
            last_post=last_post.encode(),
            usage_head=(head[: head.index('"choices"')] + '"choices":[],"usage":').encode()
            if parsed.include_usage
            else None,
            prompt_tokens=parsed.prompt_tokens,
            is_gone=is_gone,
            metrics=self.metrics,
            reason=reason,
        )
        sink.listener = out.on_wake
        try:
            out.on_wake()  # tokens that are already out (and a client that is already gone)
            await out.pusher.done
        finally:
            sink.listener = None


# JSON of each token text, built once: the synthetic vocabulary is small, so this stays small too.
_TOKEN_JSON: dict[str, bytes] = {}


def _token_json(tok: str) -> bytes:
    j = _TOKEN_JSON.get(tok)
    if j is None:
        j = orjson.dumps(tok)
        if len(_TOKEN_JSON) < 65536:
            _TOKEN_JSON[tok] = j
    return j


class _SseOut:
    """One stream's SSE chunks, written when the engine hands out tokens (``Sink.listener``)."""

    __slots__ = (
        "sink", "pusher", "tokens", "n_out", "sent", "first_pre", "pre", "post", "last_post", "usage_head",
        "prompt_tokens", "is_gone", "metrics", "reason", "ended",
    )  # fmt: skip

    def __init__(self, *, sink: Sink, pusher: BodyPusher, tokens: list[str], first_pre: bytes, pre: bytes,
                 post: bytes, last_post: bytes, usage_head: bytes | None, prompt_tokens: int, is_gone,
                 metrics: Metrics, reason: str) -> None:  # fmt: skip
        self.sink = sink
        self.pusher = pusher
        self.tokens = tokens
        self.n_out = len(tokens)
        self.sent = 0
        self.first_pre = first_pre
        self.pre = pre
        self.post = post
        self.last_post = last_post
        self.usage_head = usage_head
        self.prompt_tokens = prompt_tokens
        self.is_gone = is_gone
        self.metrics = metrics
        self.reason = reason
        self.ended = False

    def on_wake(self) -> None:
        # Runs inside the engine's timer: an exception here must end this stream, not the engine.
        try:
            self._emit()
        except Exception as exc:  # noqa: BLE001
            self.pusher.close(exc)

    def _emit(self) -> None:
        pusher = self.pusher
        if self.ended or pusher.done.done():
            return
        sink = self.sink
        avail = sink.available
        sent = self.sent
        parts = []
        if avail > sent:
            tokens, n_out, pre, post = self.tokens, self.n_out, self.pre, self.post
            for i in range(sent, avail):
                if i:
                    parts.append(pre)
                    parts.append(_token_json(tokens[i]))
                else:
                    parts.append(self.first_pre)
                    parts.append(orjson.dumps(tokens[0].lstrip(" ")))
                parts.append(self.last_post if i == n_out - 1 else post)
            self.sent = sent = avail
        # The engine may hand out the last token and mark the request done in two separate wakes.
        if sink.done and sink.finish_reason != "abort" and sent >= self.n_out:
            if self.usage_head is not None:
                p = self.prompt_tokens
                parts.append(self.usage_head)
                parts.append(
                    orjson.dumps({"prompt_tokens": p, "completion_tokens": sent, "total_tokens": p + sent})
                )
                parts.append(b"}\n\n")
            parts.append(b"data: [DONE]\n\n")
            success = self.metrics.success
            success[self.reason] = success.get(self.reason, 0) + 1
            self.ended = True
            pusher.push({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
            return
        if parts:
            pusher.push_body(b"".join(parts))
        if self.is_gone() or sink.finish_reason == "abort":
            pusher.close()
