"""Compile the desired deployments into ONE Ray Serve declarative config (``ServeDeploySchema``).

Ray's ``PUT /api/serve/applications/`` replaces the whole set of applications: whatever the config
leaves out is deleted. So the compiler always works on *every* desired deployment, and the result
is a pure function of the rows (sorted by slug, no timestamps), which makes it golden-testable and
lets the reconciler skip a PUT when nothing changed (``config_hash``).

Per engine kind (docs/decisions/0004-deployments-reconciler.md):

- ``vllm`` → ``ray.serve.llm:build_openai_app`` with one ``LLMConfig`` dict (``model_loading_config``,
  ``engine_kwargs``, ``accelerator_type``, ``deployment_config.autoscaling_config``). Fixed replicas
  are ``min_replicas == max_replicas``, as Ray Serve LLM documents.
- ``simulated`` → ``engines.serve_app:build_app`` with the same engine knobs plus the model and GPU
  specs the simulator needs; replicas through the Serve config's per-deployment override, so a scale
  changes no code version and Ray resizes without rebuilding the app.
- ``vllm-cpu`` → ``engines.vllm_serve_app:build_app`` (vLLM's CPU backend), replicas the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from urllib.parse import urlparse

from django.conf import settings

from deployments.constants import IMPORT_PATHS, RAY_ACCELERATOR_TYPES, EngineKind, ScalingMode, Task
from deployments.models import Deployment
from engines.presets import spec_as_dict

# The Serve deployment (inside each engine's app) whose replica count we set. Ray Serve LLM names
# its own deployments, so vLLM apps carry their replica settings inside the LLMConfig instead.
ENGINE_DEPLOYMENT_NAMES = {
    EngineKind.SIMULATED: "SimulatedVLLM",
    EngineKind.VLLM_CPU: "VLLMCPUEngine",
}
BLOCK_SIZE = 16


def serve_http_options() -> dict:
    """Serve's HTTP proxy host and port, from ``RAY_SERVE_URL`` (never Serve's default 8000)."""
    parsed = urlparse(settings.RAY_SERVE_URL)
    host = parsed.hostname or "127.0.0.1"
    # Serve binds the proxy; a public URL behind a load balancer still binds on all interfaces.
    bind = host if host in ("127.0.0.1", "localhost", "0.0.0.0") else "0.0.0.0"  # noqa: S104
    return {"host": bind, "port": parsed.port or 8000}


def model_source(weights_uri: str) -> str:
    """What vLLM loads: ``hf://org/name`` → ``org/name``; ``file:///p`` → ``/p``; others unchanged."""
    if weights_uri.startswith("hf://"):
        return weights_uri[len("hf://") :]
    if weights_uri.startswith("file://"):
        return weights_uri[len("file://") :]
    return weights_uri


def effective_precision(deployment: Deployment) -> str:
    """The weight precision the engine runs: online FP8 quantization turns 16-bit weights into FP8."""
    precision = deployment.model_version.precision
    if deployment.quantization == "fp8" and precision in ("bf16", "fp16"):
        return "fp8"
    return precision


def effective_kv_cache_dtype(deployment: Deployment) -> str:
    """The deployment's KV dtype, or the version's when the deployment says ``auto``."""
    if deployment.kv_cache_dtype and deployment.kv_cache_dtype != "auto":
        return deployment.kv_cache_dtype
    return deployment.model_version.kv_cache_dtype or "auto"


def vllm_kv_cache_dtype(kv: str) -> str:
    """vLLM's ``--kv-cache-dtype``: ``auto`` follows the model dtype; 16-bit choices are ``auto`` too."""
    return kv if kv.startswith("fp8") else "auto"


def model_spec_dict(deployment: Deployment) -> dict:
    spec = deployment.model_version.model.to_spec(
        precision=effective_precision(deployment), kv_cache_dtype=effective_kv_cache_dtype(deployment)
    )
    return spec_as_dict(spec)


def engine_args(deployment: Deployment) -> dict:
    """The simulator's / vLLM-CPU wrapper's engine knobs (``engines.scheduler.EngineConfig`` names)."""
    args = {
        "max_num_seqs": deployment.max_num_seqs,
        "max_num_batched_tokens": deployment.max_num_batched_tokens,
        "block_size": BLOCK_SIZE,
        "gpu_memory_utilization": deployment.gpu_memory_utilization,
        "enable_prefix_caching": deployment.enable_prefix_caching,
        "enable_chunked_prefill": True,
        "max_model_len": deployment.max_model_len,
    }
    args.update(deployment.extra_engine_args or {})
    return args


def task_engine_kwargs(deployment: Deployment) -> dict:
    """vLLM's runner for the deployment's task: the pooling runner with the embedding head for "embed"
    (the engine then serves /v1/embeddings), vLLM's default (generate) otherwise."""
    if deployment.task == Task.EMBED:
        return {"runner": "pooling", "convert": "embed"}
    return {}


