"""A stage spread over load workers (``loadtest.distributed``): split, run, merged exactly.

The split and the merge are checked on their own (no server): the shares are the one schedule, and
a lost, doubled, misplaced or re-timed record is refused. Then real runs against the paced server,
from spawned worker processes and from Ray actors on a real local cluster: every scheduled arrival
comes back once, from the worker it was given to, the figures are those of the merged records, and
the counts add up to what the server itself counted on its ``/metrics``.
"""

from __future__ import annotations

import os
import random
import urllib.request
from dataclasses import replace

import pytest

from engines.workload import Workload, constant, fixed, fixed_concurrency, poisson, uniform
from loadtest import Sla, StageConfig, SweepConfig, Target, find_capacity, run_stage
from loadtest.distributed import (
    MergeError,
    WorkerPool,
    WorkerReport,
    merge_records,
    run_stage_distributed,
    split_plan,
    stage_fn,
)
from loadtest.loadgen import MODE_CONCURRENCY, MODE_RATE
from loadtest.metrics import summarize
from loadtest.records import RequestRecord
from loadtest.runner import build_plan, counter_for
from loadtest.scrape import parse_prometheus
from tests.support.ray_cluster import ray_cluster  # noqa: F401  (module-scoped fixture)
from tests.support.servers import paced_server

COUNTERS = (
    "paced:requests_received_total",
    "vllm:request_success_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
)
# Figures of metrics.summarize that depend on the records alone (not on their order).
FIGURES = (
    "requests", "completed", "failed", "errors", "duration_s", "input_tokens", "output_tokens",
    "request_throughput", "output_token_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
    "schedule_delay_ms", "good_requests", "attainment", "request_goodput", "token_goodput",
)  # fmt: skip


def _target(url: str) -> Target:
    return Target(base_url=url, model="paced", request_timeout_s=30.0)


def _counters(url: str) -> dict[str, float]:
    """The server's own counters. The target's token counter is learned first (it may probe the
    server with requests of its own), so that only the stage's requests fall between two reads."""
    counter_for(_target(url))
    with urllib.request.urlopen(_target(url).metrics_url, timeout=10) as resp:
        values = parse_prometheus(resp.read().decode(), names=COUNTERS)
    return {name: values.get(name, 0.0) for name in COUNTERS}


