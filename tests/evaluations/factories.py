"""Factories of the evaluations tests (a deployment of our own, so we do not lean on another app's tests)."""

from __future__ import annotations

import factory

from deployments.models import Deployment
from evaluations.models import BenchmarkRun
from tests.factories import GpuTypeFactory, ModelVersionFactory


class DeploymentFactory(factory.django.DjangoModelFactory):
    """A simulated Llama-3.1-8B bf16 on 2 × H100 (TP=2), one replica."""

    class Meta:
        model = Deployment

    name = factory.Sequence(lambda n: f"Bench deployment {n}")
    slug = factory.Sequence(lambda n: f"bench-{n}")
    model_version = factory.SubFactory(ModelVersionFactory, label=factory.Sequence(lambda n: f"bf16-{n}"))
    engine_kind = "simulated"
    gpu_type = factory.SubFactory(GpuTypeFactory)
    tensor_parallel_size = 2
    num_replicas = 1
    served_model_name = "paced"
    max_model_len = 8192
    max_num_seqs = 64
    max_num_batched_tokens = 8192


class BenchmarkRunFactory(factory.django.DjangoModelFactory):
    """A finished measured run with a small but complete report."""

    class Meta:
        model = BenchmarkRun

    name = factory.Sequence(lambda n: f"Run {n}")
    kind = "measured"
    mode = "single"
    status = "succeeded"
    progress = 100
    target_kind = "url"
    base_url = "http://127.0.0.1:9/v1"
    model_name = "paced"
    workload = {
        "arrival": {"kind": "constant", "rate": 2.0},
        "input": {"kind": "fixed", "value": 8},
        "output": {"kind": "fixed", "value": 8},
    }
    sla = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "e2e_ms": None}
    stage = {"duration_s": 2.0}
    snapshot = {
        "gpus": 1,
        "gpu_type": "H100 SXM",
        "gpu_usd_per_hour": "2.49",
        "parallelism": "TP=1 × 1 replica",
    }
    results = factory.LazyFunction(lambda: sample_results())
    series = [{"t": 0.0, "kv_usage": 0.1, "running": 1, "waiting": 0, "stage": 1}]
    capacity_rps = 2.0
    token_goodput = 16.0
    attainment = 1.0
    usd_per_mtok = 43.2


def sample_results() -> dict:
    """Results of a real (tiny) stage, built through the same code path as a run's."""
    from evaluations.reports import build_results
    from loadtest import Sla
    from loadtest.metrics import summarize
    from loadtest.records import RequestRecord
    from loadtest.runner import StageResult

    recs = [
        RequestRecord(
            index=i,
            planned_s=i * 0.5,
            sent_s=i * 0.5,
            chunk_s=[i * 0.5 + 0.1 + 0.02 * k for k in range(8)],
            prompt_tokens=8,
            output_tokens=8,
        )
        for i in range(4)
    ]
    summary = summarize(recs, sla=Sla(), offered={"kind": "constant", "rate": 2.0})
    results, _ = build_results(
        stages=[StageResult(summary=summary, series=[])],
        sla=Sla().to_dict(),
        snapshot={"gpus": 1, "gpu_type": "H100 SXM", "gpu_usd_per_hour": "2.49"},
        target_attainment=0.9,
    )
    return results
