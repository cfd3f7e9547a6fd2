"""Memory and KV-cache capacity estimates (docs/domain.md, "Memory").

``capacity_tokens = (gpu_mem * tp * gpu_memory_utilization - weights - activation_reserve) / kv_bytes_per_token``,
rounded down to whole PagedAttention blocks of ``block_size`` tokens. Tensor parallelism shards both the
weights and the KV heads over ``tp`` GPUs, so the pooled memory of the group is what counts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from engines.specs import GpuSpec, ModelSpec

GIB = 1024**3
# vLLM profiles a forward pass and keeps its peak activations plus CUDA graphs and the sampler's
# buffers out of the KV pool. ~1 GiB per GPU for 7-8B models and a little more for larger hidden sizes
# matches what vLLM logs as "non-torch memory + activation peak" on H100s.
ACTIVATION_RESERVE_BYTES_PER_GPU = 1.0 * GIB
# The smallest KV pool worth deploying: one full sequence at the model's context, or 4k tokens.
MIN_KV_RESERVE_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The result of fitting one model version on a group of ``tp`` GPUs."""

    gpu: str
    tensor_parallel: int
    gpu_memory_utilization: float
    context_len: int
    block_size: int
    usable_bytes: float
    weight_bytes: float
    activation_reserve_bytes: float
    kv_bytes_per_token: float
    kv_pool_bytes: float
    kv_capacity_tokens: int
    max_concurrent_seqs: int
    fits: bool
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def estimate_memory(
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = 0.9,
    context_len: int | None = None,
    block_size: int = 16,
    min_kv_tokens: int | None = None,
) -> MemoryEstimate:
    """Estimate weights, KV bytes per token, KV capacity and max concurrent sequences.

    A version "fits" when the KV pool left after weights and the activation reserve holds at least
    ``min_kv_tokens`` (default: one sequence of ``context_len`` capped at ``MIN_KV_RESERVE_TOKENS``).
    """
    if tensor_parallel < 1:
        raise ValueError("tensor_parallel must be >= 1")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization must be in (0, 1]")
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    context = context_len or model.max_context
    if context < 1:
        raise ValueError("context_len must be >= 1")
    usable = gpu.memory_bytes * tensor_parallel * gpu_memory_utilization
    weights = model.weight_bytes
    reserve = ACTIVATION_RESERVE_BYTES_PER_GPU * tensor_parallel
    per_token = model.kv_bytes_per_token
    pool = usable - weights - reserve
    blocks = max(0, math.floor(pool / (per_token * block_size))) if pool > 0 else 0
    capacity = blocks * block_size
    blocks_per_seq = math.ceil(context / block_size)
    max_seqs = blocks // blocks_per_seq if blocks_per_seq else 0
    need = min_kv_tokens if min_kv_tokens is not None else min(context, MIN_KV_RESERVE_TOKENS)
    if pool <= 0:
        fits = False
        reason = (
            f"weights {weights / GIB:.1f} GiB + reserve {reserve / GIB:.1f} GiB exceed usable "
            f"{usable / GIB:.1f} GiB"
        )
    elif capacity < need:
        fits = False
        reason = f"KV pool holds {capacity} tokens, fewer than the {need} needed"
    else:
        fits = True
        reason = ""
    return MemoryEstimate(
        gpu=gpu.name,
        tensor_parallel=tensor_parallel,
        gpu_memory_utilization=gpu_memory_utilization,
        context_len=context,
        block_size=block_size,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_reserve_bytes=reserve,
        kv_bytes_per_token=per_token,
        kv_pool_bytes=max(pool, 0.0),
        kv_capacity_tokens=capacity,
        max_concurrent_seqs=max_seqs,
        fits=fits,
        reason=reason,
    )
