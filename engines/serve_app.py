"""Ray Serve application of one simulated vLLM engine (one replica = one simulated engine).

Import path for Serve configs: ``engines.serve_app:build_app`` with ``args``::

    {
      "model_name": "acme-llama-8b",                 # the id OpenAI clients send
      "model": {ModelSpec fields} | "llama-3.1-8b",  # full spec or a preset name
      "gpu": {GpuSpec fields} | "H100",
      "tensor_parallel": 1,
      "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16,
                 "gpu_memory_utilization": 0.9, "enable_prefix_caching": true,
                 "enable_chunked_prefill": true, "max_model_len": 8192},
      "efficiency": {"mfu": 0.6, "mbu": 0.78, "step_overhead_s": 0.0006} | null,
      "time_scale": 1.0,
      "seed": 0,
      "fixed_ttft_ms": null, "fixed_tpot_ms": null,   # optional fixed-timing mode
      "quality": {"categories": {...}, "by_context": {...}, "default": 0.8} | null,  # simulated evals
      "max_ongoing_requests": 4096,                   # optional Serve knob (default 4096)
      "num_cpus": 0                                   # optional replica CPU reservation (default 0)
    }

The deployment is named ``SimulatedVLLM`` (configs may override ``num_replicas`` etc. under that
name). The OpenAI API is served at ``<route_prefix>/v1/...``: the app strips Serve's ``root_path``.
Workers must be able to import ``engines`` (start Ray with the repository on ``PYTHONPATH`` or
give the application a ``runtime_env``).
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application

from engines.server import build_engine_app

DEPLOYMENT_NAME = "SimulatedVLLM"


@serve.ingress()
class SimulatedVLLM:
    """One replica: a scheduler + perf model behind the raw ASGI OpenAI app."""

    def __init__(self, args: dict[str, Any]) -> None:
        self._args = args

    def __serve_build_asgi_app__(self):  # noqa: N807 (Serve's hook name)
        return build_engine_app(self._args)


def build_app(args: dict[str, Any]) -> Application:
    """Serve application builder (``import_path: engines.serve_app:build_app``)."""
    args = dict(args or {})
    # Build once here so a bad spec fails the deploy with a clear message, not inside a replica.
    build_engine_app(args)
    deployment = serve.deployment(
        SimulatedVLLM,
        name=DEPLOYMENT_NAME,
        max_ongoing_requests=int(args.pop("max_ongoing_requests", 4096)),
        ray_actor_options={"num_cpus": float(args.pop("num_cpus", 0))},
    )
    return deployment.bind(args)
