"""Start real engine processes for the evaluations tests: the harness's paced server on a free port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
