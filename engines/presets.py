"""Ready-made model and GPU specs with public figures, for the CLI, tests and the simulator benchmark.

Models: the architecture numbers come from each model's ``config.json`` on the Hugging Face Hub
(``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``vocab_size``, ``max_position_embeddings``); parameter counts from the model cards.

GPUs: NVIDIA datasheets, dense (no sparsity) tensor-core peaks, SXM variants where there is a choice.
``memory_gib`` is what ``nvidia-smi`` reports as total memory (the marketing "80 GB" is 80 GiB on
H100/A100, 141 GB on H200 shows as ~140 GiB, L40S's 48 GB shows as ~45 GiB).

``CPU`` is a rough starting-point device for calibrating against vLLM-CPU on a developer machine: its peak
figures are rough (2 cores with AVX-512, dual-channel DDR4/5) and are meant to be corrected by the
fitted efficiencies (``engines.calibrate``); its "memory" is the KV space vLLM-CPU is given
(``VLLM_CPU_KVCACHE_SPACE``) plus the tiny model's weights, so pass ``kv_cache_gib`` in the engine
config instead of relying on ``gpu_memory_utilization``.
"""

from __future__ import annotations

from dataclasses import asdict

from engines.specs import GpuSpec, ModelSpec

MODELS: dict[str, ModelSpec] = {
    # meta-llama/Llama-3.1-8B-Instruct: 8.03B params, GQA 32 q heads / 8 kv heads.
    "llama-3.1-8b": ModelSpec(
        name="Llama-3.1-8B",
        params=8.03e9,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_context=131072,
    ),
    # meta-llama/Llama-3.1-70B-Instruct: 70.6B params.
    "llama-3.1-70b": ModelSpec(
        name="Llama-3.1-70B",
        params=70.6e9,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_context=131072,
    ),
    # Qwen/Qwen2.5-32B-Instruct: 32.8B params, 32k native context (128k with YaRN, not modelled).
    "qwen2.5-32b": ModelSpec(
        name="Qwen2.5-32B",
        params=32.8e9,
        layers=64,
        hidden_size=5120,
        attention_heads=40,
        kv_heads=8,
        head_dim=128,
        vocab_size=152064,
        max_context=32768,
    ),
    # mistralai/Mistral-7B-Instruct-v0.3: 7.25B params.
    "mistral-7b": ModelSpec(
        name="Mistral-7B",
        params=7.25e9,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        vocab_size=32768,
        max_context=32768,
    ),
}

GPUS: dict[str, GpuSpec] = {
    # H100 SXM5 80GB: 3.35 TB/s HBM3, 989 TFLOPS BF16 dense, 1979 FP8 dense, NVLink 4 900 GB/s (450/dir).
    "H100": GpuSpec(
        name="H100",
        # nvidia-smi's 81559 MiB (gpu-burn#114, driver 550.90.07); CUDA sees 79.22 GiB (vLLM PR #10511's log).
        memory_gib=81559 / 1024,
        cuda_total_gib=79.22,
        memory_source="nvidia-smi 81559MiB; CUDA total 79.22 GiB from vLLM's log",
        hbm_bandwidth_gbps=3350,
        bf16_tflops=989,
        fp8_tflops=1979,
        interconnect="NVLink 4",
        interconnect_gbps=450,
    ),
    # H200 SXM 141GB: 4.8 TB/s HBM3e, same compute as H100 SXM.
    "H200": GpuSpec(
        name="H200",
        memory_gib=143771 / 1024,  # nvidia-smi's 143771 MiB (140.4 GiB)
        memory_source="nvidia-smi 143771MiB",
        hbm_bandwidth_gbps=4800,
        bf16_tflops=989,
        fp8_tflops=1979,
        interconnect="NVLink 4",
        interconnect_gbps=450,
    ),
    # A100 SXM4 80GB: 2.039 TB/s HBM2e, 312 TFLOPS BF16 dense, no FP8, NVLink 3 600 GB/s (300/dir).
    "A100-80GB": GpuSpec(
        name="A100-80GB",
        memory_gib=81920 / 1024,  # nvidia-smi's 81920 MiB (modal-client#2797)
        memory_source="nvidia-smi 81920MiB",
        hbm_bandwidth_gbps=2039,
        bf16_tflops=312,
        fp8_tflops=None,
        interconnect="NVLink 3",
        interconnect_gbps=300,
    ),
    # L40S 48GB GDDR6: 864 GB/s, 362 TFLOPS BF16 dense, 733 FP8 dense, PCIe Gen4 x16 (32 GB/s/dir).
    "L40S": GpuSpec(
        name="L40S",
        memory_gib=46068 / 1024,  # nvidia-smi's 46068 MiB (44.99 GiB; vllm-backport#14, driver 590.44.01)
        memory_source="nvidia-smi 46068MiB",
        hbm_bandwidth_gbps=864,
        bf16_tflops=362,
        fp8_tflops=733,
        interconnect="PCIe Gen4",
        interconnect_gbps=32,
    ),
    # See the module docstring: rough figures, calibrate before trusting.
    "CPU": GpuSpec(
        name="CPU",
        memory_gib=8,
        hbm_bandwidth_gbps=20,
        bf16_tflops=0.2,
        fp8_tflops=None,
        interconnect="",
        interconnect_gbps=0,
    ),
}

# Names people type for the same device.
GPU_ALIASES: dict[str, str] = {
    "h100": "H100",
    "h100-sxm": "H100",
    "h100 sxm": "H100",
    "h100-80gb": "H100",
    "h200": "H200",
    "a100": "A100-80GB",
    "a100-80gb": "A100-80GB",
    "a100 80gb": "A100-80GB",
    "l40s": "L40S",
    "cpu": "CPU",
}


def model_preset(name: str) -> ModelSpec:
    """The preset ``ModelSpec`` for ``name`` (case-insensitive, e.g. ``llama-3.1-8b``)."""
    key = name.strip().lower()
    for preset_key, spec in MODELS.items():
        if key in (preset_key, spec.name.lower()):
            return spec
    raise KeyError(f"unknown model preset {name!r}; known: {', '.join(sorted(MODELS))}")


def gpu_preset(name: str) -> GpuSpec:
    """The preset ``GpuSpec`` for ``name`` (``H100``, ``H100 SXM``, ``A100 80GB``, ``L40S``, ``CPU``...)."""
    key = name.strip()
    if key in GPUS:
        return GPUS[key]
    alias = GPU_ALIASES.get(key.lower())
    if alias:
        return GPUS[alias]
    raise KeyError(f"unknown GPU preset {name!r}; known: {', '.join(sorted(GPUS))}")


def model_from_dict(data: dict) -> ModelSpec:
    """Build a ``ModelSpec`` from a dict of its fields (extra keys are an error, as a typo guard)."""
    return ModelSpec(**data)


def gpu_from_dict(data: dict) -> GpuSpec:
    """Build a ``GpuSpec`` from a dict of its fields."""
    return GpuSpec(**data)


def spec_as_dict(spec: ModelSpec | GpuSpec) -> dict:
    """The JSON-able dict of a spec (the inverse of ``model_from_dict``/``gpu_from_dict``)."""
    return asdict(spec)
