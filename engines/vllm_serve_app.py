"""Ray Serve application that serves real vLLM on CPU hosts (engine kind ``vllm-cpu``).

Each replica starts vLLM's own OpenAI server (``engines.vllm_cpu``) as a child process on a private
port and proxies HTTP to it, streaming included. Why a proxy and not ``ray.serve.llm``: see
docs/decisions/0002-vllm-on-cpu-hosts.md (in short: vLLM's own ``/metrics`` and ``/health`` under the
route prefix, no ``ray[llm]`` extra that pins another vLLM, one launcher shared with the tests).

Import path for Serve configs: ``engines.vllm_serve_app:build_app`` with ``args``::

    {
      "model_name": "tiny",                        # the id OpenAI clients send (--served-model-name)
      "model_source": "/srv/models/tiny-llama",    # a local checkpoint directory on every node
      "engine": {"max_model_len": 1024, "max_num_seqs": 8, "dtype": "bfloat16", ...},  # vLLM args
      "kv_cache_gib": 1,                           # optional VLLM_CPU_KVCACHE_SPACE (default 1)
      "threads": null,                             # optional OMP threads (default: cores - 1)
      "num_cpus": 1,                               # optional replica CPU reservation (default 1)
      "max_ongoing_requests": 256,                 # optional Serve knob
      "startup_timeout_s": 900,                    # optional: how long a replica waits for vLLM
      "ensure_tiny_model": false                   # optional: generate the tiny model at model_source
    }

The deployment is named ``VLLMCPUEngine`` (configs override ``num_replicas``/autoscaling under that
name). Under the route prefix the replica answers whatever vLLM answers: ``/v1/chat/completions``
(SSE streaming), ``/v1/completions``, ``/v1/models``, ``/health``, ``/metrics`` (``vllm:`` names),
``/tokenize``... Workers must be able to import ``engines`` (repository on ``PYTHONPATH``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
from ray import serve
from ray.serve import Application

from engines.vllm_cpu import DEFAULT_KV_CACHE_GIB, VllmCpuServer, vllm_server_start, vllm_unavailable_reason

DEPLOYMENT_NAME = "VLLMCPUEngine"
# Engine arguments that mean nothing on the CPU backend: the KV pool is sized by ``kv_cache_gib``
# (VLLM_CPU_KVCACHE_SPACE), not by a fraction of device memory.
CPU_IGNORED_ENGINE_KEYS = frozenset({"gpu_memory_utilization", "tensor_parallel_size"})
# vLLM's CPU attention kernels work on KV blocks in multiples of 32 tokens (others fall back to a slow
# path with a warning), so the GPU default of 16 is rounded up.
CPU_BLOCK_MULTIPLE = 32
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the ASGI server recomputes.
_DROP_REQUEST_HEADERS = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding"}
)
_DROP_RESPONSE_HEADERS = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "date", "server"}
)


async def _wait_disconnect(receive) -> None:
    """Return when the ASGI server reports that the client went away."""
    while (await receive())["type"] != "http.disconnect":
        pass


def cpu_engine_kwargs(engine: dict[str, Any] | None) -> dict[str, Any]:
    """The deployment's engine arguments adapted to vLLM's CPU backend."""
    kwargs = {k: v for k, v in (engine or {}).items() if k not in CPU_IGNORED_ENGINE_KEYS}
    block = kwargs.get("block_size")
    if block:
        kwargs["block_size"] = -(-int(block) // CPU_BLOCK_MULTIPLE) * CPU_BLOCK_MULTIPLE
    return kwargs


class VllmProxy:
    """Raw ASGI app that forwards every request to the replica's vLLM server and streams the answer.

    Serve mounts the app under the route prefix and passes it as ``root_path``; the prefix is cut off
    so vLLM sees its own paths. When the client goes away (Serve cancels this coroutine, or the
    ASGI server reports ``http.disconnect``) the upstream response is closed, and vLLM aborts the
    request and frees its KV blocks.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Created lazily: it must belong to the event loop that serves the requests.
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(None, connect=10.0),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
        return self._client

    async def get_health(self) -> httpx.Response:
        """``GET /health`` on the upstream server (for the replica's health check)."""
        return await self._http().get("/health", timeout=20.0)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _DROP_REQUEST_HEADERS]
        query = scope.get("query_string") or b""
        url = path + ("?" + query.decode("latin-1") if query else "")
        client = self._http()
        try:
            upstream = await client.send(
                client.build_request(scope["method"], url, headers=headers, content=bytes(body)), stream=True
            )
        except httpx.HTTPError as exc:
            await self._error(send, 503, f"vLLM server unreachable: {exc.__class__.__name__}")
            return
        # ASGI servers do not fail ``send`` after the client left; ``receive`` says so. Watch it and
        # stop pumping, so the upstream stream closes and vLLM aborts the request.
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        pump = asyncio.ensure_future(self._pump(upstream, send))
        try:
            await asyncio.wait({watcher, pump}, return_when=asyncio.FIRST_COMPLETED)
            if pump.done():
                pump.result()  # re-raise what failed while sending
        finally:
            for task in (watcher, pump):
                task.cancel()
            await asyncio.gather(watcher, pump, return_exceptions=True)
            await upstream.aclose()

    @staticmethod
    async def _pump(upstream: httpx.Response, send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": upstream.status_code,
                "headers": [
                    (k.encode("latin-1"), v.encode("latin-1"))
                    for k, v in upstream.headers.multi_items()
                    if k.lower() not in _DROP_RESPONSE_HEADERS
                ],
            }
        )
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _error(send, status: int, message: str) -> None:
        body = json.dumps(
            {"error": {"message": message, "type": "ServiceUnavailable", "code": status}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


@serve.ingress()
class VLLMCPUEngine:
    """One replica: a vLLM OpenAI server child process behind an HTTP proxy."""

    def __init__(self, args: dict[str, Any]) -> None:
        model = Path(args["model_source"])
        if args.get("ensure_tiny_model"):
            from engines.tiny_model import ensure_tiny_model

            ensure_tiny_model(model)
        self._server: VllmCpuServer | None = None
        self._server = vllm_server_start(
            model_path=model,
            served_model_name=args["model_name"],
            engine_kwargs=cpu_engine_kwargs(args.get("engine")),
            threads=args.get("threads"),
            kv_cache_gib=int(args.get("kv_cache_gib") or DEFAULT_KV_CACHE_GIB),
            timeout_s=float(args.get("startup_timeout_s") or 900),
            # The replica can be killed without cleanup; the server must not outlive it.
            die_with_parent=True,
        )
        self._proxy = VllmProxy(self._server.base_url)

    def __serve_build_asgi_app__(self):  # noqa: N807 (Serve's hook name)
        return self._proxy

    async def check_health(self) -> None:
        """Serve's replica health check: the child is alive and its ``/health`` answers 200.

        Async on purpose: it runs on the replica's user event loop, which also proxies the requests.
        """
        server = self._server
        if server is None or server.process.poll() is not None:
            code = None if server is None else server.process.returncode
            raise RuntimeError(f"vLLM server exited ({code}):\n{server.log_tail(2000) if server else ''}")
        response = await self._proxy.get_health()
        if response.status_code != 200:
            raise RuntimeError(f"vLLM /health answered {response.status_code}")

    def __del__(self) -> None:
        # Serve calls __del__ on graceful replica shutdown (scale-down, redeploy, delete).
        server = getattr(self, "_server", None)
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop(timeout_s=15)


def build_app(args: dict[str, Any]) -> Application:
    """Serve application builder (``import_path: engines.vllm_serve_app:build_app``).

    Validates what it can on the node that builds the app, so a bad config fails the deploy with a
    clear message instead of a crash-looping replica.
    """
    args = dict(args or {})
    missing = [key for key in ("model_name", "model_source") if not args.get(key)]
    if missing:
        raise ValueError(f"vllm-cpu app args need {', '.join(missing)}")
    reason = vllm_unavailable_reason()
    if reason:
        raise RuntimeError(f"vllm-cpu cannot run on this Ray cluster: {reason}")
    source = Path(args["model_source"])
    if not args.get("ensure_tiny_model") and not (source / "config.json").is_file():
        raise ValueError(f"model_source {source} is not a local checkpoint directory (no config.json)")
    deployment = serve.deployment(
        VLLMCPUEngine,
        name=DEPLOYMENT_NAME,
        max_ongoing_requests=int(args.pop("max_ongoing_requests", 256)),
        ray_actor_options={"num_cpus": float(args.pop("num_cpus", 1))},
        health_check_period_s=10,
        health_check_timeout_s=30,
        graceful_shutdown_timeout_s=20,
    )
    return deployment.bind(args)
