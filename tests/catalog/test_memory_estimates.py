"""The memory estimator against hand-computed figures (docs/domain.md formulas)."""

from dataclasses import replace

import pytest

from engines.memory import GIB, estimate_memory
from engines.specs import GpuSpec, ModelSpec

LLAMA_8B = ModelSpec(
    name="Llama-3.1-8B",
    params=8.03e9,
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    max_context=131072,
)
H100 = GpuSpec(name="H100", memory_gib=80, hbm_bandwidth_gbps=3350, bf16_tflops=989, fp8_tflops=1979)


def test_kv_bytes_per_token_follow_layers_kv_heads_head_dim_and_dtype():
    # 2 (K,V) * 32 layers * 8 KV heads * 128 head dim * 2 bytes = 131072 bytes = 128 KiB per token
    assert LLAMA_8B.kv_bytes_per_token == 131072
    fp8_kv = replace(LLAMA_8B, kv_cache_dtype="fp8")
    assert fp8_kv.kv_bytes_per_token == 65536


def test_llama_8b_bf16_on_one_h100_capacity_matches_hand_computation():
    est = estimate_memory(
        model=LLAMA_8B, gpu=H100, tensor_parallel=1, gpu_memory_utilization=0.9, context_len=4096
    )
    usable = 80 * GIB * 0.9
    pool = usable - 8.03e9 * 2 - 1 * GIB
    expected_blocks = int(pool // (131072 * 16))
    assert est.fits
    assert est.kv_capacity_tokens == expected_blocks * 16
    assert est.max_concurrent_seqs == expected_blocks // (4096 // 16)
    # roughly 430k tokens, ~105 sequences of 4k: the order vLLM logs for this model on an H100
    assert 400_000 < est.kv_capacity_tokens < 470_000


def test_70b_bf16_does_not_fit_one_h100_but_fits_two():
    llama_70b = ModelSpec(
        name="Llama-3.1-70B",
        params=70.55e9,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_context=131072,
    )
    one = estimate_memory(model=llama_70b, gpu=H100, tensor_parallel=1)
    two = estimate_memory(model=llama_70b, gpu=H100, tensor_parallel=2, context_len=8192)
    assert not one.fits and "exceed" in one.reason
    assert two.fits and two.kv_capacity_tokens > 8192


def test_w4a16_weights_are_about_a_quarter_of_bf16():
    int4 = replace(LLAMA_8B, precision="w4a16")
    assert int4.weight_bytes == pytest.approx(8.03e9 * (0.5 + 2 / 128))
    assert int4.weight_bytes < LLAMA_8B.weight_bytes / 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tensor_parallel": 0},
        {"gpu_memory_utilization": 0},
        {"gpu_memory_utilization": 1.5},
        {"block_size": 0},
    ],
)
def test_impossible_inputs_raise(kwargs):
    with pytest.raises(ValueError):
        estimate_memory(model=LLAMA_8B, gpu=H100, **kwargs)
