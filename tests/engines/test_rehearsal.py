"""The rehearsal engine: each fault changes what the simulated deployments do, and the platform's
controls (weights, caps, rate limits, replicas) shape the traffic as the gateway would."""

from __future__ import annotations

import numpy as np

from engines.rehearsal import SCENARIOS, Controls, Rehearsal, metrics_text, scenario
from operations.engine_metrics import parse

W = Controls(weights={"a": 50, "b": 50})


def _run(name, t0, t1, controls=W, **changes):
    r = Rehearsal(scenario(name, fault_at_s=60, fault_for_s=60, **changes), seed=3)
    recs, metrics = [], {}
    for t in np.arange(t0, t1, 5.0):
        rr, metrics = r.tick(float(t), float(t + 5), controls)
        recs += rr
    return recs, metrics


def test_a_tick_is_deterministic_and_steady_traffic_meets_the_slos():
    a, _ = _run("lost_replica", 30, 60)
    b, _ = _run("lost_replica", 30, 60)
    assert a == b and len(a) > 50
    assert all(r["status"] == "ok" and r["ttft_ms"] < 500 and r["tpot_ms"] < 40 for r in a)
    assert {r["deployment"] for r in a} == {"a", "b"}


def test_each_fault_moves_the_figure_its_cause_names():
    def p90(recs, key):
        return float(np.percentile([r[key] for r in recs if r[key] is not None], 90))

    steady, _ = _run("tpot_regression", 30, 60)
    slow, _ = _run("tpot_regression", 60, 90)
    assert p90([r for r in slow if r["deployment"] == "b"], "tpot_ms") > 3 * p90(steady, "tpot_ms")
    assert p90([r for r in slow if r["deployment"] == "a"], "tpot_ms") < 1.2 * p90(steady, "tpot_ms")
    lost, _ = _run("lost_replica", 60, 90)
    assert {r["http_status"] for r in lost if r["deployment"] == "b"} == {503}
    flood, _ = _run("long_prompt_flood", 60, 90)
    assert max(r["prompt_tokens"] for r in flood if r["tenant"] == "globex") > 5000
    _, kv = _run("kv_exhaustion", 60, 75)  # the gauge is a moment's; the preemptions count up
    assert all(m["vllm:num_preemptions"] > 0 for m in kv.values())
    assert max(m["vllm:kv_cache_usage_perc"] for m in kv.values()) > 0.85
    collapsed, _ = _run("prefix_cache_collapse", 60, 90)
    cached, _ = _run("prefix_cache_collapse", 30, 60)
    share = [
        sum(r["cached_tokens"] for r in x) / sum(r["prompt_tokens"] for r in x) for x in (cached, collapsed)
    ]
    assert share[0] > 0.6 and share[1] < 0.2
    assert set(SCENARIOS) == {"long_prompt_flood", "batch_in_online_pool", "prefix_cache_collapse", "kv_exhaustion",
                              "longer_outputs", "slower_release", "tpot_regression", "lost_replica"}  # fmt: skip


def test_the_controls_shape_the_traffic_as_the_gateway_would():
    controls = Controls(weights={"a": 100, "b": 0}, rpm_limit={"acme": 30}, max_input_tokens={"globex": 500},
                        max_output_tokens={"acme": 40})  # fmt: skip
    recs, _ = _run("lost_replica", 30, 60, controls)
    acme = [r for r in recs if r["tenant"] == "acme"]
    assert {r["deployment"] for r in recs if r["status"] == "ok"} == {"a"}
    assert all(r["completion_tokens"] <= 40 for r in acme if r["status"] == "ok")
    ok = [r for r in acme if r["status"] == "ok"]
    assert 0 < len(ok) <= 30 * 30 / 60 + 2 and any(r["http_status"] == 429 for r in acme)
    globex = [r for r in recs if r["tenant"] == "globex"]
    assert all(r["http_status"] == 400 for r in globex if r["prompt_tokens"] > 500)
    assert all(r["status"] == "ok" for r in globex if r["prompt_tokens"] <= 500)


def test_long_prompts_go_to_the_long_context_pool_once_the_route_has_a_threshold():
    """As ``gateway.router`` routes: the pool is idle without a threshold, takes every prompt over it
    with one, and the short prompts' first tokens come back once the long prefills left their pool."""
    sc = scenario("long_prompt_flood", fault_at_s=0, fault_for_s=600, long_pool=("long",))
    weights = {"a": 50, "b": 50, "long": 50}
    plain = Controls(weights=weights, long_pool=frozenset({"long"}))
    isolated = Controls(weights=weights, long_pool=frozenset({"long"}), long_threshold=2000)
    before, _ = Rehearsal(sc, seed=3).tick(40, 80, plain)
    after, _ = Rehearsal(sc, seed=3).tick(40, 80, isolated)
    assert "long" not in {r["deployment"] for r in before}
    assert {r["deployment"] for r in after if r["prompt_tokens"] > 2000} == {"long"}
    assert {r["deployment"] for r in after if r["prompt_tokens"] <= 2000} == {"a", "b"}

    def short_ttft(recs):
        return float(
            np.median([r["ttft_ms"] for r in recs if r["status"] == "ok" and r["prompt_tokens"] <= 2000])
        )

    assert short_ttft(after) < short_ttft(before) / 2, (short_ttft(before), short_ttft(after))


def test_the_metrics_read_back_through_the_scrapers_parser():
    _, metrics = _run("kv_exhaustion", 60, 70)
    values = parse(metrics_text(metrics["a"]))
    assert values["kv_usage"] == metrics["a"]["vllm:kv_cache_usage_perc"]
    assert values["preemptions"] == metrics["a"]["vllm:num_preemptions"] > 0
    assert values["queue_count"] == metrics["a"]["vllm:request_queue_time_seconds_count"] > 0
