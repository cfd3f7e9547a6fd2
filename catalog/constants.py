"""Choices of the catalog, in one place."""

from django.db import models


class Precision(models.TextChoices):
    BF16 = "bf16", "BF16"
    FP16 = "fp16", "FP16"
    FP8 = "fp8", "FP8"
    W8A8 = "w8a8", "W8A8 (INT8)"
    AWQ = "awq", "AWQ (INT4, group 128, zero points)"
    GPTQ = "gptq", "GPTQ (INT4, group 128, zero points, g_idx)"
    W4A16 = "w4a16", "W4A16 (INT4 round-to-nearest, symmetric)"


class KvCacheDtype(models.TextChoices):
    AUTO = "auto", "auto (model dtype)"
    FP16 = "fp16", "FP16"
    BF16 = "bf16", "BF16"
    FP8 = "fp8", "FP8"
    FP8_E4M3 = "fp8_e4m3", "FP8 E4M3"
    FP8_E5M2 = "fp8_e5m2", "FP8 E5M2"


class Framework(models.TextChoices):
    VLLM = "vllm", "vLLM"
    SGLANG = "sglang", "SGLang"
    TENSORRT_LLM = "tensorrt-llm", "TensorRT-LLM"
    LLAMA_CPP = "llama.cpp", "llama.cpp"


class Lifecycle(models.TextChoices):
    DRAFT = "draft", "Draft"
    CANDIDATE = "candidate", "Candidate"
    APPROVED = "approved", "Approved"
    SERVING = "serving", "Serving"
    DEPRECATED = "deprecated", "Deprecated"
    RETIRED = "retired", "Retired"
    REJECTED = "rejected", "Rejected"


# Allowed lifecycle moves. Moving to ``approved`` additionally needs the promotion rule's yes (the
# version's required eval gates passed) or an admin override with a written reason: see
# ``catalog.promotion`` and ``catalog.services.model_version_transition``.
LIFECYCLE_TRANSITIONS: dict[str, set[str]] = {
    Lifecycle.DRAFT: {Lifecycle.CANDIDATE, Lifecycle.REJECTED},
    Lifecycle.CANDIDATE: {Lifecycle.APPROVED, Lifecycle.REJECTED, Lifecycle.DRAFT},
    Lifecycle.APPROVED: {Lifecycle.SERVING, Lifecycle.DEPRECATED, Lifecycle.REJECTED},
    Lifecycle.SERVING: {Lifecycle.DEPRECATED},
    Lifecycle.DEPRECATED: {Lifecycle.SERVING, Lifecycle.RETIRED},
    Lifecycle.RETIRED: set(),
    Lifecycle.REJECTED: set(),
}

# The move that the eval gates guard.
GATED_LIFECYCLE = Lifecycle.APPROVED

# Versions that may not be deployed or routed at all.
UNDEPLOYABLE_LIFECYCLES = frozenset({Lifecycle.REJECTED, Lifecycle.RETIRED})
# Versions a production route (the online pool) may send traffic to.
PRODUCTION_LIFECYCLES = frozenset({Lifecycle.APPROVED, Lifecycle.SERVING})

MIN_OVERRIDE_REASON_CHARS = 10
