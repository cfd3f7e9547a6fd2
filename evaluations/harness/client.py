"""One streamed OpenAI-compatible request, timed chunk by chunk.

aiohttp rather than httpx: on this project's 2-core reference machine aiohttp's C HTTP parser
and ``iter_any`` (one callback per network read, not per line) kept 1,000 concurrent 20 token/s
streams on time where httpx fell behind (see docs/benchmarks.md for the measurement).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from .records import (
    CLIENT_ERROR,
    CONNECT_ERROR,
    EMPTY_RESPONSE,
    HTTP_4XX,
    HTTP_5XX,
    INVALID_RESPONSE,
    STREAM_CUT,
    TIMEOUT,
    RequestRecord,
)

API_COMPLETIONS = "completions"
API_CHAT = "chat"


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go and how they are shaped. ``base_url`` ends in ``/v1``."""

    base_url: str
    model: str
    api: str = API_COMPLETIONS
    api_key: str = ""
    # Sampling parameters merged into every request body. ``ignore_eos`` makes the engine emit
    # exactly max_tokens, which fixed-length workloads need (vLLM's bench does the same).
    sampling: dict = field(default_factory=lambda: {"temperature": 0.0, "ignore_eos": True})
    request_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0

    @property
    def url(self) -> str:
        path = "/chat/completions" if self.api == API_CHAT else "/completions"
        return self.base_url.rstrip("/") + path

    @property
    def metrics_url(self) -> str:
        """vLLM serves Prometheus text at ``/metrics`` next to ``/v1``."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        return base + "/metrics"

    def body(self, *, prompt: str, max_tokens: int) -> bytes:
        payload: dict = {
            "model": self.model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.sampling,
        }
        if self.api == API_CHAT:
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        return orjson.dumps(payload)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def new_session(target: Target, *, limit: int = 0) -> aiohttp.ClientSession:
    """One pooled session per client process; ``limit=0`` means no cap on open connections."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=False, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=target.request_timeout_s, sock_connect=target.connect_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=target.headers())


async def stream_request(
    session: aiohttp.ClientSession,
    target: Target,
    record: RequestRecord,
    *,
    prompt: str,
    max_tokens: int,
    prompt_tokens_hint: int,
    clock: Callable[[], float],
) -> RequestRecord:
    """Send one request and fill ``record`` in place; never raises (errors are classified)."""
    body = target.body(prompt=prompt, max_tokens=max_tokens)
    record.sent_s = clock()
    chunks = record.chunk_s
    got_headers = False
    finished = False
    usage: dict | None = None
    buf = b""
    try:
        async with session.post(target.url, data=body) as resp:
            got_headers = True
            if resp.status >= 400:
                text = (await resp.text(errors="replace"))[:200]
                record.error = HTTP_4XX if resp.status < 500 else HTTP_5XX
                record.detail = f"HTTP {resp.status}: {text}"
                return record
            async for data in resp.content.iter_any():
                now = clock()  # one timestamp per network read: every event in it arrived then
                buf += data
                while True:
                    end = buf.find(b"\n\n")
                    if end < 0:
                        break
                    event, buf = buf[:end], buf[end + 2 :]
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue  # comments / keep-alives / event names
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            finished = True
                            continue
                        try:
                            obj = orjson.loads(payload)
                        except orjson.JSONDecodeError:
                            record.error = INVALID_RESPONSE
                            record.detail = f"not JSON: {payload[:120]!r}"
                            return record
                        if "error" in obj and not obj.get("choices"):
                            record.error = INVALID_RESPONSE
                            record.detail = f"error mid-stream: {str(obj['error'])[:180]}"
                            return record
                        choices = obj.get("choices")
                        if choices:
                            chunks.append(now)
                            if choices[0].get("finish_reason"):
                                finished = True
                        if obj.get("usage"):
                            usage = obj["usage"]
    except TimeoutError as exc:
        record.error = TIMEOUT
        record.detail = f"no complete response within {target.request_timeout_s:g} s ({type(exc).__name__})"
        return record
    except aiohttp.ClientPayloadError as exc:
        record.error = STREAM_CUT
        record.detail = str(exc)[:200]
        return record
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        record.error = STREAM_CUT if got_headers else CONNECT_ERROR
        record.detail = f"{type(exc).__name__}: {exc}"[:200]
        return record
    except aiohttp.ClientError as exc:
        record.error = STREAM_CUT if got_headers else CONNECT_ERROR
        record.detail = f"{type(exc).__name__}: {exc}"[:200]
        return record
    except Exception as exc:  # a harness bug must not kill the run; it is reported as such
        record.error = CLIENT_ERROR
        record.detail = f"{type(exc).__name__}: {exc}"[:200]
        return record

    if not finished:
        record.error = STREAM_CUT
        record.detail = f"stream ended after {len(chunks)} chunks without finish_reason or [DONE]"
        return record
    if not chunks:
        record.error = EMPTY_RESPONSE
        record.detail = "no chunk carried a choice"
        return record
    if usage and usage.get("completion_tokens") is not None:
        record.output_tokens = int(usage["completion_tokens"])
        record.prompt_tokens = int(usage.get("prompt_tokens") or prompt_tokens_hint)
    else:
        # DOMAIN.md: counts come from usage; without it we estimate one token per content chunk
        # (exact for vLLM, which streams one token per chunk) and flag the record.
        record.usage_missing = True
        record.output_tokens = len(chunks)
        record.prompt_tokens = prompt_tokens_hint
    return record
