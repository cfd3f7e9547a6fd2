"""Run stages of load: one offered rate or concurrency at a time, over one or more client processes.

``run_stage`` is the unit: it samples the stage's schedule from the workload (``engines.workload``),
warms the server up, spreads the requests over client processes, scrapes the engine's
``/metrics`` meanwhile, merges the records and summarises them (``metrics.summarize``).
``run_ladder`` runs a list of rates or concurrencies; ``sweep.find_capacity`` searches rates.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import orjson

from engines.workload import Arrival, Workload

from .client import Target
from .loadgen import MODE_CONCURRENCY, MODE_RATE, PlannedRequest, ProcessPlan, run_async, run_process_plan
from .metrics import Sla, length_report, offered_rate_report, summarize
from .prompts import _WORDS, PromptLengthError, build_prompts
from .records import RequestRecord
from .scrape import MetricsScraper
from .tokens import TokenCounter, token_counter_for

# One uvloop process keeps about this many 20 token/s streams on time on the reference machine
# (docs/benchmarks.md); above it the load is split over more client processes.
STREAMS_PER_PROCESS = 1500
# Seconds the client processes get between "ready" and the epoch, so none starts late.
EPOCH_LEAD_S = 0.3

Progress = Callable[[float, str], None]


class HarnessError(RuntimeError):
    """The harness itself could not run (bad config, a client process died): not a server error."""


@dataclass(slots=True)
class StageConfig:
    """How much load one stage sends and how it stops."""

    duration_s: float | None = (
        30.0  # rate stages: arrivals within this window; concurrency: stop sending after it
    )
    num_requests: int | None = None  # stop by count instead (or as well, for concurrency stages)
    warmup_requests: int = 0  # sent before the stage at low concurrency and discarded
    processes: int = 0  # client processes; 0 = auto from the expected number of open streams
    scrape_interval_s: float = 1.0
    drain_s: float = 0.0  # max wait for stragglers after the last send; 0 = the request timeout
    seed: int = 0

    def to_dict(self) -> dict:
        return {
            "duration_s": self.duration_s,
            "num_requests": self.num_requests,
            "warmup_requests": self.warmup_requests,
            "processes": self.processes,
            "scrape_interval_s": self.scrape_interval_s,
            "drain_s": self.drain_s,
            "seed": self.seed,
        }


@dataclass(slots=True)
class StageResult:
    """The summary of one stage, its engine series, and (in memory only) its raw records."""

    summary: dict
    series: list[dict]
    records: list[RequestRecord] = field(default_factory=list, repr=False)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**self.summary, "series": self.series, "notes": self.notes}


def arrival_at(arrival: Arrival, level: float) -> Arrival:
    """The workload's arrival process moved to another ladder level (rate, or concurrency)."""
    if arrival.closed_loop:
        return replace(arrival, concurrency=max(1, int(round(level))))
    return replace(arrival, rate=float(level))


@dataclass(slots=True)
class Plan:
    """A stage's schedule: mode, requests, concurrency and (open loop) the planned window in seconds."""

    mode: str
    requests: list[PlannedRequest]
    concurrency: int
    window_s: float = 0.0
    prefix: dict[int, tuple[int, int]] = field(default_factory=dict)  # index -> (group, prefix tokens)

    def __iter__(self):  # (mode, requests, concurrency), as callers unpack it
        return iter((self.mode, self.requests, self.concurrency))


_COUNTERS: dict[tuple, TokenCounter] = {}


def counter_for(target: Target) -> TokenCounter:
    """The target's token counter, learned once per (server, model, API, tokenizer) in this process."""
    key = (target.base_url, target.model, target.api, target.tokenizer)
    if key not in _COUNTERS:
        probes = [" ".join(_WORDS[(7 * k) % len(_WORDS)] for k in range(n)) for n in (8, 24, 64)]
        _COUNTERS[key] = token_counter_for(target, probe_texts=probes)
    return _COUNTERS[key]


