"""Fault injection on the simulated engine, through the real engine ASGI app and engines.multi."""

from __future__ import annotations

import time

import httpx
import pytest

from engines.faults import FaultError, Faults, FaultyApp, engine_args
from engines.multi import PrefixRouter
from engines.server import build_engine_app

BODY = {"model": "m", "prompt": "hello", "max_tokens": 4}


def _app(**faults):
    return build_engine_app(
        {"model_name": "m", "fixed_ttft_ms": 5, "fixed_tpot_ms": 2, **({"faults": faults} if faults else {})}
    )


async def _post(app, path="/v1/completions"):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as c:
        t = time.perf_counter()
        r = await c.post(path, json=BODY)
        return r, time.perf_counter() - t


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ({"error_rate": 1.5}, "error_rate"),
        ({"decode_slowdown": 0.5}, "decode_slowdown"),
        ({"ttft_extra_ms": -1}, "ttft_extra_ms"),
        ({"latency": 3}, "unknown fault settings"),
        ({"error_rate": "lots"}, "numbers"),
    ],
)
def test_bad_fault_settings_are_refused(faults, message):
    with pytest.raises(FaultError, match=message):
        Faults.from_dict(faults)


def test_no_faults_leaves_the_engine_app_unwrapped():
    assert not isinstance(_app(), FaultyApp)
    assert Faults.from_dict({"error_rate": 0, "decode_slowdown": 1}).as_dict() == {}


async def test_error_rate_one_answers_500_in_openai_shape():
    r, _ = await _post(_app(error_rate=1.0))
    assert r.status_code == 500 and r.json()["error"]["code"] == "injected_fault"


async def test_extra_ttft_delays_the_response_and_models_are_untouched():
    app = _app(ttft_extra_ms=300)
    r, elapsed = await _post(app)
    assert r.status_code == 200 and elapsed >= 0.3
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as c:
        assert (await c.get("/v1/models")).json()["data"][0]["id"] == "m"


def test_decode_slowdown_scales_fixed_tpot_or_the_model_clock():
    assert engine_args({"fixed_tpot_ms": 10, "faults": {"decode_slowdown": 3}})["fixed_tpot_ms"] == 30
    assert engine_args({"time_scale": 1.0, "faults": {"decode_slowdown": 4}})["time_scale"] == 0.25


async def test_multi_serves_each_engine_under_its_route_prefix():
    router = PrefixRouter({"ok": _app(), "bad": _app(error_rate=1.0)})
    assert (await _post(router, "/d/ok/v1/completions"))[0].status_code == 200
    assert (await _post(router, "/d/bad/v1/completions"))[0].status_code == 500
    assert (await _post(router, "/d/none/v1/completions"))[0].status_code == 404
