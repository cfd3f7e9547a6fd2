"""Run cases against an OpenAI-compatible endpoint (vLLM, the simulated engine, the gateway).

Chat cases go to ``/v1/chat/completions``, prompt cases to ``/v1/completions``, non-streaming,
with ``temperature`` 0 and a fixed ``seed`` so a rerun asks the same question the same way. At
most ``concurrency`` requests are in flight. A failed request (HTTP error, timeout, refused
connection) becomes a result with ``error`` set and score 0; it never ends the run.

Two HTTP clients, same requests and results: ``client="fast"`` (default) posts with aiohttp and
parses with orjson, ~0.2 ms of client CPU per case; ``client="openai"`` uses the official
``AsyncOpenAI`` client, ~5 ms per case (pydantic models for every request and response), which
caps a 2-core machine near 200 cases/s before the engine gets any CPU (``benchmarks.evals``).

``include_truth=True`` adds ``{"governor_eval": {case_id, category, expected, scorer,
scorer_args, context_len}}`` to each request body. Only the *simulated* engine reads it: it
models accuracy by answering right with the probability of its quality profile, and it cannot be
right without knowing the answer (see docs/decisions/0006). Never set it for a real engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.cases import Case
from evalkit.scorers import score as score_case


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one case (``output`` is ``None`` and ``error`` set when the request failed)."""

    case_id: str
    category: str
    output: str | None
    score: float
    latency_ms: float
    prompt_tokens: int | None
    completion_tokens: int | None
    error: str | None = None
    weight: float = 1.0


def truth_of(case: Case) -> dict[str, Any]:
    """What the simulated engine needs to know to answer ``case`` right (``governor_eval``)."""
    return {
        "case_id": case.id,
        "category": case.category,
        "expected": case.expected,
        "scorer": case.scorer,
        "scorer_args": case.scorer_args,
        "context_len": case.context_len,
    }


class _FastClient:
    """Minimal OpenAI-compatible JSON client: one aiohttp session, orjson, no response models."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float, concurrency: int) -> None:
        import aiohttp

        self.base = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key or 'unused'}", "Content-Type": "application/json"}
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        )

    async def post(self, path: str, body: dict) -> dict:
        import orjson

        async with self.session.post(self.base + path, data=orjson.dumps(body), headers=self.headers) as resp:
            raw = await resp.read()
            if resp.status >= 400:
                try:
                    message = orjson.loads(raw)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    message = raw[:300].decode(errors="replace")
                raise RuntimeError(f"HTTP {resp.status}: {message}")
            return orjson.loads(raw)

    async def complete(self, *, model: str, case: Case, seed: int, temperature: float, body: dict):
        req = {
            "model": model,
            "max_tokens": case.max_tokens,
            "temperature": temperature,
            "seed": seed,
            **body,
        }
        if case.messages is not None:
            data = await self.post("/chat/completions", req | {"messages": case.chat_messages()})
            output = data["choices"][0]["message"]["content"] or "" if data.get("choices") else ""
        else:
            data = await self.post("/completions", req | {"prompt": case.prompt})
            output = data["choices"][0]["text"] if data.get("choices") else ""
        usage = data.get("usage") or {}
        return output, usage.get("prompt_tokens"), usage.get("completion_tokens")

    async def close(self) -> None:
        await self.session.close()


class _OpenAIClient:
    """The official ``openai`` AsyncOpenAI client (slower; the reference for compatibility)."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float, concurrency: int) -> None:
        import httpx
        import openai

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s))
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0,
                                         timeout=timeout_s, http_client=self.http)  # fmt: skip

    async def complete(self, *, model: str, case: Case, seed: int, temperature: float, body: dict):
        common = {"model": model, "max_tokens": case.max_tokens, "temperature": temperature, "seed": seed,
                  "extra_body": body or None}  # fmt: skip
        if case.messages is not None:
            resp = await self.client.chat.completions.create(messages=case.chat_messages(), **common)
            output = resp.choices[0].message.content or "" if resp.choices else ""
        else:
            resp = await self.client.completions.create(prompt=case.prompt, **common)
            output = resp.choices[0].text if resp.choices else ""
        usage = resp.usage
        return output, getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)

    async def close(self) -> None:
        await self.client.close()
        await self.http.aclose()


CLIENTS = {"fast": _FastClient, "openai": _OpenAIClient}


async def _one(client, *, model: str, case: Case, seed: int, temperature: float, extra_body: dict | None,
               include_truth: bool) -> CaseResult:  # fmt: skip
    body = dict(extra_body or {})
    if include_truth:
        body["governor_eval"] = truth_of(case)
    started = time.perf_counter()
    try:
        output, prompt_tokens, completion_tokens = await client.complete(
            model=model, case=case, seed=seed, temperature=temperature, body=body
        )
    except Exception as exc:  # noqa: BLE001 - every failure is recorded on its case, the run goes on
        return CaseResult(
            case_id=case.id,
            category=case.category,
            output=None,
            score=0.0,
            latency_ms=(time.perf_counter() - started) * 1000,
            prompt_tokens=None,
            completion_tokens=None,
            error=f"{type(exc).__name__}: {exc}"[:500],
            weight=case.weight,
        )
    latency_ms = (time.perf_counter() - started) * 1000
    return CaseResult(
        case_id=case.id,
        category=case.category,
        output=output,
        score=score_case(case, output),
        latency_ms=latency_ms,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        weight=case.weight,
    )


async def run_cases_async(
    *,
    base_url: str,
    model: str,
    api_key: str,
    cases: Sequence[Case],
    concurrency: int = 16,
    seed: int = 0,
    temperature: float = 0.0,
    timeout_s: float = 60,
    extra_body: dict | None = None,
    include_truth: bool = False,
    client: str = "fast",
    on_result: Callable[[CaseResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[CaseResult]:
    """Run ``cases``; results come back in the order of ``cases``.

    ``base_url`` is the OpenAI base (ending in ``/v1``). ``on_result`` is called with each result
    as it completes (e.g. to save progress). ``should_stop`` is polled before each case starts;
    once it returns true no further case starts, the in-flight ones finish, and only finished
    cases are returned.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}")
    http = CLIENTS[client](base_url=base_url, api_key=api_key, timeout_s=timeout_s, concurrency=concurrency)
    results: dict[int, CaseResult] = {}
    queue = iter(enumerate(cases))
    stopped = False

    async def worker() -> None:
        nonlocal stopped
        for index, case in queue:
            if stopped or (should_stop is not None and should_stop()):
                stopped = True
                return
            result = await _one(http, model=model, case=case, seed=seed, temperature=temperature,
                                extra_body=extra_body, include_truth=include_truth)  # fmt: skip
            results[index] = result
            if on_result is not None:
                on_result(result)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(cases))))))
    finally:
        await http.close()
    return [results[i] for i in sorted(results)]


def run_cases(**kwargs: Any) -> list[CaseResult]:
    """Synchronous wrapper of ``run_cases_async`` (same keyword arguments) for Celery tasks and scripts."""
    return asyncio.run(run_cases_async(**kwargs))
