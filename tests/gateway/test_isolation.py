"""Long-request isolation (docs/decisions/0039): prompts over a route's threshold, in the engine's
tokens, go to its long-context pool; the answer and its usage event say which pool answered; a long
pool that is down sends them back to the main pool, one that is full keeps them.

The unit tests drive ``gateway.router.Router`` alone; the others a real gateway process in front of
simulated engines (``engines.server``: a chat prompt is ``ceil(chars / 4)`` tokens plus 4 per message
and 2, which is what the engine reports in ``usage``), through the official ``openai`` client.
"""

from __future__ import annotations

import threading
import uuid

import openai
import pytest

from billing.models import UsageEvent
from billing.services.keys import api_key_create
from gateway.router import PROMPT_RATIO_MIN_ANSWERS, Router
from snapshot.contract import Route, Target
from tests.gateway.conftest import free_port, publish, route, wait_shipped, wait_until


def _t(dep: int, pool: str = "online", status: str = "RUNNING", max_model_len: int | None = None) -> Target:
    return Target(dep, f"d{dep}", None, "http://x/v1", "m", 1.0, pool, status, max_model_len=max_model_len)


# --- the router alone --------------------------------------------------------------------------------


def test_the_threshold_is_compared_with_the_prompt_in_the_engines_tokens_once_learned():
    r = Router(eject_s=10)
    route_ = Route("m", 1000, [_t(1), _t(2, pool="long-context")])
    # Before any answer the leaning-high estimate is used as it is: borderline prompts go long.
    assert r.prompt_tokens("m", "chat", 1200) == 1200
    assert [t.deployment_id for t in r.candidates(route_, r.prompt_tokens("m", "chat", 1200))] == [2]
    # Engines report three quarters of the estimate (English text at ~4 bytes a token, not 3).
    for _ in range(PROMPT_RATIO_MIN_ANSWERS - 1):
        r.observe_prompt("m", "chat", 4000, 3000)
    assert r.prompt_ratio("m", "chat") is None  # not enough answers yet
    r.observe_prompt("m", "chat", 4000, 3000)
    assert r.prompt_ratio("m", "chat") == pytest.approx(0.75)
    assert r.prompt_tokens("m", "chat", 1200) == 900
    assert [t.deployment_id for t in r.candidates(route_, r.prompt_tokens("m", "chat", 1200))] == [1]
    assert [t.deployment_id for t in r.candidates(route_, r.prompt_tokens("m", "chat", 1400))] == [2]
    # Learned per model and endpoint; an absurd report is bounded.
    assert r.prompt_ratio("m", "text") is None and r.prompt_ratio("other", "chat") is None
    for _ in range(200):
        r.observe_prompt("m", "text", 10, 1000)
    assert r.prompt_ratio("m", "text") == 2.0


def test_long_prompts_fall_back_to_the_main_pool_when_the_long_pool_has_no_healthy_target():
    r = Router(eject_s=10)
    long_ = _t(2, pool="long-context")
    for down in (
        Route("m", 100, [_t(1), _t(2, pool="long-context", status="DEPLOY_FAILED")]),
        Route("m", 100, [_t(1), Target(2, "d2", None, "http://x/v1", "m", 0.0, "long-context", "RUNNING")]),
    ):
        assert [t.deployment_id for t in r.candidates(down, 5000)] == [1]
    up = Route("m", 100, [_t(1), long_])
    assert r.candidates(up, 5000) == [long_]
    r.mark_failed(long_)  # refused a connection: ejected
    assert [t.deployment_id for t in r.candidates(up, 5000)] == [1]


def test_the_pool_is_chosen_among_targets_that_serve_the_endpoint():
    """A long pool that cannot serve the endpoint (it generates; the request embeds) does not hide
    the main pool's embedding deployment: the request is served, not refused with 503."""
    r = Router(eject_s=10)
    embed = Target(1, "e", None, "http://x/v1", "m", 1.0, "online", "RUNNING", task="embed")
    route_ = Route("m", 100, [embed, _t(2, pool="long-context")])
    serving = [embed]
    assert r.candidates(route_, 5000, serving) == [embed]


