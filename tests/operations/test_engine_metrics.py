"""The engines' /metrics, read with prometheus_client's parser: vLLM's names as the simulated engine
exposes them and as vLLM writes them (engine-labelled, ``_total`` counters), scraped over real HTTP
from the deployments behind SLO routes, turned into rates, and read by the diagnosis."""

from __future__ import annotations

import datetime as dt
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from engines.metrics import Metrics
from operations import engine_metrics
from operations.diagnosis import kv_pressure, queue_vs_prefill

# As vLLM 0.x (V1 engine) writes them: one label set per engine core.
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 12.0
vllm:num_preemptions_total{engine="1",model_name="m"} 0.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 1.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 4.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 2.0
"""


def test_vllms_exposition_sums_engine_cores_and_keeps_the_fullest_kv():
    v = engine_metrics.parse(VLLM_TEXT)
    assert v["running"] == 5 and v["waiting"] == 7 and v["preemptions"] == 12
    assert v["kv_usage"] == pytest.approx(0.97)  # the core that preempts, not an average
    assert (v["queue_sum"], v["queue_count"]) == (2.0, 4.0)
    assert "prefix_hits" not in v  # not exported: absent, not zero


def test_the_simulated_engines_exposition_parses_the_same_way():
    engine = SimpleNamespace(num_running=4, num_waiting=9, kv_usage=0.5, prefix_queries=1000, prefix_hits=250,
                             preemptions=3, prompt_tokens=5000, generation_tokens=800)  # fmt: skip
    m = Metrics("sim")
    m.queue.observe(0.2, 10)
    m.ttft.observe(0.5, 10)
    v = engine_metrics.parse(m.render(engine).decode())
    assert (v["running"], v["waiting"], v["prefix_queries"], v["prefix_hits"]) == (4, 9, 1000, 250)
    assert v["queue_sum"] == pytest.approx(2.0) and v["ttft_count"] == 10


def test_intervals_and_a_restarted_engine():
    a = {"queue_sum": 1.0, "queue_count": 10, "ttft_sum": 2.0, "ttft_count": 10, "preemptions": 5,
         "prefix_queries": 100, "prefix_hits": 80, "kv_usage": 0.3}  # fmt: skip
    b = {"queue_sum": 9.0, "queue_count": 20, "ttft_sum": 12.0, "ttft_count": 20, "preemptions": 25,
         "prefix_queries": 200, "prefix_hits": 90, "kv_usage": 0.95}  # fmt: skip
    i = engine_metrics.interval(a, b, 10.0)
    assert i["queue_mean_s"] == pytest.approx(0.8) and i["ttft_mean_s"] == pytest.approx(1.0)
    assert i["preemptions_per_s"] == pytest.approx(2.0) and i["prefix_hit_rate"] == pytest.approx(0.1)
    restarted = engine_metrics.interval(b, a, 10.0)
    assert restarted["preemptions_per_s"] is None and restarted["queue_mean_s"] is None


def test_the_engine_branches_of_the_diagnosis():
    window = {"7": {"queue_mean_s": 0.8, "ttft_mean_s": 1.0, "kv_usage": 0.97, "preemptions_per_s": 2.0}}
    base = {"7": {"queue_mean_s": 0.01, "ttft_mean_s": 0.15, "kv_usage": 0.4, "preemptions_per_s": 0.0}}
    q = queue_vs_prefill(window, base)
    assert q.verdict == "likely" and "800 ms of a 1000 ms TTFT" in q.summary
    k = kv_pressure(window, base)
    assert k.verdict == "likely" and "97% full" in k.summary
    calm = {"7": {"queue_mean_s": 0.01, "ttft_mean_s": 0.9, "kv_usage": 0.5, "preemptions_per_s": 0.0}}
    assert queue_vs_prefill(calm, base).verdict == "ruled_out"
    assert kv_pressure(calm, base).verdict == "ruled_out"
    assert queue_vs_prefill({}, {}).verdict == "no_data"


class _MetricsServer:
    def __init__(self, text: str):
        self.text = text

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if not self.path.endswith("/metrics"):
                    self.send_response(404)
                    self.end_headers()
                    return
                body = outer.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.django_db
def test_the_scraper_samples_the_engines_behind_slo_routes_over_http(settings, admin_user):
    from operations.models import EngineSample
    from operations.scrape import engine_latest, engines_scrape
    from operations.services import slo_create
    from tests.deployments.rollout_fixtures import route_with_canary

    server = _MetricsServer(VLLM_TEXT)
    try:
        settings.RAY_SERVE_URL = server.url
        setup = route_with_canary()
        from deployments.models import Deployment, RouteTarget

        RouteTarget.objects.create(route=setup.route, deployment=setup.canary, weight=0)
        Deployment.objects.filter(pk__in=[setup.stable.pk, setup.canary.pk]).update(status="RUNNING")
        assert engines_scrape() == 0  # no SLO on the route: nothing to watch
        slo_create(route=setup.route, kind="ttft", threshold_ms=500, target="0.99", actor=admin_user)
        t0 = dt.datetime.now(dt.UTC)
        assert engines_scrape(now=t0) == 2
        server.text = VLLM_TEXT.replace('vllm:num_preemptions_total{engine="0",model_name="m"} 12.0',
                                        'vllm:num_preemptions_total{engine="0",model_name="m"} 32.0')  # fmt: skip
        assert engines_scrape(now=t0 + dt.timedelta(seconds=10)) == 2
        latest = engine_latest(deployment_ids=[setup.stable.pk])[setup.stable.pk]
        assert latest["preemptions_per_s"] == pytest.approx(2.0) and latest["kv_usage"] == pytest.approx(0.97)
        # An engine that does not answer is recorded as such, not as zeros.
        settings.RAY_SERVE_URL = "http://127.0.0.1:9"
        assert engines_scrape(now=t0 + dt.timedelta(seconds=20)) == 0
        assert EngineSample.objects.exclude(error="").count() == 2
    finally:
        server.close()
