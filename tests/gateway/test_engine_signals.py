"""What the engines report, in admission control (gateway.engine_signals, docs/decisions/0035).

Who can do what: nobody outside the platform can reach the engines' ``/metrics``; the signals only
hold back sheddable traffic (a tenant's batch or ``flex`` requests) while a deployment's engine
queues or fills its KV cache, and a missing or stale sample never refuses anything. The pages
parsed here are written by prometheus_client (the library vLLM itself exports with), with vLLM's
metric names and labels; tests/engines/test_vllm_cpu.py parses a real vLLM server's page too.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict

import orjson
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.admission import AdmissionController
from gateway.engine_signals import EngineLoad, EngineSignals, metrics_url, parse_engine_metrics
from snapshot.contract import Target
from tests.gateway.inproc import REDIS_URL, chat, target, tenant_budget

SHORT_WAITS = {"interactive": 30.0, "standard": 30.0, "sheddable": 0.05}


def vllm_page(*, waiting: float, kv: float | None, running: float = 0, engines: int = 1) -> str:
    """A ``/metrics`` page with vLLM's names and labels (``model_name``, ``engine``), as vLLM writes
    it with prometheus_client; ``engines`` label sets split the queue as a data-parallel server does."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    w = Gauge("vllm:num_requests_waiting", "Requests waiting", labels, registry=reg)
    r = Gauge("vllm:num_requests_running", "Requests running", labels, registry=reg)
    k = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage", labels, registry=reg)
    Counter("vllm:prompt_tokens", "Prompt tokens", labels, registry=reg).labels("m", "0").inc(123)
    Histogram("vllm:time_to_first_token_seconds", "TTFT", labels, registry=reg).labels("m", "0").observe(0.2)
    for e in range(engines):
        w.labels("m", str(e)).set(waiting / engines)
        r.labels("m", str(e)).set(running / engines)
        if kv is not None:
            k.labels("m", str(e)).set(kv if e == 0 else kv / 2)
    return generate_latest(reg).decode()