def check_lengths(workload: Workload, sched, counter: TokenCounter) -> None:
    """Refuse a schedule the model cannot serve (nothing is sent): input + output above the context."""
    limit = counter.max_model_len
    if limit is None or not len(sched):
        return
    total = sched.input_len + sched.output_len
    worst = int(total.argmax())
    if int(total[worst]) > limit:
        raise HarnessError(
            f"requested length {int(sched.input_len[worst])} input + {int(sched.output_len[worst])} output "
            f"tokens exceeds the model's context of {limit} tokens: lower the lengths or their maximum"
        )


def build_plan(workload: Workload, stage: StageConfig, counter: TokenCounter | None = None) -> Plan:
    """The stage's schedule (mode, planned requests, concurrency, window), prompts exact for ``counter``."""
    arrival = workload.arrival
    if arrival.closed_loop:
        conc = int(arrival.concurrency or 1)
        n = stage.num_requests
        if n is None:
            # A closed loop stops by time; sample more requests than it can possibly send.
            n = max(conc * 4, conc * int(math.ceil((stage.duration_s or 30.0) * 40)))
        sched = workload.sample_requests(n, seed=stage.seed)
        mode = MODE_CONCURRENCY
    else:
        conc = 0
        if stage.num_requests is not None:
            sched = workload.sample_requests(stage.num_requests, seed=stage.seed)
        else:
            sched = workload.sample_requests(duration=stage.duration_s or 30.0, seed=stage.seed)
        mode = MODE_RATE
    if counter is not None:
        check_lengths(workload, sched, counter)
    try:
        prompts = build_prompts(
            input_len=sched.input_len,
            prefix_group=sched.prefix_group,
            prefix_len=sched.prefix_len,
            seed=stage.seed,
            counter=counter,
        )
    except PromptLengthError as exc:
        raise HarnessError(str(exc)) from exc
    reqs = [
        PlannedRequest(index=i, offset_s=float(a), prompt=p, max_tokens=int(o), prompt_tokens=int(n_in))
        for i, (a, p, o, n_in) in enumerate(
            zip(
                sched.arrival_s.tolist(),
                prompts,
                sched.output_len.tolist(),
                sched.input_len.tolist(),
                strict=True,
            )
        )
    ]
    prefix = {
        i: (int(g), int(p))
        for i, (g, p) in enumerate(zip(sched.prefix_group.tolist(), sched.prefix_len.tolist(), strict=True))
        if g >= 0
    }
    return Plan(mode, reqs, conc, float(sched.window_s), prefix)


def auto_processes(*, mode: str, concurrency: int, requests: list[PlannedRequest], workload: Workload) -> int:
    """Client processes for the expected number of open streams (capped by the CPU count)."""
    if mode == MODE_CONCURRENCY:
        streams = concurrency
    else:
        # Little's law with a pessimistic 60 ms per output token: open streams = rate * stream time.
        span = (requests[-1].offset_s - requests[0].offset_s) if len(requests) > 1 else 1.0
        rate = len(requests) / max(span, 1e-3)
        streams = rate * (0.5 + 0.06 * workload.mean_output_len)
    return max(1, min(os.cpu_count() or 1, int(math.ceil(streams / STREAMS_PER_PROCESS))))


