"""A short harness run against real vLLM on CPU serving the tiny model: the report is complete.

The server is the ``tiny-vllm`` group's shared one (``tests/support/vllm.py``).
"""

from __future__ import annotations

import pytest

from engines.workload import Workload, constant, uniform
from evaluations.reports import build_results
from loadtest import Sla, StageConfig, Target, run_stage
from loadtest.runner import StageResult
from tests.support.vllm import MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("tiny-vllm")]


def test_short_run_against_vllm_cpu_produces_a_complete_report(tiny_vllm):
    wl = Workload(arrival=constant(2), input=uniform(16, 48), output=uniform(8, 24))
    res: StageResult = run_stage(
        target=Target(base_url=tiny_vllm.openai_base_url, model=MODEL_NAME, request_timeout_s=120),
        workload=wl,
        stage=StageConfig(num_requests=12, warmup_requests=2, scrape_interval_s=0.5),
        sla=Sla(ttft_ms=5000, tpot_ms=1000),
    )
    s = res.summary
    assert s["failed"] == 0, s["error_samples"]
    assert s["usage_missing"] == 0  # vLLM sends usage with stream_options.include_usage
    assert 12 * 8 <= s["output_tokens"] <= 12 * 24  # ignore_eos: exact lengths from the workload
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert s[key]["n"] > 0 and all(s[key][p] is not None for p in ("mean", "p50", "p90", "p95", "p99"))
    assert (
        s["request_throughput"] > 0 and s["output_token_throughput"] > 0 and s["total_token_throughput"] > 0
    )
    assert 0 <= s["attainment"] <= 1
    # vLLM's own Prometheus metrics were scraped under their real names.
    assert res.series and all({"running", "waiting", "kv_usage"} <= set(x) for x in res.series)
    results, series = build_results(
        stages=[res], sla=Sla().to_dict(), snapshot={"gpus": 0}, target_attainment=0.9
    )
    assert results["stages"][0]["histograms"]["ttft_ms"]["counts"] and series