async def until(cond, what: str, deadline_s: float = 15.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------ reading a page


def test_the_queue_is_summed_over_engines_and_kv_usage_is_the_worst_one():
    load = parse_engine_metrics(vllm_page(waiting=8, kv=0.9, running=6, engines=2), at=1.0)
    assert load == EngineLoad(waiting=8.0, running=6.0, kv_usage=0.9, at=1.0)
    assert load.saturated()  # 8 > 5 waiting


@pytest.mark.parametrize(
    "waiting,kv,saturated",
    [(5, 0.8, False), (6, 0.1, True), (0, 0.81, True), (0, None, False), (5.5, None, True)],
)
def test_saturation_uses_the_inference_extensions_thresholds(waiting, kv, saturated):
    """More than 5 waiting, or more than 80 % of the KV cache: the Gateway API Inference Extension's
    saturation detector defaults (queueDepthThreshold 5, kvCacheUtilThreshold 0.8)."""
    assert parse_engine_metrics(vllm_page(waiting=waiting, kv=kv), at=0).saturated() is saturated


def test_the_old_kv_metric_name_counts_and_a_page_without_vllm_says_nothing():
    reg = CollectorRegistry()
    Gauge("vllm:num_requests_waiting", "w", registry=reg).set(0)
    Gauge("vllm:gpu_cache_usage_perc", "kv (vLLM < 0.10)", registry=reg).set(0.95)
    assert parse_engine_metrics(generate_latest(reg).decode(), at=0).kv_usage == 0.95
    assert parse_engine_metrics("# HELP x y\n# TYPE x gauge\nx 1\n", at=0) is None


def test_the_metrics_url_sits_beside_the_openai_api():
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/d/chat-a/v1/") == "http://h:8000/d/chat-a/metrics"


# ------------------------------------------------------------------ one scraper, every worker reads


async def test_one_worker_scrapes_and_every_worker_reads_the_sample(inproc):
    inproc.engine.metrics_text = vllm_page(waiting=12, kv=0.3)
    targets = [Target(1, "d1", None, inproc.engine.url, "m", 1.0, "online", "RUNNING")]
    r = aioredis.from_url(REDIS_URL)
    prefix = f"{inproc.prefix}sig-test:"
    a = EngineSignals(r, prefix, "worker-a", interval_s=0.5)
    b = EngineSignals(r, prefix, "worker-b", interval_s=0.5)
    relieved: list[int] = []
    try:
        for _ in range(3):
            await a.tick(targets, relieved.append)
            await b.tick(targets, relieved.append)
        assert a.scrapes == 3 and b.scrapes == 0  # b never held the lease
        assert b.saturated(1) and b.loads[1].waiting == 12
        inproc.engine.metrics_text = vllm_page(waiting=0, kv=0.3)
        await a.tick(targets, relieved.append)
        await b.tick(targets, relieved.append)
        assert not b.saturated(1) and relieved == [1, 1]  # each worker let its own waiters go
    finally:
        await a.close()
        await b.close()
        await r.delete(f"{prefix}engine:1", f"{prefix}engine-signals:leader")
        await r.aclose()


async def test_a_stale_sample_refuses_nothing():
    """The scraper stopped (its worker died, the engine stopped answering): after ``stale_s`` the last
    sample no longer counts, and only the in-flight limit decides."""
    r = aioredis.from_url(REDIS_URL)
    prefix = f"gw-stale-{time.monotonic_ns()}:"
    s = EngineSignals(r, prefix, "w", interval_s=0.5, stale_s=1.0)
    t = Target(1, "d1", None, "http://127.0.0.1:9/v1", "m", 1.0, "online", "RUNNING")
    try:
        old = EngineLoad(waiting=50, running=1, kv_usage=0.99, at=time.time() - 5)
        fresh = EngineLoad(waiting=50, running=1, kv_usage=0.99, at=time.time())
        for load, expected in ((fresh, True), (old, False)):
            await r.set(f"{prefix}engine:1", orjson.dumps(asdict(load)))
            await r.set(f"{prefix}engine-signals:leader", "someone-else")  # w only reads
            await s.tick([t], lambda d: None)
            assert s.saturated(1) is expected
    finally:
        await r.delete(f"{prefix}engine:1", f"{prefix}engine-signals:leader")
        await r.aclose()


# ------------------------------------------------------------------ through the gateway


async def test_a_saturated_engine_sheds_sheddable_and_still_serves_the_others(inproc):
    """A deployment with no in-flight limit whose engine queues 9 requests: sheddable is shed (503,
    Retry-After, metered with its reason), standard and interactive are served; once the queue
    drains, a sheddable request that was waiting is let through."""
    inproc.install(
        targets=[target(1, inproc.engine.url)],
        key={"class": "interactive"},
        tenant={"budget": tenant_budget(cap=10**9)},
    )
    inproc.gw.admission = AdmissionController(shares=None, wait_s=SHORT_WAITS, signals=inproc.gw.signals)
    inproc.engine.metrics_text = vllm_page(waiting=9, kv=0.5)
    await until(lambda: inproc.gw.signals.saturated(1), "the engine's queue to be read")

    shed = await inproc.post(chat(service_tier="flex"))
    assert shed.status == 503 and shed.headers["retry-after"] == "10"
    assert shed.json()["error"]["code"] == "overloaded"
    for cls in (b"standard", b"interactive"):
        ok = await inproc.post(chat(), headers=[(b"x-governor-traffic-class", cls)])
        assert ok.status == 200, ok.body

    inproc.gw.admission.wait_s = (30.0, 30.0, 30.0)
    waiting = asyncio.create_task(inproc.post(chat(service_tier="flex")))
    await until(lambda: inproc.gw.admission.gates[1].waiters, "the sheddable request to queue")
    inproc.engine.metrics_text = vllm_page(waiting=0, kv=0.5)
    ans = await asyncio.wait_for(waiting, 15)
    assert ans.status == 200 and ans.headers["x-governor-traffic-class"] == "sheddable"
    reasons = sorted((e["traffic_class"], e["error_type"]) for e in inproc.events())
    assert reasons == [
        ("interactive", ""),
        ("sheddable", ""),
        ("sheddable", "shed_sheddable"),
        ("standard", ""),
    ]
    assert (await inproc.budget())["held"] == 0


async def test_sheddable_traffic_moves_to_a_deployment_whose_engine_has_room(inproc):
    from tests.gateway.inproc import FakeEngine

    other = FakeEngine()
    await other.start()
    try:
        inproc.install(
            targets=[target(1, inproc.engine.url), target(2, other.url)],
            tenant={"budget": tenant_budget(cap=10**9)},
        )
        inproc.engine.metrics_text = vllm_page(waiting=0, kv=0.95)  # KV cache nearly full
        other.metrics_text = vllm_page(waiting=0, kv=0.2)
        await until(
            lambda: inproc.gw.signals.saturated(1) and 2 in inproc.gw.signals.loads, "both engines to be read"
        )
        before = len(inproc.engine.requests)
        answers = [await inproc.post(chat(service_tier="flex")) for _ in range(6)]
        assert [a.status for a in answers] == [200] * 6
        assert len(inproc.engine.requests) == before and len(other.requests) == 6
    finally:
        await other.stop()
