"""Local servers on free ports, each a real process (or thread) stopped on exit: the harness's paced
server, the engines' simulated vLLM, and a stand-in for Ray Serve's ``/d/<slug>`` proxy.

Product code, not test code: the tests and the benchmarks (``benchmarks.gates``) both start them,
and product code never imports ``tests``. Standard library only; the engines are started by module
name, never imported."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, *, timeout_s: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@contextlib.contextmanager
def paced_server(*args: str) -> Iterator[str]:
    """``python -m loadtest.paced_server ARGS`` on a free port; yields its ``/v1`` base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest.paced_server", "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def engines_fixed_server(ttft_ms: float, tpot_ms: float, *extra: str) -> Iterator[str]:
    """The engines' simulated vLLM in fixed-timing mode (``python -m engines.server --fixed-...``)."""
    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--port", str(port), "--model-name", "paced"]
    cmd += ["--fixed-ttft-ms", str(ttft_ms), "--fixed-tpot-ms", str(tpot_ms), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc, timeout_s=60)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def simulated_engine(*, model_name: str, quality: dict | None = None, time_scale: float = 50.0,
                     max_model_len: int = 8192, max_num_seqs: int = 48) -> Iterator[str]:  # fmt: skip
    """The simulated vLLM (Llama-3.1-8B on an H100) with a quality profile; yields its root URL."""
    import json

    port = free_port()
    cmd = [sys.executable, "-m", "engines.server", "--port", str(port), "--model-name", model_name,
           "--gpu", "H100", "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
           "--time-scale", str(time_scale)]  # fmt: skip
    if quality:
        cmd += ["--quality-json", json.dumps(quality)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc, timeout_s=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def prefix_router(routes: dict[str, str]) -> Iterator[str]:
    """What Ray Serve's proxy does for deployments: ``/d/<slug>/...`` → ``routes[slug] + /...``.

    Non-streaming only (eval requests); yields the root URL to use as ``RAY_SERVE_URL``.
    """
    import threading
    import urllib.error
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
