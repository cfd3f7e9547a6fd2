"""Choices and fixed names of the deployments app, in one place."""

from __future__ import annotations

from django.db import models


class EngineKind(models.TextChoices):
    VLLM = "vllm", "vLLM on GPUs (Ray Serve LLM)"
    VLLM_CPU = "vllm-cpu", "vLLM on CPU hosts"
    SIMULATED = "simulated", "Simulated vLLM"


class Task(models.TextChoices):
    """What a deployment's engine runs: text generation, or vLLM's pooling runner for embeddings."""

    GENERATE = "generate", "Generate (chat, completions, responses)"
    EMBED = "embed", "Embed (embeddings, vLLM's pooling runner)"


# The OpenAI endpoints each task serves; the gateway routes a request only to targets that serve it.
TASK_ENDPOINTS = {
    Task.GENERATE: ("chat", "text", "responses"),
    Task.EMBED: ("embeddings",),
}


class Pool(models.TextChoices):
    ONLINE = "online", "Online"
    BATCH = "batch", "Batch"
    LONG_CONTEXT = "long-context", "Long context"


class DesiredState(models.TextChoices):
    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"


# The most replicas one deployment may ask Ray for (fixed, or as an autoscaling maximum).
MAX_REPLICAS = 64


class ScalingMode(models.TextChoices):
    FIXED = "fixed", "Fixed replicas"
    AUTOSCALING = "autoscaling", "Autoscaling"


class Quantization(models.TextChoices):
    """vLLM's ``--quantization`` values we offer; empty lets vLLM read it from the checkpoint."""

    NONE = "", "from the checkpoint"
    FP8 = "fp8", "fp8 (online)"
    AWQ = "awq", "AWQ"
    GPTQ = "gptq", "GPTQ"
    COMPRESSED_TENSORS = "compressed-tensors", "compressed-tensors"
    BITSANDBYTES = "bitsandbytes", "bitsandbytes"


class Status(models.TextChoices):
    """What the console last observed. Ray's own application states keep Ray's names."""

    PENDING = "PENDING", "pending (not yet sent to Ray)"
    DEPLOYING = "DEPLOYING", "deploying"
    RUNNING = "RUNNING", "running"
    UNHEALTHY = "UNHEALTHY", "unhealthy"
    DEPLOY_FAILED = "DEPLOY_FAILED", "deploy failed"
    DELETING = "DELETING", "deleting"
    STOPPED = "STOPPED", "stopped"
    DELETED = "DELETED", "deleted"
    UNKNOWN = "UNKNOWN", "unknown / cluster unreachable"


# Statuses that will change by themselves: the status watcher keeps polling Ray while any exists.
TRANSITIONAL = frozenset({Status.PENDING, Status.DEPLOYING, Status.DELETING})

# Ray application status → ours. NOT_STARTED is a freshly accepted app (Ray 2.60 names).
RAY_APP_STATUS = {
    "NOT_STARTED": Status.DEPLOYING,
    "DEPLOYING": Status.DEPLOYING,
    "RUNNING": Status.RUNNING,
    "UNHEALTHY": Status.UNHEALTHY,
    "DEPLOY_FAILED": Status.DEPLOY_FAILED,
    "DELETING": Status.DELETING,
}


class EventKind(models.TextChoices):
    CREATED = "created", "created"
    SCALED = "scaled", "scaled"
    STOPPED = "stopped", "stopped"
    STARTED = "started", "started"
    DELETED = "deleted", "deleted"
    STATUS = "status", "status change"
    ERROR = "error", "error"
    FAULTS = "faults", "faults changed"
    ADMISSION = "admission", "admission limit"
    REPLICAS = "replicas", "replicas running"


# Ray's accelerator_type names (ray.util.accelerators) for the catalog's GPU names. A GPU whose
# name is missing here gets no accelerator_type, so Ray schedules it on any GPU node.
RAY_ACCELERATOR_TYPES = {
    "H100 SXM": "H100",
    "H100 PCIe": "H100",
    "H100": "H100",
    "H200": "H200",
    "H20": "H20",
    "A100 80GB": "A100-80G",
    "A100 40GB": "A100-40G",
    "A100": "A100",
    "L40S": "L40S",
    "L4": "L4",
    "A10G": "A10G",
    "B200": "B200",
    "T4": "T4",
}

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)

# Import paths each engine kind compiles to (docs/decisions/0004-*.md).
IMPORT_PATHS = {
    EngineKind.VLLM: "ray.serve.llm:build_openai_app",
    EngineKind.SIMULATED: "engines.serve_app:build_app",
    EngineKind.VLLM_CPU: "engines.vllm_serve_app:build_app",
}

ROUTE_PREFIX = "/d/{slug}"


# --- progressive rollouts (Argo Rollouts' vocabulary) ---------------------------------------------


class RolloutPhase(models.TextChoices):
    PROGRESSING = "progressing", "Progressing"
    PAUSED = "paused", "Paused"
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"


class RolloutOutcome(models.TextChoices):
    NONE = "", "in progress"
    PROMOTED = "promoted", "Promoted"
    ABORTED = "aborted", "Aborted"
    ROLLED_BACK = "rolled_back", "RolledBack"


class StepKind(models.TextChoices):
    SET_WEIGHT = "set_weight", "set canary weight"
    PAUSE = "pause", "pause"
    ANALYSIS = "analysis", "analysis"


class AnalysisVerdict(models.TextChoices):
    RUNNING = "running", "running"
    PASSED = "passed", "passed"
    FAILED = "failed", "failed"
    INCONCLUSIVE = "inconclusive", "inconclusive"
    ERROR = "error", "error"
