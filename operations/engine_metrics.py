"""The engines' own metrics, as vLLM exposes them on ``/metrics`` (Prometheus text), read with
``prometheus_client``'s parser: a sample is the few numbers the diagnosis needs, summed over label
sets (one per engine core); two samples give rates and means over the time between them.

Names are vLLM's (v1): gauges ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc``; counters ``vllm:num_preemptions``, ``vllm:prefix_cache_queries``,
``vllm:prefix_cache_hits``, ``vllm:prompt_tokens``, ``vllm:generation_tokens`` (``_total`` in the
text); histograms ``vllm:request_queue_time_seconds``, ``vllm:request_prefill_time_seconds``,
``vllm:time_to_first_token_seconds`` (their ``_sum`` and ``_count``). No Django here.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

GAUGES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_usage",
}
COUNTERS = {
    "vllm:num_preemptions": "preemptions",
    "vllm:prefix_cache_queries": "prefix_queries",
    "vllm:prefix_cache_hits": "prefix_hits",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens": "generation_tokens",
}
HISTOGRAMS = {
    "vllm:request_queue_time_seconds": "queue",
    "vllm:request_prefill_time_seconds": "prefill",
    "vllm:time_to_first_token_seconds": "ttft",
}


def parse(text: str) -> dict[str, float]:
    """The sample's numbers; a metric the engine does not export is absent (not zero)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name
        if name in GAUGES:
            key = GAUGES[name]
            values = [s.value for s in family.samples if s.name == name]
            if values:
                # KV usage: the fullest engine core is what preempts; the rest add up.
                out[key] = max(values) if key == "kv_usage" else sum(values)
        elif name in COUNTERS:
            values = [s.value for s in family.samples if s.name in (name + "_total", name)]
            if values:
                out[COUNTERS[name]] = sum(values)
        elif name in HISTOGRAMS:
            key = HISTOGRAMS[name]
            for suffix in ("sum", "count"):
                values = [s.value for s in family.samples if s.name == f"{name}_{suffix}"]
                if values:
                    out[f"{key}_{suffix}"] = sum(values)
    return out


def _delta(a: dict, b: dict, key: str) -> float | None:
    if key not in a or key not in b:
        return None
    d = b[key] - a[key]
    return d if d >= 0 else None  # a counter that went down: the engine restarted


def interval(a: dict, b: dict, seconds: float) -> dict:
    """What happened between two samples ``seconds`` apart: means, rates, hit rates."""
    out: dict[str, float | None] = {"seconds": seconds}
    for key in ("queue", "prefill", "ttft"):
        s, c = _delta(a, b, f"{key}_sum"), _delta(a, b, f"{key}_count")
        out[f"{key}_mean_s"] = (s / c) if s is not None and c else None
    pre = _delta(a, b, "preemptions")
    out["preemptions_per_s"] = pre / seconds if pre is not None and seconds > 0 else None
    q, h = _delta(a, b, "prefix_queries"), _delta(a, b, "prefix_hits")
    out["prefix_hit_rate"] = (h / q) if q and h is not None else None
    out["kv_usage"] = b.get("kv_usage")
    out["waiting"] = b.get("waiting")
    out["running"] = b.get("running")
    return out
