"""What the engines say about their own load: waiting requests and KV cache usage, from vLLM's metrics.

An in-flight limit counts what the gateways sent; it cannot see that a deployment is slower than its
benchmark (long prompts, a noisy neighbour, a lost replica not yet reported) and has started to
queue. vLLM can: ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` on its ``/metrics``.
Admission control reads both, as the Kubernetes Gateway API Inference Extension's saturation
detector does, with its defaults: a deployment is **saturated** when more than 5 requests wait in
its engine or its KV cache is more than 80 % used, on a sample younger than ``stale_s``. A saturated
deployment takes no sheddable traffic (``gateway.admission``); a stale or missing sample says
nothing, and the in-flight limit alone decides (docs/decisions/0035).

One gateway worker scrapes at a time (a Redis lease), every ``interval_s``, each deployment of the
snapshot at ``<base without /v1>/metrics`` (vLLM's OpenAI server and the simulated engines both
answer there), and writes one JSON sample per deployment to Redis with an expiry; every worker
reads all samples back on the same period. Label sets of one metric (the engines of a data-parallel
server) are summed for the queue and the worst is kept for KV usage. Parsing is prometheus_client's
own text parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import orjson
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("gateway.engine_signals")

# The Inference Extension's saturation detector defaults (queueDepthThreshold, kvCacheUtilThreshold).
QUEUE_THRESHOLD = 5
KV_THRESHOLD = 0.8
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the second: vLLM < 0.10


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of one deployment."""

    waiting: float
    running: float
    kv_usage: float | None
    at: float  # wall clock (time.time()) of the scrape, comparable across workers

    def saturated(self, queue_threshold: float = QUEUE_THRESHOLD, kv_threshold: float = KV_THRESHOLD) -> bool:
        return self.waiting > queue_threshold or (self.kv_usage is not None and self.kv_usage > kv_threshold)


_WANTED = (WAITING, RUNNING, *KV_USAGE)


def parse_engine_metrics(text: str, at: float) -> EngineLoad | None:
    """The engine's load from a Prometheus text page; None when the page has no vLLM queue gauge.

    Only the lines of the three gauges go to the parser: a vLLM page is mostly histogram buckets,
    and the library's pure-Python parser would spend milliseconds per scrape on them."""
    waiting = running = 0.0
    kv: float | None = None
    seen = False
    relevant = "\n".join(line for line in text.splitlines() if line.startswith(_WANTED)) + "\n"
    for family in text_string_to_metric_families(relevant):
        for sample in family.samples:
            name = sample.name
            if name == WAITING:
                waiting += sample.value
                seen = True
            elif name == RUNNING:
                running += sample.value
            elif name in KV_USAGE:
                kv = sample.value if kv is None else max(kv, sample.value)
    if not seen:
        return None
    return EngineLoad(waiting=waiting, running=running, kv_usage=kv, at=at)


def metrics_url(base_url: str) -> str:
    """``http://h:p/d/slug/v1`` → ``http://h:p/d/slug/metrics``: where the engine behind a target
    answers its metrics (vLLM's server at its root, a Serve route under its prefix)."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return base + "/metrics"


class EngineSignals:
    """The latest sample per deployment in this worker, refreshed from Redis; one worker scrapes."""

    def __init__(
        self,
        redis,
        key_prefix: str,
        worker_id: str,
        *,
        interval_s: float = 0.5,
        queue_threshold: float = QUEUE_THRESHOLD,
        kv_threshold: float = KV_THRESHOLD,
        stale_s: float | None = None,
        timeout_s: float = 1.0,
    ) -> None:
        self.redis = redis
        self.prefix = key_prefix
        self.worker_id = worker_id
        self.interval_s = interval_s
        self.queue_threshold = queue_threshold
        self.kv_threshold = kv_threshold
        self.stale_s = stale_s if stale_s is not None else max(3 * interval_s, 1.0)
        self.timeout_s = timeout_s
        self.loads: dict[int, EngineLoad] = {}
        self._saturated: set[int] = set()
        self._session = None
        self.scrapes = 0
        self.scrape_errors = 0

    # --- what admission asks, on every request: no I/O -------------------------------------------

    def saturated(self, deployment_id: int) -> bool:
        return deployment_id in self._saturated

    # --- the loop ------------------------------------------------------------------------------

    def _key(self, deployment_id: int) -> str:
        return f"{self.prefix}engine:{deployment_id}"

    async def run(self, targets: Callable[[], Iterable], on_relief: Callable[[int], None]) -> None:
        """Forever: scrape when this worker holds the lease, then read every sample back.

        ``targets()`` gives the snapshot's targets now; ``on_relief(deployment_id)`` is called when a
        deployment stops being saturated, so that admission hands its room to the waiters."""
        while True:
            try:
                await self.tick(list(targets()), on_relief)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis away: samples go stale, the limit decides
                log.debug("engine signals: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def tick(self, targets: list, on_relief: Callable[[int], None]) -> None:
        by_deployment = {}
        for t in targets:
            if t.deployment_id is not None and t.task == "generate":
                by_deployment.setdefault(t.deployment_id, t)
        if not by_deployment:
            self.loads, self._saturated = {}, set()
            return
        if await self._lead():
            await self._scrape(by_deployment)
        await self._read(list(by_deployment), on_relief)

    async def _lead(self) -> bool:
        """Hold (or take over) the scrape lease for a few periods; True when this worker holds it."""
        key = f"{self.prefix}engine-signals:leader"
        ttl_ms = int(max(3 * self.interval_s, 1.0) * 1000)
        if await self.redis.set(key, self.worker_id, nx=True, px=ttl_ms):
            return True
        holder = await self.redis.get(key)
        if holder is not None and holder.decode() == self.worker_id:
            await self.redis.pexpire(key, ttl_ms)
            return True
        return False

    async def _scrape(self, by_deployment: dict) -> None:
        results = await asyncio.gather(
            *(self._fetch(metrics_url(t.base_url)) for t in by_deployment.values()), return_exceptions=True
        )
        ttl_ms = int(self.stale_s * 1000)
        pipe = self.redis.pipeline(transaction=False)
        for deployment_id, result in zip(by_deployment, results, strict=True):
            self.scrapes += 1
            if isinstance(result, BaseException) or result is None:
                self.scrape_errors += 1
                continue
            pipe.set(self._key(deployment_id), orjson.dumps(asdict(result)), px=ttl_ms)
        await pipe.execute()

    async def _fetch(self, url: str) -> EngineLoad | None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        async with self._session.get(url) as resp:
            if resp.status != 200:
                return None
            text = await resp.text()
        return parse_engine_metrics(text, time.time())

    async def _read(self, deployment_ids: list[int], on_relief: Callable[[int], None]) -> None:
        raw = await self.redis.mget([self._key(d) for d in deployment_ids])
        now = time.time()
        loads: dict[int, EngineLoad] = {}
        for deployment_id, value in zip(deployment_ids, raw, strict=True):
            if value is None:
                continue
            load = EngineLoad(**orjson.loads(value))
            if now - load.at <= self.stale_s:
                loads[deployment_id] = load
        saturated = {
            d for d, load in loads.items() if load.saturated(self.queue_threshold, self.kv_threshold)
        }
        relieved = self._saturated - saturated
        self.loads, self._saturated = loads, saturated
        for deployment_id in relieved:
            on_relief(deployment_id)

    async def close(self) -> None:
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()
            self._session = None