def _same(a, b) -> bool:
    """Equal, numbers up to the last few bits (a sum in another order rounds differently)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return a == b


def _delta(before: dict, after: dict) -> dict[str, int]:
    return {k.split(":")[1]: int(after[k] - before[k]) for k in COUNTERS}


# --- the split and the merge, without a server


def test_the_shares_are_the_one_schedule_dealt_round_robin():
    wl = Workload(arrival=poisson(80), input=uniform(4, 40), output=uniform(2, 30))
    stage = StageConfig(duration_s=3.0, seed=7)
    plan = build_plan(wl, stage)
    shares = split_plan(plan, stage, _target("http://127.0.0.1:9/v1"), 4)
    assert sorted(shares) == [0, 1, 2, 3]
    for j, share in shares.items():
        assert [r.index for r in share.requests] == [r.index for r in plan.requests[j::4]]
    # The union, request by request, is what one process would have sent: same instants, same
    # prompts, same lengths (the sampled schedule does not depend on how many workers send it).
    union = sorted((r for s in shares.values() for r in s.requests), key=lambda r: r.index)
    assert [r.to_row() for r in union] == [r.to_row() for r in plan.requests]
    assert plan.requests == build_plan(wl, stage).requests

    # Fewer requests than workers: every request still has a worker, and no worker an empty share.
    few = build_plan(wl, StageConfig(num_requests=3, seed=1))
    small = split_plan(few, stage, _target("http://127.0.0.1:9/v1"), 8)
    assert sorted(r.index for s in small.values() for r in s.requests) == [0, 1, 2]
    assert all(s.requests for s in small.values())

    # A closed loop: its concurrency is divided, and with fewer slots than workers every request
    # still belongs to a worker that has a slot to send it.
    loop = build_plan(Workload(arrival=fixed_concurrency(3), input=fixed(8), output=fixed(8)),
                      StageConfig(num_requests=10))  # fmt: skip
    parts = split_plan(loop, StageConfig(num_requests=10), _target("http://127.0.0.1:9/v1"), 4)
    assert sum(s.concurrency for s in parts.values()) == 3 and all(s.concurrency for s in parts.values())
    assert sorted(r.index for s in parts.values() for r in s.requests) == list(range(10))
    assert all(s.mode == MODE_CONCURRENCY for s in parts.values())


def _reports(shares) -> list[WorkerReport]:
    """What the workers would return had every request of their share gone out on time."""
    reports = []
    for j, share in shares.items():
        recs = [
            RequestRecord(index=r.index, planned_s=round(r.offset_s, 6), sent_s=round(r.offset_s, 6) + 0.001,
                          chunk_s=[r.offset_s + 0.05], prompt_tokens=r.prompt_tokens, output_tokens=1, worker=j)
            for r in share.requests
        ]  # fmt: skip
        reports.append(WorkerReport(worker=j, host="h", pid=j, cpu_s=0.0, records=recs))
    return reports


def test_merge_is_exact_and_refuses_lost_doubled_or_misplaced_records():
    wl = Workload(arrival=constant(50), input=fixed(8), output=fixed(4))
    plan = build_plan(wl, StageConfig(duration_s=1.0))
    shares = split_plan(plan, StageConfig(duration_s=1.0), _target("http://127.0.0.1:9/v1"), 3)
    reports = _reports(shares)
    random.Random(3).shuffle(reports)
    merged = merge_records(reports, shares, mode=MODE_RATE)
    assert [r.index for r in merged] == list(range(50))
    assert [r.planned_s for r in merged] == sorted(r.planned_s for r in merged)
    assert all(r.worker == r.index % 3 for r in merged)

    lost = _reports(shares)
    lost[1].records.pop(4)
    with pytest.raises(MergeError, match="1 scheduled requests never came back"):
        merge_records(lost, shares, mode=MODE_RATE)
    doubled = _reports(shares)
    doubled[0].records.append(doubled[0].records[0])
    with pytest.raises(MergeError, match="came back twice"):
        merge_records(doubled, shares, mode=MODE_RATE)
    stolen = _reports(shares)
    stolen[0].records.append(stolen[1].records.pop())
    stolen[0].records[-1].worker = 0
    with pytest.raises(MergeError, match="which was not given it"):
        merge_records(stolen, shares, mode=MODE_RATE)
    mislabelled = _reports(shares)
    mislabelled[2].records[0].worker = 1
    with pytest.raises(MergeError, match="stamped for worker 1"):
        merge_records(mislabelled, shares, mode=MODE_RATE)
    retimed = _reports(shares)
    retimed[0].records[2].planned_s += 0.01
    with pytest.raises(MergeError, match="was planned at"):
        merge_records(retimed, shares, mode=MODE_RATE)
    # A closed loop stopped by time sent only part of its queue: a subset merges, a double does not.
    partial = _reports(shares)
    partial[0].records.pop()
    assert len(merge_records(partial, shares, mode=MODE_CONCURRENCY)) == 49


# --- real runs against the paced server


@pytest.mark.process
def test_four_worker_processes_send_one_stage_and_the_counts_add_up_to_the_servers():
    wl = Workload(arrival=poisson(120), input=uniform(4, 24), output=uniform(2, 12))
    stage = StageConfig(duration_s=2.0, seed=5)
    # Every 7th request the server receives is answered 500: error records merge like the others.
    with paced_server(
        "--ttft-ms", "30", "--tpot-ms", "5", "--fault", "http_500", "--fault-every", "7"
    ) as url:
        with WorkerPool(4) as pool:
            before = _counters(url)
            res = run_stage_distributed(target=_target(url), workload=wl, stage=stage, sla=Sla(), pool=pool)
            seen = _delta(before, _counters(url))
            # The same pool again: workers are kept across stages (a ladder, a sweep).
            loop = run_stage_distributed(
                target=_target(url),
                workload=Workload(arrival=fixed_concurrency(6), input=fixed(8), output=fixed(6)),
                stage=StageConfig(num_requests=30),
                sla=Sla(),
                pool=pool,
            )
        # What one process sends for the same stage (same seed): the schedule the workers split.
        one = run_stage(target=_target(url), workload=wl, stage=replace(stage, processes=1), sla=Sla())

    plan = build_plan(wl, stage)
    s = res.summary
    recs = res.records
    # Every scheduled arrival once, at its scheduled instant, from the worker it was dealt to.
    assert sorted(r.index for r in recs) == [r.index for r in plan.requests]
    assert len({r.index for r in recs}) == len(recs) == s["requests"] == len(plan.requests)
    planned = {r.index: r.offset_s for r in plan.requests}
    assert all(r.planned_s == pytest.approx(planned[r.index], abs=2e-6) for r in recs)
    assert all(r.worker == r.index % 4 for r in recs)
    assert [r.planned_s for r in recs] == sorted(r.planned_s for r in recs)
    assert s["offered"]["processes"] == 4 and s["offered"]["backend"] == "process"
    assert len({w["pid"] for w in s["workers"]}) == 4
    assert [w["requests"] for w in s["workers"]] == [len(plan.requests[j::4]) for j in range(4)]
    # ...and it is the schedule one process sends for the same stage.
    assert [r.index for r in one.records] == [r.index for r in recs]
    assert [r.planned_s for r in one.records] == pytest.approx([r.planned_s for r in recs], abs=2e-6)

    # The server counted exactly what the merged records say: every request it received, the
    # streams it finished, the tokens it generated and read.
    assert seen["requests_received_total"] == s["requests"]
    assert seen["request_success_total"] == s["completed"]
    assert s["failed"] == s["errors"]["http_5xx"] > 0
    assert seen["generation_tokens_total"] == s["output_tokens"]
    assert seen["prompt_tokens_total"] == sum(r.prompt_tokens for r in recs if r.ok)

    # The figures are those of the union of the workers' records, computed once, in any order.
    shuffled = list(recs)
    random.Random(11).shuffle(shuffled)
    again = summarize(shuffled, sla=Sla())
    for key in FIGURES:
        assert _same(s[key], again[key]), key

    # The closed loop: every request of the queue once, its 6 slots divided over the 4 workers.
    assert sorted(r.index for r in loop.records) == list(range(30))
    assert loop.summary["failed"] == sum(1 for r in loop.records if not r.ok)
    assert sum(1 for w in loop.summary["workers"] if w["requests"]) == 4


@pytest.mark.process
@pytest.mark.slow  # several stages
def test_a_sweep_runs_through_the_workers():
    # 4 service slots of 50 ms + 7 * 10 ms = 0.12 s each: the hard capacity is 33 req/s.
    with (
        paced_server("--ttft-ms", "50", "--tpot-ms", "10", "--max-running", "4") as url,
        WorkerPool(2) as pool,
    ):
        result = find_capacity(
            target=_target(url),
            workload=Workload(arrival=constant(1), input=fixed(8), output=fixed(8)),
            stage=StageConfig(duration_s=1.5),
            sla=Sla(ttft_ms=300, tpot_ms=30),
            sweep=SweepConfig(start_rate=8, rel_tol=0.2, max_stages=6),
            stage_fn=stage_fn(pool),
        )
    stages = result["stages"]
    for st in stages:
        # Both workers send, except in a stage with a single request (on a busy host the search may
        # step down to such a rate): a share is never empty (loadtest.distributed.split_plan).
        sent = sum(w["requests"] for w in st["workers"])
        assert st["offered"]["processes"] == len(st["workers"]) == min(2, sent) and st["failed"] == 0
    # It brackets the slots' capacity: a rate passed, and none above the SLA knee did (33 req/s hard,
    # 33 * (1 + 0.25 / (0.9 * 1.5)) = 39.5 with the TTFT slack; how close it lands is load).
    assert result["bracket"][0] is not None and result["capacity_rate"] < 40


@pytest.mark.ray
@pytest.mark.slow
def test_ray_actors_on_a_real_cluster_send_one_stage_merged_exactly(ray_cluster):  # noqa: F811
    wl = Workload(arrival=constant(60), input=fixed(8), output=fixed(6))
    stage = StageConfig(duration_s=2.0, seed=3)
    with (
        paced_server("--ttft-ms", "30", "--tpot-ms", "5") as url,
        WorkerPool(2, backend="ray", ray_address=ray_cluster.address, ray_num_cpus=1) as pool,
    ):
        before = _counters(url)
        res = run_stage_distributed(target=_target(url), workload=wl, stage=stage, sla=Sla(), pool=pool)
        seen = _delta(before, _counters(url))
    pids = {w["pid"] for w in res.summary["workers"]}
    s = res.summary
    plan = build_plan(wl, stage)
    assert s["offered"]["backend"] == "ray" and s["offered"]["processes"] == 2
    # The actors are processes of the cluster, not of this test.
    assert len(pids) == 2 and os.getpid() not in pids
    assert [r.index for r in res.records] == [r.index for r in plan.requests]
    assert all(r.worker == r.index % 2 for r in res.records)
    assert s["failed"] == 0 and s["completed"] == len(plan.requests) == 120
    assert seen["requests_received_total"] == seen["request_success_total"] == 120
    assert seen["generation_tokens_total"] == s["output_tokens"] == 120 * 6
    # The actors' clocks were measured against this process's (one host here: they agree).
    assert all(abs(w["clock_offset_ms"]) < 50 for w in s["workers"])
