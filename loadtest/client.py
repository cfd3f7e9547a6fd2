"""One streamed OpenAI-compatible request, timed chunk by chunk.

The transport is ``fastclient.StreamClient`` (HTTP/1.1 on ``asyncio.Protocol``), chosen by measurement
over aiohttp and httpx: see docs/benchmarks.md and ``python -m benchmarks.harness``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

from .fastclient import StreamClient
from .records import CLIENT_ERROR, RequestRecord

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
    # The served model's tokenizer.json (or its directory): prompts are then built to exact token
    # counts locally; without it the harness asks the server (``loadtest.tokens``).
    tokenizer: str = ""

    @property
    def url(self) -> str:
        path = "/chat/completions" if self.api == API_CHAT else "/completions"
        return self.base_url.rstrip("/") + path

    @property
    def path(self) -> str:
        """The request path on the server (what goes after the host in the request line)."""
        return urlsplit(self.url).path

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
        if self.sampling.get("ignore_eos"):
            # ignore_eos alone still lets a stop string or a length-limited detokenizer end early;
            # min_tokens pins the output length exactly as vLLM's bench does.
            payload.setdefault("min_tokens", max_tokens)
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


def new_session(target: Target) -> StreamClient:
    """One pooled client per client process (``async with`` it); connections are kept alive."""
    return StreamClient(target.base_url, connect_timeout_s=target.connect_timeout_s, headers=target.headers())


async def stream_request(
    session: StreamClient,
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
    try:
        usage = await session.post_stream(
            target.path, body, record, clock=clock, timeout_s=target.request_timeout_s
        )
    except Exception as exc:  # a harness bug must not kill the run; it is reported as such
        record.error = CLIENT_ERROR
        record.detail = f"{type(exc).__name__}: {exc}"[:200]
        return record
    if record.error:
        return record
    if usage and usage.get("completion_tokens") is not None:
        record.output_tokens = int(usage["completion_tokens"])
        record.prompt_tokens = int(usage.get("prompt_tokens") or prompt_tokens_hint)
    else:
        # docs/domain.md: counts come from usage; without it we estimate one token per content chunk
        # (exact for vLLM, which streams one token per chunk) and flag the record.
        record.usage_missing = True
        record.output_tokens = len(record.chunk_s)
        record.prompt_tokens = prompt_tokens_hint
    return record
