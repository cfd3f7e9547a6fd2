"""The roofline step-time formulas (engines.perf)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from engines.perf import DEFAULT_EFFICIENCY, GENERIC_EFFICIENCY, Efficiency, PerfModel, default_efficiency
from engines.presets import GPUS, MODELS, gpu_preset, model_preset

LLAMA8B = model_preset("llama-3.1-8b")
H100 = gpu_preset("H100")


def test_decode_step_is_weights_plus_kv_over_bandwidth_plus_overhead():
    eff = Efficiency(mfu=0.5, mbu=0.8, step_overhead_s=0.001)
    perf = PerfModel(model=LLAMA8B, gpu=H100, efficiency=eff)
    batch, ctx = 8, 1000
    expected_mem = (LLAMA8B.weight_bytes + LLAMA8B.kv_bytes_per_token * batch * ctx) / (3350e9 * 0.8)
    assert perf.decode_step_time(batch, ctx) == pytest.approx(expected_mem + 0.001, rel=1e-12)
    cost = perf.step_cost(batch, batch * ctx, batch * ctx, batch)
    assert cost.bound == "memory"


def test_prefill_is_compute_bound_with_the_causal_attention_term():
    eff = Efficiency(mfu=0.5, mbu=0.8, step_overhead_s=0.0)
    perf = PerfModel(model=LLAMA8B, gpu=H100, efficiency=eff)
    n = 4096
    attn = n * (n + 1) / 2
    flops = 2 * LLAMA8B.params * n + 4 * LLAMA8B.layers * LLAMA8B.attention_heads * LLAMA8B.head_dim * attn
    assert perf.prefill_time(n) == pytest.approx(flops / (989e12 * 0.5), rel=1e-12)
    assert perf.step_cost(n, attn, n, 1).bound == "compute"


def test_chunked_prefill_costs_at_least_the_single_pass():
    perf = PerfModel(model=LLAMA8B, gpu=H100)
    assert perf.prefill_time(8192, chunk=2048) > perf.prefill_time(8192)


def test_fp8_uses_fp8_peak_and_reads_fp8_linears_with_16bit_embeddings():
    fp8 = dataclasses.replace(LLAMA8B, precision="fp8")
    eff = Efficiency(mfu=0.5, mbu=0.8, step_overhead_s=0.0)
    bf = PerfModel(model=LLAMA8B, gpu=H100, efficiency=eff)
    f8 = PerfModel(model=fp8, gpu=H100, efficiency=eff)
    assert f8.prefill_time(8192) < 0.55 * bf.prefill_time(8192)
    # Not half: embeddings and lm_head stay 16-bit (ADR 0021), about 1 GB of Llama-3.1-8B's 8.5.
    ratio = fp8.weight_bytes / LLAMA8B.weight_bytes
    assert 0.55 < ratio < 0.58
    assert f8.decode_step_time(1, 100) == pytest.approx(bf.decode_step_time(1, 100) * ratio, rel=0.01)


def test_tensor_parallel_divides_work_and_adds_allreduce():
    eff = Efficiency(mfu=0.5, mbu=0.8, step_overhead_s=0.0, tp_comm_efficiency=0.5, allreduce_latency_s=0.0)
    one = PerfModel(model=LLAMA8B, gpu=H100, efficiency=eff)
    two = PerfModel(model=LLAMA8B, gpu=H100, tensor_parallel=2, efficiency=eff)
    tokens = 1
    comm = 2 * LLAMA8B.layers * tokens * LLAMA8B.hidden_size * 2 * (2 * 1 / 2) / (450e9 * 0.5)
    assert two.decode_step_time(1, 100) == pytest.approx(one.decode_step_time(1, 100) / 2 + comm, rel=1e-9)


def test_defaults_exist_for_every_preset_gpu_and_fall_back_to_generic():
    for name in GPUS:
        assert default_efficiency(name) is DEFAULT_EFFICIENCY[name]
    assert default_efficiency("h100") is DEFAULT_EFFICIENCY["H100"]
    assert default_efficiency("Some New Accelerator") is GENERIC_EFFICIENCY
    assert set(MODELS) >= {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-32b", "mistral-7b"}


def test_efficiency_rejects_nonsense():
    with pytest.raises(ValueError):
        Efficiency(mfu=0)
    with pytest.raises(ValueError):
        Efficiency(mbu=1.5)
    with pytest.raises(ValueError):
        Efficiency(step_overhead_s=-1)


def test_empty_step_takes_no_time():
    perf = PerfModel(model=LLAMA8B, gpu=H100)
    assert perf.step_time(0, 0, 0, 0) == 0.0
    assert math.isfinite(perf.step_time(1, 1, 1, 1))
