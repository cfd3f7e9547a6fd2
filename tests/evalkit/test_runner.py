"""The runner against a real ``python -m engines.server`` process with a simulated quality profile:
measured accuracy lands on the profile within the interval, and failures stay on their cases."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalkit.builtin import generate
from evalkit.cases import Case
from evalkit.runner import run_cases, run_cases_async
from evalkit.stats import category_scores
from tests.support.servers import engines_fixed_server, free_port

PROFILE = {
    "categories": {"arithmetic": 0.7, "json_extraction": 0.9, "refusal": 0.97},
    "by_context": {"1024": 0.95, "4096": 0.5},
    "default": 0.8,
}


@pytest.fixture(scope="module")
def sim():
    with engines_fixed_server(1, 0.2, "--quality-json", json.dumps(PROFILE), "--max-model-len", "8192",
                              "--max-num-seqs", "256") as base:  # fmt: skip
        yield base


def run(sim, cases, **kw):
    return run_cases(base_url=sim, model="paced", api_key="k", cases=cases, include_truth=True, **kw)


@pytest.mark.parametrize(
    ("suite", "n", "p"),
    [
        ("arithmetic", 400, 0.7),
        ("json_extraction", 200, 0.9),
        ("refusal", 200, 0.97),
        ("needle_1k", 60, 0.95),
        ("needle_4k", 60, 0.5),
    ],  # fmt: skip
)
def test_measured_accuracy_matches_the_profile_within_the_interval(sim, suite, n, p):
    cases = generate(suite, seed=7, n=n)
    seen = []
    results = run(sim, cases, concurrency=32, on_result=seen.append)
    assert [r.case_id for r in results] == [c.id for c in cases]
    assert sorted(r.case_id for r in seen) == sorted(c.id for c in cases)
    assert all(r.error is None for r in results), [r.error for r in results if r.error][:3]
    assert all(r.prompt_tokens and r.completion_tokens and r.latency_ms > 0 for r in results)
    (score,) = category_scores(results).values()
    assert score.n == n
    assert score.lo <= p <= score.hi, (suite, score)
    # Not vacuous: a wide interval would contain anything.
    assert score.hi - score.lo < 0.3


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_both_clients_give_the_same_results(sim, client):
    cases = generate("json_extraction", seed=2, n=30) + generate("refusal", seed=2, n=10)
    prompt_cases = [Case(id=f"p{i}", category="plain", scorer="exact", expected="hi", prompt=f"say hi {i}")
                    for i in range(5)]  # fmt: skip
    fast = run(sim, cases + prompt_cases, client="fast")
    other = run(sim, cases + prompt_cases, client=client)
    strip = [(r.case_id, r.output, r.score, r.prompt_tokens, r.completion_tokens, r.error) for r in fast]
    assert strip == [
        (r.case_id, r.output, r.score, r.prompt_tokens, r.completion_tokens, r.error) for r in other
    ]
    assert all(r.error is None for r in fast)


def test_same_seed_same_answers_and_without_the_truth_the_simulator_cannot_answer(sim):
    cases = generate("arithmetic", seed=2, n=40)
    first = run(sim, cases)
    assert [r.output for r in run(sim, cases)] == [r.output for r in first]
    blind = run_cases(base_url=sim, model="paced", api_key="k", cases=cases)
    assert sum(r.score for r in blind) == 0  # synthetic words, no numbers


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_failures_are_recorded_per_case_and_the_run_goes_on(sim, client):
    good = generate("arithmetic", seed=3, n=5)
    too_long = Case(id="long", category="arithmetic", scorer="numeric", expected=1, prompt="word " * 40000)
    wrong_model = run_cases(base_url=sim, model="nope", api_key="k", cases=good[:2], client=client)
    assert all(r.error and "404" in r.error and r.output is None and r.score == 0 for r in wrong_model)
    results = run(sim, [*good[:2], too_long, *good[2:]], client=client)
    assert [r.case_id for r in results] == [c.id for c in good[:2]] + ["long"] + [c.id for c in good[2:]]
    assert "context length" in results[2].error and results[2].score == 0.0
    assert all(r.error is None for i, r in enumerate(results) if i != 2)


@pytest.mark.parametrize("client", ["fast", "openai"])
def test_unreachable_server_fails_every_case_without_raising(client):
    cases = generate("arithmetic", seed=3, n=4)
    results = run_cases(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", api_key="k", cases=cases,
                        timeout_s=5, client=client)  # fmt: skip
    assert len(results) == 4 and all(r.error and r.score == 0 for r in results)


def test_should_stop_ends_the_run_early(sim):
    cases = generate("arithmetic", seed=4, n=200)
    done = []
    results = run(sim, cases, concurrency=4, on_result=done.append, should_stop=lambda: len(done) >= 10)
    assert 10 <= len(results) < 20  # at most the in-flight ones finish after the stop
    # Cases start in order and every started case finishes: the results are a prefix of the suite.
    assert [r.case_id for r in results] == [c.id for c in cases[: len(results)]]


def test_async_api_inside_a_running_loop(sim):
    cases = generate("refusal", seed=5, n=6)

    async def go():
        return await run_cases_async(
            base_url=sim, model="paced", api_key="k", cases=cases, include_truth=True
        )

    assert len(asyncio.run(go())) == 6
