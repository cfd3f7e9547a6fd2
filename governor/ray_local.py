"""A private, real Ray cluster on free ports (tests, benchmarks, screenshots): started with the
``ray`` CLI, torn down by process group.

``start_ray_cluster()`` runs ``ray start --head`` in a new session (so everything it spawns shares
one process group) with free ports, its own ``--temp-dir``, the dashboard on 127.0.0.1 and the
repository on ``PYTHONPATH`` (workers import ``engines``, ``deployments``...). ``stop`` kills that
process group only: never ``ray stop``, which would also stop other people's clusters.

Tests use the ``ray_cluster`` fixture (``tests.support.ray_cluster``, module scope); other code
the context manager ``ray_test_cluster()``::

    with ray_test_cluster() as ray_cluster:
        ray_cluster.serve_put({...})          # PUT /api/serve/applications/
        ray_cluster.wait_app_running("app")
        url = f"{ray_cluster.serve_url}/d/slug/v1"

The Serve HTTP proxy listens on ``serve_port`` once a config with ``http_options`` from
``serve_config()`` is PUT (Serve starts on the first deploy).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from procs import free_port, free_ports  # noqa: F401  (free_port: re-exported)

ROOT = Path(__file__).resolve().parents[1]
RAY_BIN = str(Path(sys.executable).with_name("ray"))


@dataclass
class RayTestCluster:
    """Addresses of a running test cluster and the process group to kill."""

    address: str  # GCS address for RAY_ADDRESS / ray.init
    dashboard_url: str
    serve_port: int
    temp_dir: str
    pgid: int
    env: dict[str, str] = field(repr=False, default_factory=dict)

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.serve_port}"

    def serve_config(self, applications: list[dict]) -> dict:
        """A full Serve config for ``applications`` with the proxy on this cluster's private port."""
        return {
            "proxy_location": "HeadOnly",
            "http_options": {"host": "127.0.0.1", "port": self.serve_port},
            "applications": applications,
        }

    def serve_put(self, config: dict, timeout: float = 120.0) -> None:
        """``PUT /api/serve/applications/`` (the declarative API the reconciler uses).

        A 5xx is the cluster still starting (a loaded machine's first PUT, while the Serve controller
        comes up, answered 500): transient, as the reconciler treats it (``deployments.ray_client``).
        The PUT replaces the whole config, so sending it again is safe; until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            r = httpx.put(f"{self.dashboard_url}/api/serve/applications/", json=config, timeout=30.0)
            if r.status_code < 500 or time.monotonic() >= deadline:
                r.raise_for_status()
                return
            time.sleep(1)

    def serve_status(self) -> dict:
        r = httpx.get(f"{self.dashboard_url}/api/serve/applications/", timeout=30.0)
        r.raise_for_status()
        return r.json()

    def wait_app_running(self, name: str, timeout: float = 180.0) -> dict:
        """Poll until application ``name`` is RUNNING and the proxy routes it; raise with the last status
        otherwise."""
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            try:
                last = self.serve_status()
            except httpx.HTTPError:
                time.sleep(1)
                continue
            app = (last.get("applications") or {}).get(name)
            if app and app.get("status") == "RUNNING" and self._routed(app.get("route_prefix")):
                return app
            if app and app.get("status") == "DEPLOY_FAILED":
                raise RuntimeError(f"application {name} failed: {app.get('message')}")
            time.sleep(1)
        raise TimeoutError(f"application {name} not RUNNING after {timeout}s: {last}")

    def _routed(self, prefix: str | None) -> bool:
        """Whether the proxy routes ``prefix`` yet (``GET /-/routes``): it learns a RUNNING app's
        route a moment later, and a request sent in between was answered 404 on a loaded machine."""
        if not prefix:
            return True
        try:
            routes = httpx.get(
                f"{self.serve_url}/-/routes", timeout=5.0
            ).json()  # {prefix: app}; 503: a message
        except (httpx.HTTPError, ValueError):
            return False
        return isinstance(routes, dict) and prefix in routes


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5.0).status_code < 500:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def start_ray_cluster(*, num_cpus: int = 2, object_store_memory: int = 100_000_000) -> RayTestCluster:
    """Start a head node on private ports; returns once the dashboard answers."""
    # Unix socket paths must stay short (<108 bytes), hence a short temp dir under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    # Distinct ports for every component (ports picked one at a time can repeat).
    gcs_port, dash_port, client_port, agent_port, serve_port = free_ports(5)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.pop("RAY_ADDRESS", None)
    cmd = [
        RAY_BIN,
        "start",
        "--head",
        "--port",
        str(gcs_port),
        "--dashboard-port",
        str(dash_port),
        "--dashboard-host",
        "127.0.0.1",
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        str(num_cpus),
        "--object-store-memory",
        str(object_store_memory),
        "--include-dashboard",
        "true",
        "--temp-dir",
        temp_dir,
        "--ray-client-server-port",
        str(client_port),
        "--dashboard-agent-listen-port",
        str(agent_port),
        "--disable-usage-stats",
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=str(ROOT), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    pgid = proc.pid  # session leader: everything ray starts inherits this process group
    out, _ = proc.communicate(timeout=180)
    cluster = RayTestCluster(
        address=f"127.0.0.1:{gcs_port}",
        dashboard_url=f"http://127.0.0.1:{dash_port}",
        serve_port=serve_port,
        temp_dir=temp_dir,
        pgid=pgid,
        env={**env, "RAY_ADDRESS": f"127.0.0.1:{gcs_port}"},
    )
    if proc.returncode != 0:
        stop_ray_cluster(cluster)
        raise RuntimeError(f"ray start failed ({proc.returncode}):\n{out.decode(errors='replace')[-4000:]}")
    try:
        _wait_http(f"{cluster.dashboard_url}/api/version", timeout=120)
    except TimeoutError:
        stop_ray_cluster(cluster)
        raise
    return cluster


def _group_members(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getpgid(int(entry)) == pgid:
                pids.append(int(entry))
    return pids


def _raylet_pids(pgid: int) -> set[bytes]:
    pids = set()
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError):
            if b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.add(str(pid).encode())
    return pids


def _kill_descendants_of_raylets(raylets: set[bytes]) -> None:
    """SIGKILL processes that replicas started in sessions of their own (a vLLM server and its
    EngineCore): they carry ``RAY_RAYLET_PID`` in their environment but are outside the group."""
    markers = [b"RAY_RAYLET_PID=" + pid for pid in raylets]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            if any(marker in environ for marker in markers):
                os.kill(int(entry), signal.SIGKILL)


def stop_ray_cluster(cluster: RayTestCluster, timeout: float = 8.0) -> None:
    """SIGTERM, then SIGKILL, the process group ``ray start`` created; remove its temp dir."""
    raylets = _raylet_pids(cluster.pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(cluster.pgid, sig)
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline and _group_members(cluster.pgid):
            time.sleep(0.2)
        if not _group_members(cluster.pgid):
            break
    _kill_descendants_of_raylets(raylets)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def ray_test_cluster(**kwargs) -> Iterator[RayTestCluster]:
    """Context manager around ``start_ray_cluster``/``stop_ray_cluster``."""
    cluster = start_ray_cluster(**kwargs)
    try:
        yield cluster
    finally:
        stop_ray_cluster(cluster)
