"""Run cases against an OpenAI-compatible endpoint (vLLM, the simulated engine, the gateway).

Chat cases go to ``/v1/chat/completions``, prompt cases to ``/v1/completions``, non-streaming,
with ``temperature`` 0 and a fixed ``seed`` so a rerun asks the same question the same way. At
most ``concurrency`` requests are in flight. A failed request (HTTP error, timeout, refused
connection) becomes a result with ``error`` set and score 0; it never ends the run.

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


async def _one(client, *, model: str, case: Case, seed: int, temperature: float, extra_body: dict | None,
               include_truth: bool) -> CaseResult:  # fmt: skip
    body = dict(extra_body or {})
    if include_truth:
        body["governor_eval"] = truth_of(case)
    started = time.perf_counter()
    try:
        if case.messages is not None:
            resp = await client.chat.completions.create(
                model=model,
                messages=case.chat_messages(),
                max_tokens=case.max_tokens,
                temperature=temperature,
                seed=seed,
                extra_body=body or None,
            )
            output = resp.choices[0].message.content or "" if resp.choices else ""
        else:
            resp = await client.completions.create(
                model=model,
                prompt=case.prompt,
                max_tokens=case.max_tokens,
                temperature=temperature,
                seed=seed,
                extra_body=body or None,
            )
            output = resp.choices[0].text if resp.choices else ""
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
    usage = getattr(resp, "usage", None)
    return CaseResult(
        case_id=case.id,
        category=case.category,
        output=output,
        score=score_case(case, output),
        latency_ms=latency_ms,
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
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
    on_result: Callable[[CaseResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[CaseResult]:
    """Run ``cases``; results come back in the order of ``cases``.

    ``base_url`` is the OpenAI base (ending in ``/v1``). ``on_result`` is called with each result
    as it completes (e.g. to save progress). ``should_stop`` is polled before each case starts;
    once it returns true no further case starts, the in-flight ones finish, and only finished
    cases are returned.
    """
    import httpx
    import openai

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s))
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0,
                                timeout=timeout_s, http_client=http)  # fmt: skip
    results: dict[int, CaseResult] = {}
    queue = iter(enumerate(cases))
    stopped = False

    async def worker() -> None:
        nonlocal stopped
        for index, case in queue:
            if stopped or (should_stop is not None and should_stop()):
                stopped = True
                return
            result = await _one(client, model=model, case=case, seed=seed, temperature=temperature,
                                extra_body=extra_body, include_truth=include_truth)  # fmt: skip
            results[index] = result
            if on_result is not None:
                on_result(result)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(cases))))))
    finally:
        await client.close()
        await http.aclose()
    return [results[i] for i in sorted(results)]


def run_cases(**kwargs: Any) -> list[CaseResult]:
    """Synchronous wrapper of ``run_cases_async`` (same keyword arguments) for Celery tasks and scripts."""
    return asyncio.run(run_cases_async(**kwargs))
