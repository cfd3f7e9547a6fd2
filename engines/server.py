"""Live simulated vLLM: an OpenAI-compatible HTTP server whose token timing comes from the scheduler.

Endpoints (also under any route prefix, e.g. Ray Serve's ``/d/<slug>``): ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/embeddings`` (deterministic unit vectors of ``EMBEDDING_DIM``
floats seeded by each input, as vLLM's pooling runner answers), ``POST /v1/responses`` (OpenAI's
Responses API over the same generator, streaming or not), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text with
vLLM's metric names and a ``model_name`` label), ``POST /tokenize`` (the prompt's token count and
``max_model_len``, as vLLM's, so the load harness can build prompts of exact length).

Two timing modes:

* **Simulated** (default): one ``engines.scheduler.Scheduler`` runs steps in wall-clock time; each step
  sleeps its predicted duration divided by ``time_scale`` (``--time-scale 10`` runs 10x faster than
  the modelled GPU). Batching, chunked prefill, KV blocks, preemption and prefix caching behave as in
  the virtual-time simulator.
* **Fixed** (``--fixed-ttft-ms X --fixed-tpot-ms Y``): for test harnesses. Up to ``max_num_seqs``
  requests run at once (the rest wait FCFS); a running request's first token comes exactly ``X`` ms
  after it starts and each further token ``Y`` ms after the previous one, independent of the others.
  Capacity is therefore ``max_num_seqs / (X + Y * (output_tokens - 1))`` requests per second.

Token accounting (documented approximation, no real tokenizer): a text is ``ceil(len(text) / 4)``
tokens (at least 1), the usual ~4 characters per token of English BPE vocabularies. Chat prompts
count each message's text plus 4 tokens of role/template overhead, plus 2 for the assistant
priming. ``prompt`` given as a list of token ids counts one token per id.

Output: ``max_tokens`` (or ``max_completion_tokens``) tokens, fewer when a ``stop`` string appears
in the synthetic text (``finish_reason: "stop"``). Without a limit and without ``ignore_eos`` the
simulated model "emits EOS" after a length drawn deterministically from the request (16..512
tokens, capped by the context). The text is a deterministic sequence of English words seeded by
``seed`` and the prompt, one word per token.
"""

from __future__ import annotations

import argparse
import json

from engines import faults
from engines.metrics import Metrics
from engines.openai_app import OpenAIApp
from engines.perf import Efficiency
from engines.presets import gpu_from_dict, gpu_preset, model_from_dict, model_preset
from engines.quality import QualityProfile
from engines.scheduler import EngineConfig, Scheduler
from engines.timing import FixedEngine, LiveEngine


def build_engine_app(args: dict) -> OpenAIApp:
    """Build the ASGI app from the Serve-style args dict (see ``engines.serve_app``).

    Keys: ``model_name``; ``model`` (ModelSpec fields, or a preset name string); ``gpu`` (GpuSpec fields or
    a preset name); ``tensor_parallel``; ``engine`` (EngineConfig fields); ``efficiency`` (Efficiency
    fields, optional); ``time_scale`` (default 1); ``seed`` (unused by the engine, kept for the
    record); ``fixed_ttft_ms`` and ``fixed_tpot_ms`` (fixed timing mode when both are set);
    ``quality`` (a simulated quality profile, see ``engines.quality``: requests that carry
    ``governor_eval`` are answered right or wrong as it decides; ``seed`` seeds that draw);
    ``faults`` (optional, ``engines.faults``: injected latency and errors for rollout rehearsals).
    """
    args = faults.engine_args(args)
    model_arg = args.get("model", "llama-3.1-8b")
    model = model_preset(model_arg) if isinstance(model_arg, str) else model_from_dict(dict(model_arg))
    gpu_arg = args.get("gpu", "H100")
    gpu = gpu_preset(gpu_arg) if isinstance(gpu_arg, str) else gpu_from_dict(dict(gpu_arg))
    tp = int(args.get("tensor_parallel", 1))
    engine_cfg = EngineConfig.from_dict(dict(args.get("engine") or {}))
    eff = Efficiency.from_dict(dict(args["efficiency"])) if args.get("efficiency") else None
    model_name = str(args.get("model_name") or model.name)
    metrics = Metrics(model_name)
    sched = Scheduler(model=model, gpu=gpu, tensor_parallel=tp, config=engine_cfg, efficiency=eff)
    fixed_ttft = args.get("fixed_ttft_ms")
    fixed_tpot = args.get("fixed_tpot_ms")
    if fixed_ttft is not None or fixed_tpot is not None:
        engine: LiveEngine | FixedEngine = FixedEngine(
            ttft_s=float(fixed_ttft or 0) / 1000,
            tpot_s=float(fixed_tpot or 0) / 1000,
            max_num_seqs=engine_cfg.max_num_seqs,
            max_model_len=sched.max_model_len,
            block_size=sched.block_size,
            num_blocks=sched.num_blocks,
            metrics=metrics,
        )
    else:
        engine = LiveEngine(sched, time_scale=float(args.get("time_scale", 1.0)), metrics=metrics)
    quality = QualityProfile.from_dict(args["quality"]) if args.get("quality") else None
    app = OpenAIApp(model_name=model_name, engine=engine, metrics=metrics, quality=quality,
                    seed=int(args.get("seed") or 0))  # fmt: skip
    return faults.wrap(app, args)


