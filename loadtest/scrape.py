"""Scrape the engine's Prometheus ``/metrics`` into a time series while a stage runs.

A thread with a plain blocking client: one GET per second must not share an event loop (or a
core's worth of scheduling) with a thousand streams. Label sets of one metric are summed, so a
multi-replica endpoint reports its total; KV usage is averaged instead, because it is a fraction.
A target without ``/metrics`` (the gateway, a remote API) yields an empty series and a note.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterable

# Series key -> vLLM metric name (docs/domain.md "Conventions of the tools around us").
SCRAPED: dict[str, str] = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "preemptions": "vllm:num_preemptions_total",
    "prefix_queries": "vllm:prefix_cache_queries_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
_AVERAGED = {"vllm:kv_cache_usage_perc"}
# Older vLLM releases (< 0.10) called KV usage gpu_cache_usage_perc; accept it as a fallback.
_ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str, names: Iterable[str] | None = None) -> dict[str, float]:
    """Values of the metrics in ``SCRAPED`` (or ``names``), label sets summed (or averaged for fractions)."""
    wanted = set(SCRAPED.values() if names is None else names)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name = _ALIASES.get(m.group(1), m.group(1))
        if name not in wanted:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {name: (sums[name] / counts[name] if name in _AVERAGED else sums[name]) for name in sums}


class MetricsScraper:
    """Background sampler: ``start()``, run the load, ``stop()`` → list of samples."""

    def __init__(
        self, url: str, *, interval_s: float = 1.0, t0_wall: float | None = None, timeout_s: float = 2.0
    ):
        self.url = url
        self.interval_s = interval_s
        self.t0_wall = t0_wall if t0_wall is not None else time.time()
        self.timeout_s = timeout_s
        self.samples: list[dict] = []
        self.failures = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)

    def start(self) -> MetricsScraper:
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 1)
        return self.samples

    def scrape_once(self) -> dict | None:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8", "replace")
        except Exception as exc:  # an engine without /metrics must not fail the benchmark
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            return None
        values = parse_prometheus(text)
        sample: dict = {"t": round(time.time() - self.t0_wall, 3)}
        for key, name in SCRAPED.items():
            if name in values:
                sample[key] = values[name]
        self.samples.append(sample)
        return sample

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.scrape_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        self.scrape_once()  # one last sample after the load, so counters' deltas are complete

    def note(self) -> str:
        if self.samples:
            return ""
        return f"no engine metrics from {self.url}: {self.last_error or 'no samples'}"
