"""Plain, framework-free descriptions of models, precisions and GPUs.

The console's catalog converts its rows into these dataclasses so that the memory
estimator, the performance model and the simulator never import Django.
"""

from __future__ import annotations

from dataclasses import dataclass

# Bytes per stored weight, scales included (docs/domain.md: bf16 = 2, fp8/int8 = 1, int4 = 0.5 plus scales).
# W4A16 stores 4-bit weights with one fp16 scale per group of 128: 0.5 + 2/128 bytes per weight.
WEIGHT_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0 + 2.0 / 4096,  # per-channel scales are negligible but present
    "w8a8": 1.0 + 2.0 / 4096,
    "w4a16": 0.5 + 2.0 / 128,
}

# Bytes per KV-cache element. "auto" follows the activation dtype of the precision.
KV_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}

# Precisions whose matmuls run on FP8 tensor cores (use the FP8 peak); the rest use BF16 peak.
FP8_COMPUTE = frozenset({"fp8", "w8a8"})


def kv_element_bytes(*, precision: str, kv_cache_dtype: str) -> float:
    """Bytes per KV element; ``auto`` means the model's activation dtype (16-bit for all we serve)."""
    if kv_cache_dtype in ("", "auto"):
        return 4.0 if precision == "fp32" else 2.0
    try:
        return KV_BYTES[kv_cache_dtype]
    except KeyError as exc:
        raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}") from exc


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture facts of a decoder-only transformer, as published in its config.json."""

    name: str
    params: float  # total parameters, e.g. 8.03e9
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_context: int
    precision: str = "bf16"
    kv_cache_dtype: str = "auto"

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights at this precision (embeddings included, as vLLM loads them)."""
        return self.params * WEIGHT_BYTES[self.precision]

    @property
    def kv_bytes_per_token(self) -> float:
        """``2 (K and V) * layers * kv_heads * head_dim * bytes_per_kv_element`` (docs/domain.md)."""
        return (
            2
            * self.layers
            * self.kv_heads
            * self.head_dim
            * kv_element_bytes(precision=self.precision, kv_cache_dtype=self.kv_cache_dtype)
        )


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Datasheet figures of one accelerator (dense, without sparsity)."""

    name: str
    memory_gib: float
    hbm_bandwidth_gbps: float  # GB/s
    bf16_tflops: float
    fp8_tflops: float | None = None
    interconnect: str = ""
    # Per-direction GPU-to-GPU bandwidth in GB/s (NVLink 4: 450, PCIe Gen4 x16: 32); 0 = unknown.
    # The performance model uses it for tensor-parallel all-reduce time.
    interconnect_gbps: float = 0.0

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 1024**3

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for the precision's matmuls (FP8 falls back to BF16 without FP8 units)."""
        if precision in FP8_COMPUTE and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12
