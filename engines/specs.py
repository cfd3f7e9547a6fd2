"""Plain, framework-free descriptions of models, precisions and GPUs.

The console's catalog converts its rows into these dataclasses so that the memory
estimator, the performance model and the simulator never import Django.
"""

from __future__ import annotations

from dataclasses import dataclass

# What each precision stores per weight of a decoder layer's linear layers (q/k/v/o, gate/up/down),
# scales and zero points included. Embeddings, ``lm_head``, norms and biases stay 16-bit in every
# scheme vLLM loads (ADR 0021): FP8/INT8 W8A8 checkpoints keep them out of the quantized modules,
# AWQ/GPTQ/INT4 pack only ``nn.Linear`` layers of the decoder.
#   fp8 / w8a8: 1 byte per weight + one fp32 scale per output channel (accounted per linear layer)
#   awq:   4-bit weights + fp16 scale and packed 4-bit zero point per group of 128 inputs
#   gptq:  as awq, plus an int32 ``g_idx`` per input row (accounted per linear layer)
#   w4a16: INT4 round-to-nearest / compressed-tensors symmetric: 4-bit + fp16 scale per group of 128
GROUP_SIZE = 128
WEIGHT_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "w8a8": 1.0,
    "awq": 0.5 + (2.0 + 0.5) / GROUP_SIZE,
    "gptq": 0.5 + (2.0 + 0.5) / GROUP_SIZE,
    "w4a16": 0.5 + 2.0 / GROUP_SIZE,
}
# Extra bytes per linear layer: fp32 per-output-channel scales (fp8/w8a8), int32 g_idx per input row (gptq).
PER_OUTPUT_CHANNEL_BYTES: dict[str, float] = {"fp8": 4.0, "w8a8": 4.0}
PER_INPUT_ROW_BYTES: dict[str, float] = {"gptq": 4.0}
# Bytes of what stays unquantized (embeddings, lm_head, norms, biases): the activation dtype.
UNQUANTIZED_BYTES: dict[str, float] = {"fp32": 4.0}
QUANTIZED_PRECISIONS = frozenset({"fp8", "w8a8", "awq", "gptq", "w4a16"})


class UnknownPrecisionError(ValueError):
    """A weight precision / quantization method the estimator has no byte model for."""


class UnknownKvCacheDtypeError(ValueError):
    """A KV-cache dtype the estimator has no byte size for."""


def weight_element_bytes(precision: str) -> float:
    """Bytes per quantized linear weight, or a named error for a precision we do not model."""
    try:
        return WEIGHT_BYTES[precision]
    except KeyError as exc:
        known = ", ".join(sorted(WEIGHT_BYTES))
        raise UnknownPrecisionError(
            f"unknown weight precision {precision!r}: the memory estimate knows {known}"
        ) from exc


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


@dataclass(frozen=True, slots=True)
class WeightParts:
    """Bytes of a model's weights by part, for the whole model (divide by TP for one GPU)."""

    embeddings: float
    layers: float  # decoder layers: quantized linear layers + 16-bit norms and biases
    lm_head: float  # 0 when tied to the embeddings (vLLM shares the tensor)
    final_norm: float

    @property
    def total(self) -> float:
        return self.embeddings + self.layers + self.lm_head + self.final_norm


def kv_element_bytes(*, precision: str, kv_cache_dtype: str) -> float:
    """Bytes per KV element; ``auto`` means the model's activation dtype (16-bit for all we serve)."""
    if kv_cache_dtype in ("", "auto"):
        return 4.0 if precision == "fp32" else 2.0
    try:
        return KV_BYTES[kv_cache_dtype]
    except KeyError as exc:
        known = ", ".join(["auto", *sorted(KV_BYTES)])
        raise UnknownKvCacheDtypeError(
            f"unknown KV-cache dtype {kv_cache_dtype!r}: the memory estimate knows {known}"
        ) from exc


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
    # config.json ``intermediate_size``; None derives it from ``params`` (gated MLP assumed).
    intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 has q/k/v biases

    def _mlp_intermediate(self) -> float:
        """``intermediate_size``, or what ``params`` leave for a gated MLP after everything else."""
        if self.intermediate_size:
            return float(self.intermediate_size)
        h = self.hidden_size
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        per_layer = (self.params - embed - h) / self.layers
        attn = 2 * h * self.attention_heads * self.head_dim + 2 * h * self.kv_heads * self.head_dim
        return max(0.0, (per_layer - attn - 2 * h - self._bias_params()) / (3 * h))

    def _bias_params(self) -> int:
        if not self.attention_bias:
            return 0
        return (self.attention_heads + 2 * self.kv_heads) * self.head_dim

    def weight_parts(self) -> WeightParts:
        """Bytes by part at this precision: only decoder linear layers are quantized (ADR 0021)."""
        quant = weight_element_bytes(self.precision)
        half = UNQUANTIZED_BYTES.get(self.precision, 2.0)
        h, i = self.hidden_size, self._mlp_intermediate()
        q_out, kv_out = self.attention_heads * self.head_dim, self.kv_heads * self.head_dim
        # (in_features, out_features) of every linear layer of one decoder layer
        linears = [(h, q_out), (h, kv_out), (h, kv_out), (q_out, h), (h, i), (h, i), (i, h)]
        per_layer = sum(n_in * n_out for n_in, n_out in linears) * quant
        per_layer += sum(n_out for _, n_out in linears) * PER_OUTPUT_CHANNEL_BYTES.get(self.precision, 0.0)
        per_layer += sum(n_in for n_in, _ in linears) * PER_INPUT_ROW_BYTES.get(self.precision, 0.0)
        per_layer += (2 * h + self._bias_params()) * half  # two RMSNorms (+ q/k/v biases)
        embed = self.vocab_size * h * half
        return WeightParts(
            embeddings=embed,
            layers=per_layer * self.layers,
            lm_head=0.0 if self.tie_word_embeddings else embed,
            final_norm=h * half,
        )

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights as vLLM loads them: quantized decoder linears, 16-bit the rest."""
        return self.weight_parts().total

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
    # Where ``memory_gib`` comes from (nvidia-smi's MiB total on a named driver, a vLLM log line).
    memory_source: str = ""
    # What CUDA reports as total (``cudaMemGetInfo``, vLLM's ``total_gpu_memory``), when known; it is a
    # few hundred MiB below nvidia-smi's total and is what ``gpu_memory_utilization`` multiplies.
    cuda_total_gib: float | None = None

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 1024**3

    @property
    def profiled_total_bytes(self) -> float:
        """The total vLLM multiplies by ``gpu_memory_utilization``: CUDA's figure when known."""
        return (self.cuda_total_gib or self.memory_gib) * 1024**3

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for the precision's matmuls (FP8 falls back to BF16 without FP8 units)."""
        if precision in FP8_COMPUTE and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12
