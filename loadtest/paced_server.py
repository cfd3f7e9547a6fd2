"""A paced OpenAI-compatible SSE server with exact timings and fault injection.

It exists to calibrate the harness: every token leaves at a planned instant (first token
``ttft`` after service starts, then one every ``tpot``), so what the client measures can be
compared with the truth. ``--max-running N`` adds a FIFO queue in front of N service slots,
which gives an engine whose capacity is known analytically: ``N / (ttft + (out - 1) * tpot)``
requests per second. Faults (``--fault http_400|http_500|cut``, every K-th request) exercise the
harness's error classification.

It is a raw asyncio protocol (uvloop when available) rather than a web framework so that one core
keeps 1,000 streams at 20 tokens/s on time; the harness's client-capacity benchmark relies on it.
Use the engines' simulated vLLM for realistic batching; use this for known answers.

    python -m loadtest.paced_server --port 8100 --ttft-ms 100 --tpot-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import time

import orjson

_HEADERS_SSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _plain(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 500: b"Internal Server Error"}.get(
        status, b"Error"
    )
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason,
        content_type,
        len(body),
        body,
    )


class PacedEngine:
    """State shared by all connections: the queue, the slots and the counters /metrics shows."""

    def __init__(
        self,
        *,
        ttft_s: float,
        tpot_s: float,
        max_running: int = 0,
        fault: str = "",
        fault_every: int = 0,
        cut_after: int = 3,
        usage: bool = True,
        model: str = "paced",
    ) -> None:
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        self.max_running = max_running
        self.fault = fault
        self.fault_every = fault_every
        self.cut_after = cut_after
        self.usage = usage
        self.model = model
        self.running = 0
        self.waiting: collections.deque[_Stream] = collections.deque()
        self.counter = itertools.count(1)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.success_total = 0  # streams that ended with their last token (finish_reason), [DONE] sent

    def metrics_text(self) -> bytes:
        kv = (self.running / self.max_running) if self.max_running else 0.0
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{model_name="{self.model}"}} {self.running}',
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{model_name="{self.model}"}} {len(self.waiting)}',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f'vllm:kv_cache_usage_perc{{model_name="{self.model}"}} {kv}',
            "# TYPE vllm:num_preemptions_total counter",
            f'vllm:num_preemptions_total{{model_name="{self.model}"}} 0',
            "# TYPE vllm:prefix_cache_queries_total counter",
            f'vllm:prefix_cache_queries_total{{model_name="{self.model}"}} {self.prompt_tokens_total}',
            "# TYPE vllm:prefix_cache_hits_total counter",
            f'vllm:prefix_cache_hits_total{{model_name="{self.model}"}} 0',
            "# TYPE vllm:prompt_tokens_total counter",
            f'vllm:prompt_tokens_total{{model_name="{self.model}"}} {self.prompt_tokens_total}',
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{model_name="{self.model}"}} {self.generation_tokens_total}',
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="length",model_name="{self.model}"}} {self.success_total}',
            # Not a vLLM name: every completion request parsed, faults included (what a load run's
            # merged records must add up to).
            "# TYPE paced:requests_received_total counter",
            f'paced:requests_received_total{{model_name="{self.model}"}} {self.requests_total}',
        ]
        return ("\n".join(lines) + "\n").encode()

    def admit(self, stream: _Stream) -> None:
        if self.max_running and self.running >= self.max_running:
            self.waiting.append(stream)
        else:
            self.running += 1
            stream.start()

    def release(self) -> None:
        self.running -= 1
        while self.waiting and (not self.max_running or self.running < self.max_running):
            nxt = self.waiting.popleft()
            if nxt.closed:
                continue
            self.running += 1
            nxt.start()


class _Stream:
    """One streamed response: a chain of ``call_at`` callbacks, one per token (no task per stream)."""

    __slots__ = (
        "conn",
        "engine",
        "n",
        "i",
        "t0",
        "chat",
        "rid",
        "prompt_tokens",
        "cut",
        "closed",
        "done",
        "tok",
    )

    def __init__(
        self, conn: _Conn, engine: PacedEngine, *, n: int, chat: bool, prompt_tokens: int, cut: bool
    ):
        self.conn = conn
        self.engine = engine
        self.n = max(1, n)
        self.i = 0
        self.t0 = 0.0
        self.chat = chat
        self.rid = f"cmpl-{next(engine.counter)}"
        self.prompt_tokens = prompt_tokens
        self.cut = cut
        self.closed = False
        self.done = False
        self.tok: bytes | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        self.conn.transport.write(_HEADERS_SSE)
        loop.call_at(self.t0 + self.engine.ttft_s, self.emit)

    def _event(self, obj: dict) -> bytes:
        return _chunk(b"data: " + orjson.dumps(obj) + b"\n\n")

    def _token_event(self, last: bool) -> bytes:
        e = self.engine
        if self.chat:
            choice = {"index": 0, "delta": {"content": " tok"}, "finish_reason": "length" if last else None}
            obj = {"id": self.rid, "object": "chat.completion.chunk", "model": e.model, "choices": [choice]}
        else:
            choice = {"index": 0, "text": " tok", "finish_reason": "length" if last else None}
            obj = {"id": self.rid, "object": "text_completion", "model": e.model, "choices": [choice]}
        return self._event(obj)

    def emit(self) -> None:
        if self.closed:
            return self.finish(aborted=True)
        e = self.engine
        last = self.i == self.n - 1
        # Every token but the last is the same bytes: serialise once per stream, not per token, so
        # one core keeps thousands of streams on their schedule.
        if last:
            event = self._token_event(True)
        else:
            if self.tok is None:
                self.tok = self._token_event(False)
            event = self.tok
        w = self.conn.transport.write
        w(event)
        e.generation_tokens_total += 1
        self.i += 1
        if self.cut and self.i >= self.engine.cut_after:
            self.conn.transport.close()  # mid-stream, chunked body unterminated: a cut stream
            return self.finish(aborted=True)
        if not last:
            asyncio.get_running_loop().call_at(self.t0 + e.ttft_s + self.i * e.tpot_s, self.emit)
            return
        if e.usage:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.n}
            usage["total_tokens"] = self.prompt_tokens + self.n
            w(self._event({"id": self.rid, "object": "text_completion", "choices": [], "usage": usage}))
        w(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        e.success_total += 1
        self.finish(aborted=False)

    def finish(self, *, aborted: bool) -> None:
        if self.done:
            return
        self.done = True
        self.conn.stream = None
        self.engine.release()


class _Conn(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection; one request at a time (clients here do not pipeline)."""

    def __init__(self, engine: PacedEngine) -> None:
        self.engine = engine
        self.buf = b""
        self.transport: asyncio.Transport
        self.stream: _Stream | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.stream is not None:
            self.stream.closed = True
            if self.stream.t0 == 0.0:  # still queued: nothing scheduled will release it
                self.stream.done = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self.handle(method, path, body)

    def handle(self, method: str, path: str, body: bytes) -> None:
        e = self.engine
        # Any route prefix works (Ray Serve mounts apps under /d/<slug>), as with the engines' server.
        if method == "GET" and path.endswith("/metrics"):
            self.transport.write(_plain(200, e.metrics_text(), b"text/plain; version=0.0.4"))
            return
        if method == "GET" and path.endswith("/v1/models"):
            self.transport.write(_plain(200, orjson.dumps({"object": "list", "data": [{"id": e.model}]})))
            return
        if method == "GET" and path.endswith("/health"):
            self.transport.write(_plain(200, b"{}"))
            return
        if method != "POST" or not path.endswith(("/v1/completions", "/v1/chat/completions")):
            self.transport.write(_plain(404, b'{"error": {"message": "not found"}}'))
            return
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.transport.write(_plain(400, b'{"error": {"message": "body is not JSON"}}'))
            return
        e.requests_total += 1
        faulty = bool(e.fault) and e.fault_every > 0 and e.requests_total % e.fault_every == 0
        if faulty and e.fault == "http_400":
            self.transport.write(
                _plain(400, b'{"error": {"message": "injected 400", "type": "BadRequestError"}}')
            )
            return
        if faulty and e.fault == "http_500":
            self.transport.write(_plain(500, b'{"error": {"message": "injected 500"}}'))
            return
        chat = path.endswith("/chat/completions")
        text = req["messages"][-1]["content"] if chat else req.get("prompt", "")
        prompt_tokens = max(1, len(str(text).split()))
        e.prompt_tokens_total += prompt_tokens
        self.stream = _Stream(
            self,
            e,
            n=int(req.get("max_tokens") or 16),
            chat=chat,
            prompt_tokens=prompt_tokens,
            cut=faulty and e.fault == "cut",
        )
        e.admit(self.stream)


