"""Fixtures for the engine tests: real ``python -m engines.server`` processes on free ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.ray_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]


class SimServer:
    """A running simulated-vLLM server process."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self._fh = open(log, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engines.server", "--port", str(self.port), *args],
            cwd=str(ROOT),
            env=env,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start")

    @property
    def v1(self) -> str:
        return f"{self.base}/v1"

    def metrics(self) -> dict[str, float]:
        """Unlabelled view of /metrics: ``name`` or ``name{extra labels}`` -> value."""
        out = {}
        for line in httpx.get(f"{self.base}/metrics", timeout=5).text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            key = key.replace('model_name="sim",', "").replace('{model_name="sim"}', "")
            out[key] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


@pytest.fixture(scope="module")
def start_server(tmp_path_factory) -> Iterator:
    """Factory: ``start_server(*cli_args)`` -> SimServer; all stopped at module end."""
    servers: list[SimServer] = []

    def start(*args: str) -> SimServer:
        log = tmp_path_factory.mktemp("sim") / "server.log"
        srv = SimServer(["--model-name", "sim", *args], log)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()
