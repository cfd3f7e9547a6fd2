"""The memory estimator against hand-computed figures (ADR 0021, docs/capacity.md).

The figures here are written out by hand from the model's config.json and vLLM V1's accounting; the
outside reference (vLLM's own logs) is tests/catalog/test_kv_reference.py.
"""

import math
from dataclasses import replace

import pytest

from engines.memory import GIB, estimate_memory
from engines.specs import GpuSpec, ModelSpec, UnknownKvCacheDtypeError, UnknownPrecisionError

LLAMA_8B = ModelSpec(
    name="Llama-3.1-8B",
    params=8_030_261_248,
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    max_context=131072,
    intermediate_size=14336,
)
# What the driver reports (nvidia-smi 81559 MiB); CUDA's own total is 79.22 GiB (vLLM's log).
H100 = GpuSpec(
    name="H100",
    memory_gib=81559 / 1024,
    hbm_bandwidth_gbps=3350,
    bf16_tflops=989,
    fp8_tflops=1979,
    cuda_total_gib=79.22,
)
EMBED = 128256 * 4096  # one vocab x hidden matrix: the embeddings, and again the untied lm_head
LINEAR_PER_LAYER = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336  # q, o, k, v, gate, up, down
NORMS = 32 * 2 * 4096 + 4096


def test_kv_bytes_per_token_follow_layers_kv_heads_head_dim_and_dtype():
    # 2 (K,V) * 32 layers * 8 KV heads * 128 head dim * 2 bytes = 131072 bytes = 128 KiB per token
    assert LLAMA_8B.kv_bytes_per_token == 131072
    fp8_kv = replace(LLAMA_8B, kv_cache_dtype="fp8")
    assert fp8_kv.kv_bytes_per_token == 65536


def test_llama_8b_bf16_on_one_h100_follows_vllm_v1_accounting_by_hand():
    est = estimate_memory(
        model=LLAMA_8B, gpu=H100, tensor_parallel=1, gpu_memory_utilization=0.9, context_len=4096
    )
    weights = (EMBED * 2 + LINEAR_PER_LAYER * 32 + NORMS) * 2
    assert weights == 16_060_522_496  # 8,030,261,248 params x 2 bytes: config.json adds up
    requested = math.ceil(79.22 * GIB * 0.9)  # utilization applies to CUDA's TOTAL memory
    # vllm serve on an H100 (79 GiB, not an A100): max_num_batched_tokens 8192, max_num_seqs 1024.
    # Profile peak: the sampler warm-up (1024 rows x 128256 vocab x fp32 x 6 copies + hidden states at
    # 8192 tokens) outweighs the MLP at 8192 tokens (8192 x (3 x 14336 + 3 x 4096) x 2 bytes).
    activation = max(8192 * 4096 * 2 + 1024 * 128256 * 4 * 6, 8192 * (3 * 14336 + 3 * 4096) * 2)
    assert activation == 8192 * 4096 * 2 + 1024 * 128256 * 4 * 6
    pool = requested - weights - 0.35 * GIB - activation - 0.5 * GIB  # non-torch, CUDA graphs
    blocks = int(pool // (131072 * 16))
    assert est.fits
    assert (est.max_num_batched_tokens, est.max_num_seqs) == (8192, 1024)
    assert est.weight_bytes == weights
    assert est.activation_peak_bytes == activation
    assert est.kv_blocks == blocks and est.kv_capacity_tokens == blocks * 16
    assert est.max_concurrent_seqs == blocks // (4096 // 16)


def test_breakdown_adds_up_to_the_requested_memory():
    est = estimate_memory(model=LLAMA_8B, gpu=H100, tensor_parallel=2)
    parts = dict(est.breakdown())
    assert sum(parts.values()) == pytest.approx(est.usable_bytes, rel=1e-9)
    assert parts["weights: embeddings"] == parts["weights: lm_head"] == EMBED * 2


def test_tied_embeddings_are_held_once():
    tied = replace(LLAMA_8B, tie_word_embeddings=True)
    assert LLAMA_8B.weight_bytes - tied.weight_bytes == EMBED * 2
    assert tied.weight_parts().lm_head == 0


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
    # max_num_seqs 256 as a deployment sets it: vllm serve's 1024 on an H100 makes the sampler warm-up
    # alone take 3 GiB per GPU, which leaves 70B bf16 on two H100s under 8k tokens of KV.
    two = estimate_memory(model=llama_70b, gpu=H100, tensor_parallel=2, context_len=8192, max_num_seqs=256)
    assert not one.fits and "exceed" in one.reason
    assert two.fits and two.kv_capacity_tokens > 8192


@pytest.mark.parametrize(
    "precision,per_weight,per_layer_extra",
    [
        # FP8 / INT8 W8A8: 1 byte per weight + one fp32 scale per output channel of each linear layer
        ("fp8", 1.0, 4 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)),
        ("w8a8", 1.0, 4 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)),
        # AWQ: 4 bits + fp16 scale + packed 4-bit zero point per group of 128 inputs
        ("awq", 0.5 + 2.5 / 128, 0),
        # GPTQ: as AWQ, plus an int32 g_idx per input row of each linear layer
        ("gptq", 0.5 + 2.5 / 128, 4 * (4096 * 4 + 4096 * 2 + 14336)),
        # INT4 round-to-nearest, symmetric: 4 bits + fp16 scale per group of 128
        ("w4a16", 0.5 + 2 / 128, 0),
    ],
)
def test_quantization_packs_decoder_linears_and_keeps_embeddings_lm_head_and_norms_16bit(
    precision, per_weight, per_layer_extra
):
    q = replace(LLAMA_8B, precision=precision)
    expected = (LINEAR_PER_LAYER * per_weight + per_layer_extra) * 32 + (EMBED * 2 + NORMS) * 2
    assert q.weight_bytes == pytest.approx(expected, rel=1e-12)
    parts = q.weight_parts()
    assert parts.embeddings == parts.lm_head == EMBED * 2  # never quantized


def test_fp8_llama_8b_is_not_half_of_bf16():
    # The old estimate quantized embeddings and lm_head too and gave 8.03 GB (7.48 GiB): 11.5 % short.
    fp8 = replace(LLAMA_8B, precision="fp8")
    assert fp8.weight_bytes / GIB == pytest.approx(8.46, abs=0.01)


@pytest.mark.parametrize("precision", ["int3", "nf4", "bnb", ""])
def test_an_unknown_precision_is_refused_by_name(precision):
    with pytest.raises(UnknownPrecisionError, match=repr(precision)):
        estimate_memory(model=replace(LLAMA_8B, precision=precision), gpu=H100)


@pytest.mark.parametrize("kv", ["int8", "fp4", "q8_0"])
def test_an_unknown_kv_cache_dtype_is_refused_by_name(kv):
    with pytest.raises(UnknownKvCacheDtypeError, match=repr(kv)):
        estimate_memory(model=replace(LLAMA_8B, kv_cache_dtype=kv), gpu=H100)


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