def vllm_engine_kwargs(deployment: Deployment) -> dict:
    """vLLM ``AsyncEngineArgs`` for Ray Serve LLM; unset options are left to vLLM's defaults."""
    kwargs: dict = {
        "tensor_parallel_size": deployment.tensor_parallel_size,
        "max_num_seqs": deployment.max_num_seqs,
        "max_num_batched_tokens": deployment.max_num_batched_tokens,
        "gpu_memory_utilization": deployment.gpu_memory_utilization,
        "enable_prefix_caching": deployment.enable_prefix_caching,
        "kv_cache_dtype": vllm_kv_cache_dtype(effective_kv_cache_dtype(deployment)),
    }
    if deployment.max_model_len:
        kwargs["max_model_len"] = deployment.max_model_len
    if deployment.quantization:
        kwargs["quantization"] = deployment.quantization
    kwargs.update(task_engine_kwargs(deployment))
    kwargs.update(deployment.extra_engine_args or {})
    return kwargs


def autoscaling_config(deployment: Deployment) -> dict:
    """Ray Serve's ``autoscaling_config``: bounds, the target per replica (the operator's or from the
    measured capacity) and the delays, always written out (ADR 0038). Fixed replicas, which Ray Serve
    LLM takes as ``min == max``, carry no delays: there is nothing to wait for."""
    if deployment.scaling_mode == ScalingMode.AUTOSCALING:
        return {
            "min_replicas": deployment.min_replicas,
            "max_replicas": deployment.max_replicas,
            "target_ongoing_requests": deployment.autoscaling_target,
            "upscale_delay_s": float(deployment.upscale_delay_s),
            "downscale_delay_s": float(deployment.downscale_delay_s),
            "look_back_period_s": float(deployment.look_back_period_s),
        }
    return {"min_replicas": deployment.num_replicas, "max_replicas": deployment.num_replicas}


def replica_override(deployment: Deployment) -> dict:
    """The per-deployment override in the Serve config: the engine deployment's replicas.

    CPU reservations stay the engine builder's choice (the simulator reserves none by default).
    """
    override: dict = {"name": ENGINE_DEPLOYMENT_NAMES[deployment.engine_kind]}
    if deployment.scaling_mode == ScalingMode.AUTOSCALING:
        override["autoscaling_config"] = autoscaling_config(deployment)
    else:
        override["num_replicas"] = deployment.num_replicas
    return override


def _vllm_args(deployment: Deployment) -> dict:
    llm_config: dict = {
        "model_loading_config": {
            "model_id": deployment.effective_served_model_name,
            "model_source": model_source(deployment.model_version.weights_uri),
        },
        "engine_kwargs": vllm_engine_kwargs(deployment),
        "deployment_config": {"autoscaling_config": autoscaling_config(deployment)},
    }
    accelerator = RAY_ACCELERATOR_TYPES.get(deployment.gpu_type.name) if deployment.gpu_type_id else None
    if accelerator:
        llm_config["accelerator_type"] = accelerator
    return {"llm_configs": [llm_config]}


def _simulated_args(deployment: Deployment) -> dict:
    args = {
        "model_name": deployment.effective_served_model_name,
        "model": model_spec_dict(deployment),
        "gpu": spec_as_dict(deployment.gpu_type.to_spec()),
        "tensor_parallel": deployment.tensor_parallel_size,
        "engine": engine_args(deployment),
        "time_scale": deployment.time_scale,
        "seed": 0,
        **({"faults": deployment.faults} if deployment.faults else {}),
    }
    # A simulated engine answers eval cases right at its version's quality profile (engines.quality).
    profile = deployment.model_version.quality_profile
    if profile:
        args["quality"] = profile
    return args


def _vllm_cpu_args(deployment: Deployment) -> dict:
    return {
        "model_name": deployment.effective_served_model_name,
        "model_source": model_source(deployment.model_version.weights_uri),
        "engine": {**engine_args(deployment), **task_engine_kwargs(deployment)},
    }


def compile_application(deployment: Deployment) -> dict:
    """One ``ServeApplicationSchema`` dict for a deployment."""
    kind = deployment.engine_kind
    app: dict = {
        "name": deployment.app_name,
        "route_prefix": deployment.route_prefix,
        "import_path": deployment.import_path_override or IMPORT_PATHS[kind],
    }
    if kind == EngineKind.VLLM:
        app["args"] = _vllm_args(deployment)
    elif kind == EngineKind.SIMULATED:
        app["args"] = _simulated_args(deployment)
        app["deployments"] = [replica_override(deployment)]
    else:
        app["args"] = _vllm_cpu_args(deployment)
        app["deployments"] = [replica_override(deployment)]
    if deployment.import_path_override:
        # A custom builder has its own deployment names; our override would not match them.
        app.pop("deployments", None)
    return app


def compile_serve_config(deployments: Iterable[Deployment]) -> dict:
    """The whole Serve config for these deployments (normally: every desired-running one)."""
    apps = [compile_application(d) for d in sorted(deployments, key=lambda d: d.slug)]
    return {
        "proxy_location": "EveryNode",
        "http_options": serve_http_options(),
        "applications": apps,
    }


def config_hash(config: dict) -> str:
    """A stable digest of a compiled config (key order does not matter)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def desired_deployments() -> list[Deployment]:
    """Every deployment that should be on Ray now, with what the compiler reads joined in."""
    return list(
        Deployment.objects.desired_running()
        .select_related("model_version__model", "gpu_type")
        .order_by("slug")
    )
