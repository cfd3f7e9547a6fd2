"""Several simulated engines in one process under Ray Serve's route layout, without Ray.

``python -m engines.multi --port 8100 --app stable='{"model_name": "m", ...}' --app canary='{...}'``
serves each engine at ``/d/<slug>/v1/...`` exactly as Ray Serve's HTTP proxy serves the compiled
applications (``deployments.compiler``: one app per deployment, route prefix ``/d/<slug>``), so a
gateway whose snapshot points at ``RAY_SERVE_URL/d/<slug>/v1`` reaches them unchanged. Each value is
the ``args`` of ``engines.serve_app:build_app`` (faults included). Used by the rollout end-to-end
test and benchmark, where a whole Ray cluster would cost more than what is measured.
"""

from __future__ import annotations

import argparse
import json

from engines.requests import ApiError
from engines.server import build_engine_app

_JSON = [(b"content-type", b"application/json")]


class PrefixRouter:
    """ASGI app dispatching ``/d/<slug>/...`` to that slug's engine app (its root path set)."""

    def __init__(self, apps: dict[str, object]) -> None:
        self.apps = apps

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    for app in self.apps.values():
                        app.engine.ensure_started()
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    for app in self.apps.values():
                        await app.engine.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        parts = scope["path"].split("/", 3)  # "", "d", slug, rest
        app = self.apps.get(parts[2]) if len(parts) >= 3 and parts[1] == "d" else None
        if app is None:
            err = ApiError(404, f"no application at {scope['path']}", code="not_found")
            await send({"type": "http.response.start", "status": 404, "headers": _JSON})
            await send({"type": "http.response.body", "body": err.body()})
            return
        await app(dict(scope, root_path=f"/d/{parts[2]}"), receive, send)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    p = argparse.ArgumentParser(prog="python -m engines.multi", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--app", action="append", default=[], help="slug=JSON args of engines.serve_app:build_app")
    p.add_argument("--log-level", default="warning")
    ns = p.parse_args(argv)
    apps = {}
    for item in ns.app:
        slug, _, raw = item.partition("=")
        apps[slug] = build_engine_app(json.loads(raw))
    uvicorn.run(
        PrefixRouter(apps),
        host=ns.host,
        port=ns.port,
        log_level=ns.log_level,
        access_log=False,
        lifespan="on",
    )


if __name__ == "__main__":
    main()
