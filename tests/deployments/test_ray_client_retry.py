"""The Ray dashboard client tolerates a slow head node: a request that times out is retried."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployments import ray_client


@pytest.fixture
def slow_then_fast_dashboard(settings, monkeypatch):
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            calls.append(time.monotonic())
            if len(calls) == 1:
                time.sleep(1.5)  # longer than the client's timeout below
            body = json.dumps({"applications": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.RAY_DASHBOARD_URL = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(ray_client, "BACKOFF_S", 0.05)
    yield calls
    server.shutdown()


def test_a_timed_out_get_is_retried_and_succeeds(slow_then_fast_dashboard):
    assert ray_client.get_applications(timeout=0.5) == {"applications": {}}
    assert len(slow_then_fast_dashboard) == 2


def test_an_unreachable_dashboard_is_reported_after_the_attempts(settings, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.RAY_DASHBOARD_URL = f"http://127.0.0.1:{port}"
    monkeypatch.setattr(ray_client, "BACKOFF_S", 0.01)
    with pytest.raises(ray_client.RayUnreachable, match=f"after {ray_client.ATTEMPTS} attempts"):
        ray_client.get_applications(timeout=1)
