"""The decision trees over synthetic evidence: each cause the playbooks name is picked when its
evidence alone moved, with its numbers, and the other branches are ruled out."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from operations.diagnosis import diagnose

T = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def rows(
    n, *, dep="dep-a", prompt=200, output=100, cached=0, ttft=150.0, tpot=20.0, status="ok", http=200, seed=0
):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        jitter = 1 + rnd.uniform(-0.1, 0.1)
        out.append({
            "started_at": T + dt.timedelta(seconds=i), "deployment_id": 1, "deployment_slug": dep, "version_id": 1,
            "prompt_tokens": int(prompt * jitter), "completion_tokens": int(output * jitter),
            "cached_tokens": int(cached * jitter), "ttft_ms": ttft * jitter if ttft else None,
            "tpot_ms": tpot * jitter if tpot else None, "status": status, "http_status": http, "stream": True,
        })  # fmt: skip
    return out


def baseline():
    return rows(300, dep="dep-a", seed=1) + rows(300, dep="dep-b", seed=2)


def run(window, *, kind="ttft", changes=(), base=None):
    return diagnose(kind=kind, window=window, baseline=base if base is not None else baseline(), window_s=60,
                    baseline_s=360, changes=list(changes))  # fmt: skip


def verdicts(d):
    return {b["cause"]: b["verdict"] for b in d["branches"]}


def test_steady_traffic_names_no_cause():
    d = run(rows(50, dep="dep-a", seed=3) + rows(50, dep="dep-b", seed=4))
    assert d["cause"] is None
    v = verdicts(d)
    assert all(v[c] == "ruled_out" for c in ("deployment_regression", "long_prompts", "longer_outputs", "load_surge",
                                              "recent_change", "errors_one_deployment"))  # fmt: skip
    assert v["kv_pressure"] == "no_data" and v["queue_vs_prefill"] == "no_data"


def test_a_long_prompt_flood():
    d = run(
        rows(50, dep="dep-a", prompt=1600, ttft=900, seed=5)
        + rows(50, dep="dep-b", prompt=1600, ttft=900, seed=6)
    )
    assert d["cause"] == "long_prompts"
    b = next(b for b in d["branches"] if b["cause"] == "long_prompts")
    assert b["evidence"]["ratio"] == pytest.approx(8, rel=0.25) and "p90 prompt" in b["summary"]
    # Both deployments slowed together: not one deployment's regression.
    assert verdicts(d)["deployment_regression"] == "ruled_out"


@pytest.mark.parametrize("kind", ["ttft", "tpot"])
def test_one_deployment_regressed(kind):
    slow = {"ttft": 700.0} if kind == "ttft" else {"tpot": 90.0}
    d = run(rows(50, dep="dep-a", seed=7) + rows(50, dep="dep-b", seed=8, **slow), kind=kind)
    assert d["cause"] == "deployment_regression" and d["summary"].startswith("dep-b")
    assert verdicts(d)["long_prompts"] == "ruled_out"


def test_a_new_release_without_a_baseline_is_compared_with_its_siblings():
    d = run(rows(50, dep="dep-a", seed=9) + rows(50, dep="dep-new", ttft=800, seed=10))
    assert d["cause"] == "deployment_regression" and "other deployments" in d["summary"]


def test_outputs_got_longer():
    d = run(
        rows(50, dep="dep-a", output=400, seed=11) + rows(50, dep="dep-b", output=400, seed=12), kind="tpot"
    )
    assert d["cause"] == "longer_outputs"


def test_a_load_surge():
    d = run(rows(400, dep="dep-a", seed=13) + rows(400, dep="dep-b", seed=14))  # 800 in 60 s vs 600 in 360 s
    assert d["cause"] == "load_surge"
    b = next(b for b in d["branches"] if b["cause"] == "load_surge")
    assert b["evidence"]["rps"] == pytest.approx(800 / 60, rel=0.01)


def test_the_prefix_cache_collapsed():
    base = rows(300, dep="dep-a", cached=120, seed=15) + rows(300, dep="dep-b", cached=120, seed=16)
    d = run(rows(50, dep="dep-a", cached=5, seed=17) + rows(50, dep="dep-b", cached=5, seed=18), base=base)
    assert d["cause"] == "prefix_cache_collapse"


def test_new_traffic_without_the_prefix_is_not_a_cache_collapse():
    def tenant(rs, t):
        return [{**r, "tenant_id": t} for r in rs]

    base = tenant(
        rows(300, dep="dep-a", cached=120, seed=15) + rows(300, dep="dep-b", cached=120, seed=16), 1
    )
    same = tenant(rows(50, dep="dep-a", cached=120, seed=17) + rows(50, dep="dep-b", cached=120, seed=18), 1)
    batch = tenant(
        rows(400, dep="dep-a", seed=19) + rows(400, dep="dep-b", seed=20), 2
    )  # a batch job, no prefix
    d = run(same + batch, base=base)
    b = next(b for b in d["branches"] if b["cause"] == "prefix_cache_collapse")
    assert (
        b["verdict"] == "ruled_out"
        and b["evidence"]["route_cached_share"] < 0.1 < b["evidence"]["cached_share"]
    )
    assert (
        d["cause"] == "load_surge" and d["tenants"]["2"]["rpm"] > 0 and d["tenants"]["2"]["baseline_rpm"] == 0
    )


def test_a_lost_replica_shows_as_errors_on_one_deployment():
    window = rows(40, dep="dep-a", seed=19) + rows(
        30, dep="dep-b", status="error", http=503, ttft=None, tpot=None
    )
    d = run(window, kind="errors")
    assert d["cause"] == "errors_one_deployment" and "dep-b" in d["summary"] and "503" in d["summary"]


def test_a_change_is_named_only_when_nothing_measured_moved():
    change = {
        "at": "2026-12-03T11:58:00Z",
        "action": "rollout.start",
        "actor": "admin",
        "object_repr": "r1",
        "seq": 9,
    }
    d = run(rows(50, dep="dep-a", seed=20) + rows(50, dep="dep-b", seed=21), changes=[change])
    assert d["cause"] == "recent_change" and "rollout.start" in d["summary"]
    d = run(rows(50, dep="dep-a", seed=22) + rows(50, dep="dep-b", ttft=900, seed=23), changes=[change])
    assert d["cause"] == "deployment_regression" and verdicts(d)["recent_change"] == "likely"


def test_price_changes_are_not_releases():
    change = {
        "at": "2026-12-03T11:58:00Z",
        "action": "price.publish",
        "actor": "admin",
        "object_repr": "p",
        "seq": 1,
    }
    assert run(rows(20, seed=24), changes=[change])["cause"] is None


def test_each_named_cause_has_a_playbook_that_names_the_culprit():
    from operations.diagnosis import ENGINE_BRANCHES
    from operations.playbooks import suggest

    d = run(rows(50, dep="dep-a", seed=30) + rows(50, dep="dep-b", ttft=900, seed=31))
    steps = suggest(d)
    assert d["cause"] == "deployment_regression" and "dep-b" in steps[0]["action"]
    causes = {b["cause"] for b in d["branches"]} | {c for c, _ in ENGINE_BRANCHES}
    for cause in causes:
        assert suggest({"cause": cause, "branches": []}), cause
    assert suggest({"cause": None, "branches": []}) == []


def test_requests_without_a_deployment_are_named_as_such_not_none():
    from operations.playbooks import suggest

    window = [{**r, "deployment_id": None, "deployment_slug": ""} for r in rows(50, ttft=900, seed=40)]
    base = [{**r, "deployment_id": None, "deployment_slug": ""} for r in rows(300, seed=41)]
    d = run(window, base=base)
    assert d["cause"] == "deployment_regression"
    assert d["summary"].startswith("(no deployment recorded)") and "None" not in d["summary"]
    assert "None" not in suggest(d)[0]["action"]
