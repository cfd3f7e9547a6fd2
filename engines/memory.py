"""Memory and KV-cache capacity as vLLM computes them (ADR 0021, docs/capacity.md).

We follow vLLM V1's accounting (``gpu_worker.determine_available_memory`` and ``kv_cache_utils``, read
in vLLM 0.32), per GPU of a tensor-parallel group:

    requested  = total_memory × gpu_memory_utilization          (TOTAL memory, not free memory)
    non_kv     = weights + activation peak + non-torch memory [+ CUDA graphs, vLLM ≥ 0.21]
    kv_pool    = requested − non_kv
    blocks     = floor(kv_pool / (block_size × KV bytes per token on this GPU))
    tokens     = blocks × block_size                             ("GPU KV cache size: N tokens")

The CUDA context is created before vLLM's first memory snapshot, so it is not taken from the pool; it
sits in the ``1 − gpu_memory_utilization`` headroom with the driver's own reservation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from engines.specs import GpuSpec, ModelSpec

GIB = 1024**3
MIB = 1024**2
# Memory vLLM's profile finds outside torch's allocator (cuBLAS/cuDNN workspaces, NCCL buffers once TP>1),
# measured from its first snapshot. vLLM's logs show 0.03–0.43 GiB on one GPU ("non_torch_memory").
NON_TORCH_BYTES = 0.35 * GIB
NCCL_BYTES_PER_GPU = 0.5 * GIB  # extra non-torch memory per GPU when tensor_parallel > 1
# CUDA graph pool vLLM ≥ 0.21 subtracts from the pool (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default
# on); its logs estimate 0.13–0.52 GiB for dense models, 1–2 GiB for large MoE models. Older versions
# capture graphs after sizing the pool, in the 1 − gpu_memory_utilization headroom.
CUDA_GRAPH_BYTES = 0.5 * GIB


@dataclass(frozen=True, slots=True)
class Accounting:
    """How one generation of vLLM sizes the KV pool; the estimate follows ``CURRENT`` unless told."""

    key: str
    label: str
    # fp32 copies of the [max_num_seqs, vocab] logits the sampler warm-up keeps alive at its peak
    sampler_logit_copies: int
    cuda_graphs_in_profile: bool


# V1's top-k/top-p warm-up holds logits, sorted values, int64 sort indices (2) and the softmax and its
# cumulative sum: 6 copies. vLLM's log for a 248k-vocab model at max_num_seqs 1024 shows 5.66 GiB of peak
# activation, i.e. 6.0 copies (https://github.com/vllm-project/vllm/issues/50722).
# V0's sampler also kept log-probabilities and per-sequence tensors: its logs show 9.8 copies
# (Llama-3-8B, https://github.com/vllm-project/vllm/pull/10511) and 9.6 (Qwen2.5-7B, issue #13882).
ACCOUNTINGS: dict[str, Accounting] = {
    a.key: a
    for a in (
        Accounting("v0", "vLLM V0 worker (≤ 0.7): worker.determine_num_available_blocks", 10, False),
        Accounting(
            "v1", "vLLM V1 0.8–0.20: gpu_worker.determine_available_memory + kv_cache_utils", 6, False
        ),
        Accounting(
            "v1-graphs",
            "vLLM V1 0.21–0.32: gpu_worker.determine_available_memory (CUDA graphs profiled) + kv_cache_utils",
            6,
            True,
        ),
    )
}
CURRENT = ACCOUNTINGS["v1-graphs"]
ACTIVATION_BYTES = 2  # bf16/fp16 activations


def vllm_serve_defaults(*, gpu: GpuSpec) -> tuple[int, int]:
    """``vllm serve``'s ``(max_num_batched_tokens, max_num_seqs)`` for a GPU (``EngineArgs.get_batch_defaults``).

    160 GiB and up: 16384 / 1024; 70 GiB and up except A100: 8192 / 1024; the rest: 2048 / 256.
    """
    total = gpu.profiled_total_bytes
    if total >= 160 * GIB:
        return 16384, 1024
    if total >= 70 * GIB and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


# The smallest KV pool worth deploying: one full sequence at the model's context, or 4k tokens.
MIN_KV_RESERVE_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The result of fitting one model version on a group of ``tp`` GPUs.

    Byte figures are for the whole group (sum over its GPUs) unless their name says ``per_gpu``;
    ``kv_bytes_per_token`` is the model's total over all GPUs.
    """

    gpu: str
    tensor_parallel: int
    gpu_memory_utilization: float
    context_len: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    memory_per_gpu_bytes: float
    memory_source: str
    usable_bytes: float
    weight_bytes: float
    weight_embedding_bytes: float
    weight_layer_bytes: float
    weight_lm_head_bytes: float
    non_torch_bytes: float
    activation_peak_bytes: float
    cuda_graph_bytes: float
    activation_reserve_bytes: float  # non-torch + activation peak + CUDA graphs
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    kv_pool_bytes: float
    kv_pool_shortfall_bytes: float  # negative when weights and reserve exceed the requested memory
    kv_blocks: int
    kv_capacity_tokens: int
    max_concurrent_seqs: int
    fits: bool
    reason: str
    accounting: str = CURRENT.label

    def as_dict(self) -> dict:
        return asdict(self)

    def breakdown(self) -> list[tuple[str, float]]:
        """Where the requested memory of the group goes, in bytes, for the pages' tables."""
        return [
            ("weights: embeddings", self.weight_embedding_bytes),
            ("weights: decoder layers", self.weight_layer_bytes),
            ("weights: lm_head", self.weight_lm_head_bytes),
            ("non-torch (cuBLAS, NCCL)", self.non_torch_bytes),
            ("activation peak", self.activation_peak_bytes),
            ("CUDA graphs", self.cuda_graph_bytes),
            ("KV pool", self.kv_pool_bytes),
        ]