async def serve(engine: PacedEngine, *, host: str = "127.0.0.1", port: int = 8100) -> None:
    """Serve until cancelled."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(engine), host, port, backlog=4096, reuse_address=True)
    print(
        f"paced server on http://{host}:{port}/v1 ttft={engine.ttft_s * 1e3:g}ms tpot={engine.tpot_s * 1e3:g}ms",
        flush=True,
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--ttft-ms", type=float, default=100.0)
    p.add_argument("--tpot-ms", type=float, default=50.0)
    p.add_argument("--max-running", type=int, default=0, help="service slots; 0 = unlimited")
    p.add_argument("--fault", choices=["", "http_400", "http_500", "cut"], default="")
    p.add_argument("--fault-every", type=int, default=0, help="fault every K-th request")
    p.add_argument("--cut-after", type=int, default=3, help="tokens sent before a cut")
    p.add_argument("--no-usage", action="store_true", help="omit the usage chunk")
    p.add_argument("--model", default="paced")
    args = p.parse_args(argv)
    engine = PacedEngine(
        ttft_s=args.ttft_ms / 1e3,
        tpot_s=args.tpot_ms / 1e3,
        max_running=args.max_running,
        fault=args.fault,
        fault_every=args.fault_every,
        cut_after=args.cut_after,
        usage=not args.no_usage,
        model=args.model,
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # plain asyncio is fine for tests, slower for the capacity benchmark
        pass
    t = time.monotonic()
    try:
        asyncio.run(serve(engine, host=args.host, port=args.port))
    except KeyboardInterrupt:
        print(f"stopped after {time.monotonic() - t:.1f} s")


if __name__ == "__main__":
    main()