def _load_json_arg(value: str) -> dict:
    text = value
    if not value.lstrip().startswith("{"):
        with open(value, encoding="utf-8") as fh:
            text = fh.read()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit("--spec-json must be a JSON object")
    return data


def args_from_cli(argv: list[str] | None = None) -> tuple[dict, argparse.Namespace]:
    """Parse the command line into the Serve-style args dict (plus host/port)."""
    p = argparse.ArgumentParser(prog="python -m engines.server", description="Simulated vLLM OpenAI server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--model-name", default=None, help="the model id clients send (default: the spec's name)")
    p.add_argument("--model-preset", default="llama-3.1-8b")
    p.add_argument("--gpu", default="H100", help="GPU preset name")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--spec-json", default=None,
                   help="JSON object (or a file) with any of model, gpu, engine, efficiency as full dicts")  # fmt: skip
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--kv-cache-gib", type=float, default=None)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--time-scale", type=float, default=1.0, help="run N times faster than the modelled GPU")
    p.add_argument("--fixed-ttft-ms", type=float, default=None)
    p.add_argument("--fixed-tpot-ms", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quality-json", default=None,
                   help="simulated quality profile: JSON object (or a file), see engines.quality")  # fmt: skip
    p.add_argument("--log-level", default="warning")
    ns = p.parse_args(argv)
    spec = _load_json_arg(ns.spec_json) if ns.spec_json else {}
    engine = dict(spec.get("engine") or {})
    for flag, key in (
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("block_size", "block_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("max_model_len", "max_model_len"),
        ("kv_cache_gib", "kv_cache_gib"),
    ):
        value = getattr(ns, flag)
        if value is not None:
            engine[key] = value
    if ns.no_prefix_caching:
        engine["enable_prefix_caching"] = False
    if ns.no_chunked_prefill:
        engine["enable_chunked_prefill"] = False
    args = {
        "model_name": ns.model_name or spec.get("model_name"),
        "model": spec.get("model") or ns.model_preset,
        "gpu": spec.get("gpu") or ns.gpu,
        "tensor_parallel": spec.get("tensor_parallel", ns.tp),
        "engine": engine,
        "efficiency": spec.get("efficiency"),
        "time_scale": ns.time_scale,
        "seed": ns.seed,
        "fixed_ttft_ms": ns.fixed_ttft_ms,
        "fixed_tpot_ms": ns.fixed_tpot_ms,
        "quality": _load_json_arg(ns.quality_json) if ns.quality_json else spec.get("quality"),
        "faults": spec.get("faults"),
    }
    return args, ns


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m engines.server``."""
    import uvicorn

    args, ns = args_from_cli(argv)
    app = build_engine_app(args)
    uvicorn.run(
        app,
        host=ns.host,
        port=ns.port,
        log_level=ns.log_level,
        access_log=False,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        timeout_keep_alive=30,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