def kv_bytes_per_token_per_gpu(*, model: ModelSpec, tensor_parallel: int) -> float:
    """KV bytes one GPU holds per token: vLLM shards KV heads over TP ranks, replicating them past kv_heads."""
    kv_heads_per_gpu = max(1, model.kv_heads // tensor_parallel)
    return model.kv_bytes_per_token / model.kv_heads * kv_heads_per_gpu


def kv_blocks_for_pool(
    *, model: ModelSpec, tensor_parallel: int, pool_bytes_per_gpu: float, block_size: int
) -> int:
    """Whole blocks of ``block_size`` tokens that fit a KV pool of one GPU (``kv_cache_utils``)."""
    if pool_bytes_per_gpu <= 0:
        return 0
    per_token = kv_bytes_per_token_per_gpu(model=model, tensor_parallel=tensor_parallel)
    return math.floor(pool_bytes_per_gpu / (per_token * block_size))


def activation_peak_per_gpu(
    *,
    model: ModelSpec,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    accounting: Accounting = CURRENT,
) -> float:
    """Peak of vLLM's profile run on one GPU: the larger of the MLP at ``max_num_batched_tokens`` and the
    sampler warm-up on ``max_num_seqs`` rows of logits (with the hidden states still held)."""
    h = model.hidden_size
    i = model._mlp_intermediate()
    tokens = max_num_batched_tokens
    # gate_up output (2I/tp) + activation output (I/tp) + residual, input and output hidden states (3H)
    mlp = tokens * (3 * i / tensor_parallel + 3 * h) * ACTIVATION_BYTES
    logits = max_num_seqs * model.vocab_size * 4
    sampler = tokens * h * ACTIVATION_BYTES + logits * accounting.sampler_logit_copies
    return max(mlp, sampler)


def estimate_memory(
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
    block_size: int = 16,
    min_kv_tokens: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool = False,
    accounting: str = CURRENT.key,
    non_torch_bytes_per_gpu: float | None = None,
) -> MemoryEstimate:
    """Estimate weights, the profile's reserve, the KV pool and its capacity in whole blocks.

    A version "fits" when the KV pool holds at least ``min_kv_tokens`` (default: one sequence of
    ``context_len`` capped at ``MIN_KV_RESERVE_TOKENS``). ``accounting`` picks an older vLLM's rules
    (``ACCOUNTINGS``): before 0.21 the pool was sized before CUDA graphs were captured. Unknown precisions or KV dtypes raise
    ``UnknownPrecisionError`` / ``UnknownKvCacheDtypeError`` naming them. ``max_num_batched_tokens`` and
    ``max_num_seqs`` default to what ``vllm serve`` picks for the GPU.
    """
    if tensor_parallel < 1:
        raise ValueError("tensor_parallel must be >= 1")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization must be in (0, 1]")
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    if gpu.memory_gib <= 0:
        raise ValueError(f"GPU {gpu.name!r} has no memory figure")
    context = context_len or model.max_context
    if context < 1:
        raise ValueError("context_len must be >= 1")
    try:
        rules = ACCOUNTINGS[accounting]
    except KeyError as exc:
        raise ValueError(f"unknown vLLM accounting {accounting!r}: one of {', '.join(ACCOUNTINGS)}") from exc
    default_batched, default_seqs = vllm_serve_defaults(gpu=gpu)
    batched = max_num_batched_tokens if max_num_batched_tokens is not None else default_batched
    seqs = max_num_seqs if max_num_seqs is not None else default_seqs
    if batched < 1:
        raise ValueError("max_num_batched_tokens must be >= 1")
    if seqs < 1:
        raise ValueError("max_num_seqs must be >= 1")
    tp = tensor_parallel

    parts = model.weight_parts()  # raises UnknownPrecisionError
    per_token_total = model.kv_bytes_per_token  # raises UnknownKvCacheDtypeError
    per_token_gpu = kv_bytes_per_token_per_gpu(model=model, tensor_parallel=tp)

    requested_gpu = math.ceil(gpu.profiled_total_bytes * gpu_memory_utilization)
    weights_gpu = (parts.embeddings + parts.layers + parts.lm_head) / tp + parts.final_norm
    non_torch_gpu = (
        non_torch_bytes_per_gpu
        if non_torch_bytes_per_gpu is not None
        else NON_TORCH_BYTES + (NCCL_BYTES_PER_GPU if tp > 1 else 0.0)
    )
    act_gpu = activation_peak_per_gpu(
        model=model, tensor_parallel=tp, max_num_batched_tokens=batched, max_num_seqs=seqs, accounting=rules
    )
    graphs_gpu = CUDA_GRAPH_BYTES if rules.cuda_graphs_in_profile and not enforce_eager else 0.0
    pool_gpu = requested_gpu - weights_gpu - non_torch_gpu - act_gpu - graphs_gpu
    blocks = kv_blocks_for_pool(
        model=model, tensor_parallel=tp, pool_bytes_per_gpu=pool_gpu, block_size=block_size
    )
    capacity = blocks * block_size
    blocks_per_seq = math.ceil(context / block_size)
    max_seqs = blocks // blocks_per_seq if blocks_per_seq else 0
    need = min_kv_tokens if min_kv_tokens is not None else min(context, MIN_KV_RESERVE_TOKENS)
    reserve_gpu = non_torch_gpu + act_gpu + graphs_gpu
    if pool_gpu <= 0:
        fits = False
        reason = (
            f"weights {weights_gpu / GIB:.2f} GiB + reserve {reserve_gpu / GIB:.2f} GiB per GPU exceed the "
            f"{requested_gpu / GIB:.2f} GiB that gpu_memory_utilization {gpu_memory_utilization:g} requests"
        )
    elif capacity < need:
        fits = False
        reason = f"KV pool holds {capacity} tokens, fewer than the {need} needed"
    else:
        fits = True
        reason = ""
    return MemoryEstimate(
        gpu=gpu.name,
        tensor_parallel=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        context_len=context,
        block_size=block_size,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        memory_per_gpu_bytes=gpu.profiled_total_bytes,
        memory_source=gpu.memory_source,
        usable_bytes=requested_gpu * tp,
        weight_bytes=weights_gpu * tp,
        weight_embedding_bytes=parts.embeddings,
        weight_layer_bytes=parts.layers + parts.final_norm * tp,
        weight_lm_head_bytes=parts.lm_head,
        non_torch_bytes=non_torch_gpu * tp,
        activation_peak_bytes=act_gpu * tp,
        cuda_graph_bytes=graphs_gpu * tp,
        activation_reserve_bytes=reserve_gpu * tp,
        kv_bytes_per_token=per_token_total,
        kv_bytes_per_token_per_gpu=per_token_gpu,
        kv_pool_bytes=max(pool_gpu, 0.0) * tp,
        kv_pool_shortfall_bytes=min(pool_gpu, 0.0) * tp,
        kv_blocks=blocks,
        kv_capacity_tokens=capacity,
        max_concurrent_seqs=max_seqs,
        fits=fits,
        reason=reason,
        accounting=rules.label,
    )