def test_a_prompt_the_main_pool_cannot_hold_goes_to_the_long_pool_whatever_the_threshold():
    r = Router(eject_s=10)
    small, big = _t(1, max_model_len=4096), _t(2, pool="long-context", max_model_len=131072)
    for threshold in (None, 100_000):
        route_ = Route("m", threshold, [small, big])
        assert r.candidates(route_, 1000, needs_tokens=3000) == [small]
        assert r.candidates(route_, 1000, needs_tokens=5000) == [big]
    # Without a long pool the engine judges (it answers 400 for a prompt it cannot hold).
    assert r.candidates(Route("m", None, [small]), 1000, needs_tokens=5000) == [small]


# --- through a real gateway ----------------------------------------------------------------------------


# The engine counts ceil(chars / 4) + 6 tokens for one message; the gateway estimates ~chars / 3 + 7.
WORD = "word "


def _words(tokens: int) -> list[dict]:
    """A one-message chat prompt the simulated engine counts as ``tokens`` prompt tokens."""
    return [{"role": "user", "content": (WORD * ((tokens - 6) * 4 // len(WORD)))[: (tokens - 6) * 4]}]


@pytest.fixture
def secret(tenant, admin_user):
    return api_key_create(tenant=tenant, name="isolation", actor=admin_user)[1]


def _isolated_route(name: str, main_url: str, long_url: str, threshold: int | None = 1200) -> dict:
    table = route(name, (1, "main", main_url, 1.0), (2, "long", long_url, 1.0), long_threshold=threshold,
                  pools={1: "long-context"})  # fmt: skip
    for t in table[name]["targets"]:
        t["engine_model"] = "sim-llama"  # the simulated engines' name; the route's is this test's own
    return table


def _ask(c: openai.OpenAI, name: str, tokens: int, **extra):
    raw = c.chat.completions.with_raw_response.create(
        model=name, messages=_words(tokens), max_tokens=2, **extra
    )
    return raw.headers, raw.parse()


@pytest.mark.django_db
@pytest.mark.slow
def test_long_prompts_are_isolated_by_the_engines_count_and_say_which_pool_answered(
    gateway, engine_a, engine_b, secret
):
    name = f"iso-{uuid.uuid4().hex[:8]}"
    publish(gateway, _isolated_route(name, engine_a, engine_b))
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    # 1000 engine tokens: under the threshold of 1200, but ~1340 by the gateway's raw estimate, so
    # before the router has heard any answer it errs towards the long pool.
    headers, first = _ask(c, name, 1000)
    assert headers["x-governor-pool"] == "long-context" and first.usage.prompt_tokens == 1000
    # Short answers teach it the engine's count; from then on the threshold is the engine's.
    for _ in range(10):
        headers, short = _ask(c, name, 600)
        assert headers["x-governor-pool"] == "online" and headers["x-governor-deployment"] == "main"
    for tokens, pool, slug in ((1000, "online", "main"), (1150, "online", "main"), (1300, "long-context", "long"),
                               (4000, "long-context", "long")):  # fmt: skip
        headers, answer = _ask(c, name, tokens)
        assert answer.usage.prompt_tokens == tokens
        assert (headers["x-governor-pool"], headers["x-governor-deployment"]) == (pool, slug), tokens
    # Streams say so too, and the usage events record the pool that answered.
    with c.chat.completions.with_streaming_response.create(
        model=name, messages=_words(3000), max_tokens=2, stream=True
    ) as s:
        assert s.headers["x-governor-pool"] == "long-context"
        assert "".join(s.iter_lines())
    wait_shipped(gateway)
    events = UsageEvent.objects.filter(public_model=name)
    wait_until(lambda: events.count() == 16, what="16 usage events")
    assert {(e.prompt_tokens, e.pool) for e in events if e.prompt_tokens in (1150, 1300, 4000, 3000)} == {
        (1150, "online"),
        (1300, "long-context"),
        (4000, "long-context"),
        (3000, "long-context"),
    }
    assert all(e.pool == ("long-context" if e.deployment_slug == "long" else "online") for e in events)


@pytest.mark.django_db
@pytest.mark.slow
def test_without_a_threshold_or_with_the_long_pool_down_long_prompts_are_served_by_the_main_pool(
    gateway, engine_a, engine_b, secret
):
    name = f"iso-{uuid.uuid4().hex[:8]}"
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    publish(gateway, _isolated_route(name, engine_a, engine_b, threshold=None))
    assert _ask(c, name, 4000)[0]["x-governor-deployment"] == "main"
    # The long pool failed to deploy: served by the main pool rather than refused.
    table = _isolated_route(name, engine_a, engine_b)
    table[name]["targets"][1]["status"] = "DEPLOY_FAILED"
    publish(gateway, table)
    assert _ask(c, name, 4000)[0]["x-governor-pool"] == "online"
    # The long pool stops answering: the request that found out gets 503 with Retry-After (nowhere
    # else was tried: its candidates were the long pool), and the next ones go to the main pool.
    publish(gateway, _isolated_route(name, engine_a, f"http://127.0.0.1:{free_port()}/v1"))
    with pytest.raises(openai.APIStatusError) as err:
        _ask(c, name, 4000)
    assert err.value.status_code == 503 and int(err.value.response.headers["retry-after"]) >= 1
    for _ in range(3):
        headers, answer = _ask(c, name, 4000)
        assert headers["x-governor-pool"] == "online" and answer.usage.prompt_tokens == 4000


@pytest.mark.django_db
@pytest.mark.slow
def test_a_full_long_pool_keeps_its_long_prompts_instead_of_spilling_them_onto_the_main_pool(
    gateway, engine_a, engine_b, secret
):
    """The long pool takes one request at a time (its admission limit) and one long stream holds it:
    the next long prompt waits there and is shed after its class's wait (standard: 2 s), while short
    prompts keep being served by the main pool."""
    name = f"iso-{uuid.uuid4().hex[:8]}"
    table = _isolated_route(name, engine_a, engine_b)
    table[name]["targets"][1]["max_inflight"] = 1
    publish(gateway, table)
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    started, release = threading.Event(), threading.Event()

    def hold_the_long_pool() -> None:
        # 20,000 tokens at the engine's 2 ms each: ~40 s, cut short once the test is done.
        with c.chat.completions.with_streaming_response.create(
            model=name, messages=_words(4000), max_tokens=20_000, stream=True, extra_body={"ignore_eos": True}
        ) as s:
            assert s.headers["x-governor-pool"] == "long-context"
            for _ in s.iter_lines():
                started.set()
                if release.is_set():
                    break

    holder = threading.Thread(target=hold_the_long_pool)
    holder.start()
    try:
        assert started.wait(60), "the long stream never started"
        with pytest.raises(openai.APIStatusError) as err:
            _ask(c, name, 4000)
        assert err.value.status_code == 503 and err.value.response.json()["error"]["code"] == "overloaded"
        assert err.value.response.headers.get("x-governor-pool") != "online"
        for _ in range(3):
            assert _ask(c, name, 200)[0]["x-governor-pool"] == "online"
    finally:
        release.set()
        holder.join(60)


@pytest.mark.django_db
@pytest.mark.slow
def test_a_prompt_longer_than_the_main_pools_context_is_sent_to_the_long_pool(
    gateway, engine_a, engine_b, secret
):
    """Whatever the threshold (none here): the main deployment's context is 2048 tokens. A request
    that leaves ``max_tokens`` at the gateway's default (4096) still fits there when its prompt does:
    the engine cuts the output to what is left of the context."""
    name = f"iso-{uuid.uuid4().hex[:8]}"
    table = _isolated_route(name, engine_a, engine_b, threshold=None)
    table[name]["targets"][0]["max_model_len"] = 2048
    publish(gateway, table)
    c = openai.OpenAI(base_url=gateway + "/v1", api_key=secret, max_retries=0)
    raw = c.chat.completions.with_raw_response.create(model=name, messages=_words(3000), max_tokens=2)
    assert raw.headers["x-governor-pool"] == "long-context" and raw.parse().usage.prompt_tokens == 3000
    raw = c.chat.completions.with_raw_response.create(model=name, messages=_words(500), max_tokens=2)
    assert raw.headers["x-governor-pool"] == "online"
    with c.chat.completions.with_streaming_response.create(
        model=name, messages=_words(500), stream=True
    ) as s:
        assert s.headers["x-governor-pool"] == "online"
        s.close()
