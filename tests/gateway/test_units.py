"""Pure pieces of the gateway: budget periods, routing choices, validation and prompt estimates."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from gateway.router import Router
from gateway.validation import BadRequest, estimate_prompt_tokens, validate
from snapshot.contract import Route, Target, period_key


def _t(dep: int, weight: float = 1.0, pool: str = "online", status: str = "RUNNING") -> Target:
    return Target(dep, f"d{dep}", None, "http://x/v1", "m", weight, pool, status)


def test_period_keys_and_ends():
    t = dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.UTC).timestamp()
    assert period_key("monthly", t) == ("m2026-12", dt.datetime(2027, 1, 1, tzinfo=dt.UTC).timestamp())
    assert period_key("daily", t)[0] == "d2026-12-31"
    assert period_key("weekly", t)[0] == "w2026-12-28"  # weeks start on Monday


def test_pick_follows_weights_and_skips_ejected_until_recovery():
    r = Router(eject_s=0.05)
    a, b = _t(1, 3), _t(2, 1)
    seen = Counter(r.pick([a, b], None).deployment_id for _ in range(4000))
    assert 0.70 < seen[1] / 4000 < 0.80
    r.mark_failed(a)
    assert {r.pick([a, b], None).deployment_id for _ in range(50)} == {2}
    import time

    # Back in rotation once the ejection ran out (polled, with a generous deadline).
    deadline = time.monotonic() + 30
    while 1 not in {r.pick([a, b], None).deployment_id for _ in range(50)}:
        assert time.monotonic() < deadline, "the ejected target never came back"
        time.sleep(0.01)


def test_sticky_pick_is_stable_and_moves_only_keys_of_a_removed_target():
    r = Router(eject_s=10)
    targets = [_t(1), _t(2), _t(3)]
    before = {u: r.pick(targets, u).deployment_id for u in map(str, range(300))}
    assert before == {u: r.pick(targets, u).deployment_id for u in map(str, range(300))}
    after = {u: r.pick(targets[:2], u).deployment_id for u in map(str, range(300))}
    moved = [u for u in before if before[u] != after[u]]
    assert all(before[u] == 3 for u in moved)  # rendezvous hashing: only deployment 3's users move


def test_candidates_use_the_long_context_pool_only_for_long_prompts():
    r = Router(eject_s=10)
    route = Route(
        "m", 100, [_t(1), _t(2, pool="long-context"), _t(3, status="DEPLOY_FAILED"), _t(4, weight=0)]
    )
    assert [t.deployment_id for t in r.candidates(route, 50)] == [1]
    assert [t.deployment_id for t in r.candidates(route, 500)] == [2]
    only_long = Route("m", 100, [_t(2, pool="long-context")])
    assert [t.deployment_id for t in r.candidates(only_long, 5)] == [2]


def test_unknown_failing_and_ejected_targets_are_never_candidates():
    r = Router(eject_s=10)
    a, b = _t(1), _t(2, status="UNKNOWN")
    route = Route("m", None, [a, b, _t(3, status="UNHEALTHY")])
    assert r.candidates(route, 5) == [a]
    r.mark_failed(a)
    assert r.candidates(route, 5) == []
    assert r.pick([a], None) is None  # no "try it anyway" once every target failed
    assert 9 <= r.retry_after_s(route.targets) <= 10  # until the ejection ends
    # The same deployment republished at another address starts healthy.
    moved = Target(1, "d1", None, "http://y/v1", "m", 1.0, "online", "RUNNING")
    assert r.candidates(Route("m", None, [moved]), 5) == [moved]
    # Nothing ejected, nothing known: retry after eject_s.
    assert Router(eject_s=10).retry_after_s([b]) == 10


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 99}, "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "user": 7}, "user"),
    ],
)
def test_wrong_types_are_rejected_with_the_parameter_named(body, param):
    with pytest.raises(BadRequest) as exc:
        validate("chat", body, absurd_max_tokens=10**6)
    assert exc.value.param == param


def test_prompt_estimate_leans_above_the_engines_four_chars_per_token():
    text = "The quick brown fox jumps over the lazy dog. " * 20
    est = estimate_prompt_tokens("chat", {"messages": [{"role": "user", "content": text}]})
    engine = -(-len(text) // 4) + 4 + 2  # engines.server's count
    assert est >= engine
    assert estimate_prompt_tokens("text", {"prompt": [1, 2, 3]}) == 4
