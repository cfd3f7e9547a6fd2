"""Default predictions against published figures for Llama-3.1-8B bf16 on one H100 SXM.

Sources of the ranges:
* Single-stream TPOT: vLLM, NVIDIA NIM and Anyscale/Databricks benchmarks of Llama-3(.1)-8B bf16 on one
  H100 SXM report ~6-9 ms per output token at batch 1 (~110-160 tok/s); the memory roofline is
  16.06 GB / 3.35 TB/s = 4.8 ms, so anything under ~5 ms would be impossible and over ~10 ms too pessimistic.
* KV capacity: 80 GiB * 0.9 - 16.06 GB weights - ~1 GiB activations at 128 KiB per token
  (2 * 32 layers * 8 kv heads * 128 dims * 2 bytes) is ~450k tokens (vLLM logs "GPU KV cache size:
  ~450,000 tokens" for this setup), i.e. ~110 concurrent 4k-token sequences.
* Prefill: ~55-65% MFU on 989 TFLOPS puts a 2k-token prefill at ~50-70 ms (vLLM/NVIDIA TTFT at low load).
"""

from __future__ import annotations

from engines.memory import estimate_memory
from engines.perf import PerfModel
from engines.presets import gpu_preset, model_preset
from engines.sim import SimConfig, simulate
from engines.workload import Workload, fixed, fixed_concurrency

LLAMA8B = model_preset("llama-3.1-8b")
H100 = gpu_preset("H100")


def test_single_stream_tpot_within_published_range():
    perf = PerfModel(model=LLAMA8B, gpu=H100)
    tpot = perf.decode_step_time(1, 1024)
    assert 0.006 <= tpot <= 0.009
    # And end to end through the simulator at concurrency 1.
    r = simulate(
        Workload(arrival=fixed_concurrency(1), input=fixed(512), output=fixed(128)), SimConfig(model=LLAMA8B, gpu=H100),
        n=4,
    )  # fmt: skip
    assert 0.006 <= r.summary()["tpot_s"]["median"] <= 0.009


def test_kv_capacity_at_4k_context_within_published_range():
    est = estimate_memory(model=LLAMA8B, gpu=H100, gpu_memory_utilization=0.9, context_len=4096)
    assert LLAMA8B.kv_bytes_per_token == 128 * 1024
    assert 400_000 <= est.kv_capacity_tokens <= 500_000
    assert 100 <= est.max_concurrent_seqs <= 120


def test_prefill_of_2k_tokens_within_published_range():
    perf = PerfModel(model=LLAMA8B, gpu=H100)
    assert 0.045 <= perf.prefill_time(2048) <= 0.075
