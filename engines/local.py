"""Engine servers on this machine, as child processes on free ports: for tests, benchmarks and demos.

``simulated_engine`` and ``engines_fixed_server`` start ``python -m engines.server``;
``paced_server`` the load harness's paced server; ``prefix_router`` stands in for Ray Serve's proxy
(``/d/<slug>/...`` to one engine per slug). Each yields a URL and stops its process on exit.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from procs import free_port, http_child


@contextlib.contextmanager
def paced_server(*args: str) -> Iterator[str]:
    """``python -m loadtest.paced_server ARGS`` on a free port; yields its ``/v1`` base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "loadtest.paced_server", "--port", str(port), *args]
    with http_child(argv, health_url=f"http://127.0.0.1:{port}/health", timeout_s=20):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def engines_fixed_server(ttft_ms: float, tpot_ms: float, *extra: str) -> Iterator[str]:
    """The simulated vLLM in fixed-timing mode (``--fixed-ttft-ms``/``--fixed-tpot-ms``); yields ``/v1``."""
    port = free_port()
    argv = [sys.executable, "-m", "engines.server", "--port", str(port), "--model-name", "paced"]
    argv += ["--fixed-ttft-ms", str(ttft_ms), "--fixed-tpot-ms", str(tpot_ms), *extra]
    with http_child(argv, health_url=f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def simulated_engine(
    *,
    model_name: str,
    quality: dict | None = None,
    time_scale: float = 50.0,
    max_model_len: int = 8192,
    max_num_seqs: int = 48,
) -> Iterator[str]:
    """The simulated vLLM (Llama-3.1-8B on an H100) with a quality profile; yields its root URL."""
    port = free_port()
    argv = [sys.executable, "-m", "engines.server", "--port", str(port), "--model-name", model_name,
            "--gpu", "H100", "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
            "--time-scale", str(time_scale)]  # fmt: skip
    if quality:
        argv += ["--quality-json", json.dumps(quality)]
    with http_child(argv, health_url=f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def prefix_router(routes: dict[str, str]) -> Iterator[str]:
    """What Ray Serve's proxy does for deployments: ``/d/<slug>/...`` → ``routes[slug] + /...``.

    Non-streaming only (eval requests); yields the root URL to use as ``RAY_SERVE_URL``.
    """

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            parts = self.path.split("/", 3)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if len(parts) < 4 or parts[1] != "d" or parts[2] not in routes:
                status, data, ctype = 404, b'{"error": "no such deployment"}', "application/json"
            else:
                request = urllib.request.Request(
                    f"{routes[parts[2]]}/{parts[3]}", data=body, method=self.command,
                    headers={"Content-Type": self.headers.get("Content-Type") or "application/json"},
                )  # fmt: skip
                try:
                    with urllib.request.urlopen(request, timeout=300) as resp:
                        status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
                except urllib.error.HTTPError as exc:
                    status, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
            self.send_response(status)
            self.send_header("Content-Type", ctype or "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="prefix-router", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
