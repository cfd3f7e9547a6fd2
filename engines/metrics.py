"""Prometheus metrics of the simulated engines, with vLLM's names, labels and histogram buckets."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engines.timing import FixedEngine, LiveEngine


# vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)  # fmt: skip
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


class Histogram:
    """A Prometheus histogram that can observe one value many times at once."""

    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += n
        self.sum += value * n
        self.count += n

    def render(self, name: str, labels: str, out: list[str]) -> None:
        cum = 0
        for le, c in zip(self.buckets, self.counts, strict=False):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")


class Metrics:
    """vLLM-named counters, gauges and histograms for one engine."""

    def __init__(self, model_name: str) -> None:
        self.labels = f'model_name="{model_name}"'
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}

    def render(self, engine: LiveEngine | FixedEngine) -> bytes:
        lab = self.labels
        out: list[str] = []

        def one(name: str, kind: str, doc: str, value: float) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            out.append(f"{name}{{{lab}}} {value}")

        one(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            engine.num_running,
        )
        one(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            engine.num_waiting,
        )
        one(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage
        )
        one(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in tokens.",
            engine.prefix_queries,
        )
        one("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in tokens.", engine.prefix_hits)
        one("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.", engine.preemptions)
        one(
            "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", engine.prompt_tokens
        )
        one(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            engine.generation_tokens,
        )
        out.append("# HELP vllm:request_success_total Count of successfully processed requests.")
        out.append("# TYPE vllm:request_success_total counter")
        for reason, count in self.success.items():
            out.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {count}')
        for name, hist, doc in (
            ("vllm:time_to_first_token_seconds", self.ttft, "Histogram of time to first token in seconds."),
            ("vllm:inter_token_latency_seconds", self.itl, "Histogram of inter-token latency in seconds."),
            ("vllm:e2e_request_latency_seconds", self.e2e, "Histogram of e2e request latency in seconds."),
            ("vllm:request_queue_time_seconds", self.queue, "Histogram of time spent in WAITING phase."),
        ):
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} histogram")
            hist.render(name, lab, out)
        out.append("")
        return "\n".join(out).encode()