def _split(
    mode: str, reqs: list[PlannedRequest], conc: int, k: int
) -> list[tuple[list[PlannedRequest], int]]:
    """Round-robin requests (and concurrency) over k processes so each sees the same pattern."""
    parts = []
    for j in range(k):
        share = reqs[j::k]
        c = (conc // k + (1 if j < conc % k else 0)) if mode == MODE_CONCURRENCY else 0
        parts.append((share, c))
    return [(s, c) for s, c in parts if s and (mode == MODE_RATE or c > 0)]


def _run_subprocesses(
    plans: list[ProcessPlan], *, progress: Progress | None, expected_s: float
) -> list[RequestRecord]:
    """Start one client process per plan, release them at a common epoch, merge their records.

    Results and stderr go to files, not pipes: a result is one large JSON document, and a file
    has no pipe-buffer semantics to get wrong while we wait for several children at once.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="governor-harness-") as tmp:
        outs = [os.path.join(tmp, f"records-{i}.json") for i in range(len(plans))]
        errs = [open(os.path.join(tmp, f"stderr-{i}.txt"), "wb") for i in range(len(plans))]  # noqa: SIM115
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "loadtest.loadgen", out],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
            for out, err in zip(outs, errs, strict=True)
        ]

        def stderr_of(i: int) -> str:
            errs[i].flush()
            with open(errs[i].name, "rb") as fh:
                return fh.read().decode("utf-8", "replace")[-2000:]

        try:
            for p, plan in zip(procs, plans, strict=True):
                p.stdin.write(plan.to_json() + b"\n")
                p.stdin.flush()
            for i, p in enumerate(procs):
                line = p.stdout.readline()
                if line.strip() != b"ready":
                    p.wait(timeout=5)
                    raise HarnessError(f"client process failed to start: {stderr_of(i) or line!r}")
            epoch = time.time() + EPOCH_LEAD_S
            for p in procs:
                p.stdin.write(f"{epoch!r}\n".encode())
                p.stdin.close()
            started = time.monotonic()
            while any(p.poll() is None for p in procs):
                if progress is not None and expected_s > 0:
                    progress(min(0.99, (time.monotonic() - started) / expected_s), "sending")
                time.sleep(0.25)
            records: list[RequestRecord] = []
            for i, p in enumerate(procs):
                if p.returncode != 0:
                    raise HarnessError(f"client process exited {p.returncode}: {stderr_of(i)}")
                with open(outs[i], "rb") as fh:
                    rows = orjson.loads(fh.read())
                records.extend(RequestRecord.from_row(r) for r in rows)
            return records
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
            for f in errs:
                f.close()


def run_stage(
    *,
    target: Target,
    workload: Workload,
    stage: StageConfig,
    sla: Sla,
    progress: Progress | None = None,
    counter: TokenCounter | None = None,
) -> StageResult:
    """Run one stage against ``target`` and summarise it (never raises for server-side errors).

    Raises ``HarnessError`` before sending anything when the stage cannot be what it names (an
    empty schedule, lengths above the model's context).
    """
    counter = counter or counter_for(target)
    plan_ = build_plan(workload, stage, counter)
    mode, reqs, conc = plan_
    if not reqs:
        raise HarnessError("the stage's schedule is empty: raise the duration or the rate")
    processes = stage.processes or auto_processes(
        mode=mode, concurrency=conc, requests=reqs, workload=workload
    )
    offered = workload.arrival.to_dict()
    notes: list[str] = []

    warmup: dict = {"requests": 0, "failed": 0}
    if stage.warmup_requests:
        warm_records = _warm_up(target, workload, stage, counter)
        warmup = {"requests": len(warm_records), "failed": sum(1 for r in warm_records if not r.ok)}

    if mode == MODE_RATE:
        expected_s = reqs[-1].offset_s + 0.06 * workload.mean_output_len + 0.5
    else:
        expected_s = stage.duration_s or (len(reqs) / max(conc, 1)) * (0.06 * workload.mean_output_len + 0.5)
    # A full collection walks the caller's whole heap (a Celery worker or a test process with Django
    # loaded: half a second on a busy machine). Do it before the epoch and freeze what survives, so
    # the collections inside the stage only walk the stage's own objects.
    gc.collect()
    gc.freeze()
    t0 = time.time() + (EPOCH_LEAD_S if processes > 1 else 0.05)
    scraper = MetricsScraper(target.metrics_url, interval_s=stage.scrape_interval_s, t0_wall=t0).start()
    try:
        plans = [
            ProcessPlan(
                target=target,
                mode=mode,
                requests=share,
                concurrency=c,
                duration_s=stage.duration_s
                if (mode == MODE_CONCURRENCY and stage.num_requests is None)
                else 0.0,
                drain_s=stage.drain_s,
            )
            for share, c in _split(mode, reqs, conc, processes)
        ]
        if len(plans) == 1:
            plan = plans[0]

            def tick(i: int, total: int) -> None:
                if progress is not None:
                    progress(min(0.99, i / total), "sending")

            records = run_async(run_process_plan(plan, epoch_wall=t0, progress=tick))
        else:
            records = _run_subprocesses(plans, progress=progress, expected_s=expected_s)
    finally:
        series = scraper.stop()
        gc.unfreeze()
    if note := scraper.note():
        notes.append(note)
    records.sort(key=lambda r: r.index)
    offered["processes"] = len(plans)
    summary = summarize_stage(
        records, plan=plan_, workload=workload, sla=sla, offered=offered, counter=counter, series=series
    )
    # Warm-up requests are in no figure above; they are counted here, apart.
    summary["warmup"] = warmup
    if progress is not None:
        progress(1.0, "stage done")
    return StageResult(summary=summary, series=series, records=records, notes=notes)


def summarize_stage(
    records: list[RequestRecord],
    *,
    plan: Plan,
    workload: Workload,
    sla: Sla,
    offered: dict,
    counter: TokenCounter,
    series: list[dict],
) -> dict:
    """A stage's summary from its records, however many processes (or machines) sent them: the
    figures of ``metrics.summarize`` plus the sent-vs-named workload checks and the engine peaks."""
    summary = summarize(records, sla=sla, offered=offered)
    summary["lengths"] = length_report(
        records, plan.requests, source=counter.source, described=counter.describe()
    )
    summary["warnings"].extend(summary["lengths"]["warnings"])
    if plan.mode == MODE_RATE:
        rate_check = offered_rate_report(
            records, plan.requests, named_rate=float(workload.arrival.rate or 0), window_s=plan.window_s
        )
        summary["offered"].update(rate_check["figures"])
        summary["warnings"].extend(rate_check["warnings"])
    summary["kv_usage_peak"] = max((s.get("kv_usage", 0.0) for s in series), default=None)
    summary["waiting_peak"] = max((s.get("waiting", 0.0) for s in series), default=None)
    return summary


def _warm_up(
    target: Target, workload: Workload, stage: StageConfig, counter: TokenCounter | None
) -> list[RequestRecord]:
    """A few requests at low concurrency before measuring, so lazy init is not in the numbers."""
    warm = Workload.from_dict({**workload.to_dict(), "arrival": {"kind": "concurrency", "concurrency": 4}})
    _, reqs, _ = build_plan(
        warm, StageConfig(num_requests=stage.warmup_requests, seed=stage.seed + 10_000), counter
    )
    plan = ProcessPlan(target=target, mode=MODE_CONCURRENCY, requests=reqs, concurrency=min(4, len(reqs)))
    return run_async(run_process_plan(plan, epoch_wall=time.time()))


def run_ladder(
    *,
    target: Target,
    workload: Workload,
    levels: list[float],
    stage: StageConfig,
    sla: Sla,
    progress: Progress | None = None,
) -> list[StageResult]:
    """Run the workload at each level (rates, or concurrencies for a closed loop) in order."""
    results = []
    for k, level in enumerate(levels):
        wl = replace(workload, arrival=arrival_at(workload.arrival, level))

        def sub(frac: float, msg: str, k=k, level=level) -> None:
            if progress is not None:
                progress((k + frac) / len(levels), f"level {level:g} ({k + 1}/{len(levels)}): {msg}")

        results.append(run_stage(target=target, workload=wl, stage=stage, sla=sla, progress=sub))
    return results


def cross_check_stage(
    *,
    target: Target,
    workload: Workload,
    stage: StageConfig,
    summary: dict,
    tokenizer_dir: str,
    timeout_s: float = 1800.0,
) -> dict:
    """Replay a stage this harness ran with ``vllm bench serve`` and compare (``crosscheck``).

    The plan is rebuilt from the same workload and seed, so the requests, their lengths and their
    planned times are the ones the stage sent; a closed-loop stage replays the requests it got to.
    """
    from .crosscheck import compare, run_vllm_bench

    plan = build_plan(workload, stage, counter_for(target))
    reqs = plan.requests
    if plan.mode == MODE_CONCURRENCY:
        reqs = reqs[: max(1, int(summary.get("requests") or len(reqs)))]
    result = run_vllm_bench(
        target=target,
        tokenizer_dir=tokenizer_dir,
        requests=reqs,
        mode=plan.mode,
        concurrency=plan.concurrency,
        prefix=plan.prefix,
        timeout_s=timeout_s,
    )
    return compare(summary, result, requests=reqs, mode=plan.mode)
