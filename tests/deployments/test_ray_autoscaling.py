"""Autoscaling on a real, private Ray cluster (ADR 0038): a simulated-engine deployment with
autoscaling 1..2, a low target and short delays, compiled by the reconciler, scales up under a step
of concurrent streaming requests to its Ray Serve route and back to the minimum after, with each
move on its timeline as a ``replicas`` event (what GPU-hours, idle cost and the chart read).

The reconciles run in-process (``void_queue``); the test waits on Ray's reports with deadlines.
Ray sees load through its metric push interval (10 s by default), so each wait allows minutes.
"""

from __future__ import annotations

import threading
import time

import openai
import pytest
from django.db import connections
from django.utils import timezone

from catalog.models import GpuType
from deployments import services
from deployments.models import Deployment
from deployments.reconciler import deployments_observe, deployments_reconcile
from deployments.selectors.replicas import replica_history
from tests.deployments.conftest import wait_for
from tests.deployments.factories import llama_8b_version
from tests.factories import GpuTypeFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.ray, pytest.mark.slow]

STREAMS = 8  # requests in flight during the step: 4× the target of one replica


class StreamingLoad:
    """``STREAMS`` threads, each streaming completions back to back with the ``openai`` client until
    stopped (bounded by ``max_s`` whatever happens)."""

    def __init__(self, base_url: str, max_s: float = 300.0) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
        self.stop_at = time.monotonic() + max_s
        self.done = threading.Event()
        self.completed = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(STREAMS)]

    def _run(self) -> None:
        while not self.done.is_set() and time.monotonic() < self.stop_at:
            try:
                chunks = list(self.client.completions.create(model="llama-sim", prompt="scale me", max_tokens=48,
                                                             stream=True, stream_options={"include_usage": True}))  # fmt: skip
                assert chunks[-1].usage.completion_tokens == 48
                with self.lock:
                    self.completed += 1
            except Exception as exc:  # noqa: BLE001 - collected and asserted: scaling drops no request
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)

    def __enter__(self) -> StreamingLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for t in self.threads:
            t.join(90)


def _replicas(d: Deployment) -> int:
    deployments_observe()
    d.refresh_from_db()
    return d.running_replicas if d.status == "RUNNING" else -1


def _ray_autoscaling_config(cluster, slug: str) -> dict:
    app = (cluster.serve_status().get("applications") or {}).get(slug) or {}
    engine = (app.get("deployments") or {}).get("SimulatedVLLM") or {}
    return (engine.get("deployment_config") or {}).get("autoscaling_config") or {}


def test_an_autoscaled_deployment_scales_up_under_load_and_back_to_its_minimum(
    ray_env, void_queue, admin_user
):
    d, _ = services.deployment_create(
        actor=admin_user, name="elastic", slug="elastic", model_version=llama_8b_version(), engine_kind="simulated",
        gpu_type=GpuType.objects.filter(name="H100 SXM").first() or GpuTypeFactory(), served_model_name="llama-sim",
        max_model_len=8192, max_num_seqs=32, max_num_batched_tokens=8192, time_scale=1.0,
        scaling_mode="autoscaling", min_replicas=1, max_replicas=2, target_ongoing_requests=2,
        upscale_delay_s=1, downscale_delay_s=4, look_back_period_s=12,
    )  # fmt: skip
    started = timezone.now()
    deployments_reconcile(trigger="test")
    wait_for(lambda: _replicas(d) == 1, timeout=240, interval=1, what="elastic RUNNING on its minimum")
    # Ray holds what the reconciler compiled, delays included.
    ray_side = _ray_autoscaling_config(ray_env, "elastic")
    assert (ray_side.get("min_replicas"), ray_side.get("max_replicas")) == (1, 2), ray_side
    assert (ray_side.get("upscale_delay_s"), ray_side.get("downscale_delay_s")) == (1.0, 4.0), ray_side
    assert ray_side.get("target_ongoing_requests") == 2, ray_side

    with StreamingLoad(d.openai_base_url) as load:
        stepped = time.monotonic()
        wait_for(lambda: _replicas(d) == 2, timeout=180, interval=0.5, what="a second replica under load")
        print(f"\nscale up: {time.monotonic() - stepped:.1f} s after the step in load")
        # The added replica is RUNNING (Ray routes to it) while the load goes on.
        engine = next(x for x in d.ray_deployments if x["name"] == "SimulatedVLLM")
        assert [r["state"] for r in engine["replicas"]] == ["RUNNING", "RUNNING"]
        served_before = load.completed
        wait_for(
            lambda: load.completed >= served_before + STREAMS,
            timeout=60,
            what="requests served on two replicas",
        )
    assert load.completed > 0 and load.errors == [], load.errors[:3]

    ended = time.monotonic()
    wait_for(lambda: _replicas(d) == 1, timeout=180, interval=0.5, what="back to the minimum after the load")
    print(f"scale down: {time.monotonic() - ended:.1f} s after the load ended")
    moves = [(e.before["running_replicas"], e.after["running_replicas"])
             for e in d.events.filter(kind="replicas").order_by("id")]  # fmt: skip
    assert (1, 2) in moves and moves[-1] == (2, 1), moves
    history = replica_history(deployment=d, since=started, until=timezone.now())
    assert history.peak == 2 and history.points[-1][1] == 1 and history.replica_hours > 0

    # A change of delays while it runs is sent to Ray and held there.
    services.deployment_scale(
        deployment=d, actor=admin_user, scaling_mode="autoscaling", downscale_delay_s=30
    )
    deployments_reconcile(trigger="test")
    wait_for(lambda: _ray_autoscaling_config(ray_env, "elastic").get("downscale_delay_s") == 30.0, timeout=60,
             what="Ray holding the new downscale delay")  # fmt: skip
    connections.close_all()
