"""One stage of load spread over several worker processes, or over Ray actors on other machines.

One client process keeps a few thousand streams on schedule (docs/benchmarks.md); to measure a
server above that, the same stage is sent by N workers at once and their records are merged back
into the one stage they were cut from (ADR 0037):

- **Split.** The coordinator samples the stage's one schedule exactly as ``run_stage`` does
  (``runner.build_plan``: the workload's arrival process, its request mix and the stage's seed) and
  worker ``j`` of ``N`` sends requests ``j, j + N, j + 2N, ...`` of it. The union of the shares *is*
  the single-process schedule, request for request and instant for instant, whatever N is: the
  offered rate, its Poisson or constant shape, the lengths and the prompts are unchanged. A closed
  loop splits its concurrency the same way (``c // N``, the remainder to the first workers).
- **One clock.** Every worker is handed its share first and says it is ready; only then the
  coordinator names a wall-clock epoch a moment ahead and every worker sends relative to it. Ray
  actors on other hosts get the epoch shifted by their clock's offset from the coordinator's
  (estimated from the quickest of a few round trips), so all records share one time axis.
- **Merge.** Every record carries its worker id and its index in the schedule (its global
  sequence). ``merge_records`` proves the merge exact (each record came from the worker the index
  was given to, none twice, and in an open-loop stage every scheduled arrival once, at its
  scheduled time) and sorts by scheduled time. The figures are then ``runner.summarize_stage`` of
  the merged records: the same function on the same records as one process would use.

Workers are kept across stages (``WorkerPool`` is a context manager), so a ladder or a sweep pays
their start once: ``run_stage_distributed(..., pool=pool)`` for one stage, ``stage_fn(pool)`` for
``find_capacity``. Spawned processes (``multiprocessing``, spawn context) are for one host; Celery's
prefork children may not start them, which is why ``run_stage`` keeps its own subprocesses.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections

import orjson

from engines.workload import Workload

from .client import Target
from .loadgen import MODE_CONCURRENCY, MODE_RATE, ProcessPlan, run_async, run_process_plan
from .metrics import Sla
from .records import RequestRecord
from .runner import (
    EPOCH_LEAD_S,
    HarnessError,
    Plan,
    Progress,
    StageConfig,
    StageResult,
    _warm_up,
    build_plan,
    counter_for,
    summarize_stage,
)
from .scrape import MetricsScraper
from .tokens import TokenCounter

BACKEND_PROCESS = "process"
BACKEND_RAY = "ray"
BACKENDS = (BACKEND_PROCESS, BACKEND_RAY)
# Ray actors get the epoch over the network: a longer lead than local processes.
RAY_EPOCH_LEAD_S = 1.0
# Worker clocks further apart than this (after correction) are worth a note in the report.
CLOCK_NOTE_S = 0.002
_STOP = b"stop"


class MergeError(HarnessError):
    """The workers' records do not add up to the stage that was split: lost, doubled or misplaced."""


class ShareRunner:
    """The worker side of both backends: the loop of a spawned process, or a Ray actor.

    It is handed its share (``load``) before the epoch is known, so that parsing a large plan is not
    inside the epoch's lead, then runs it from the epoch (``run``) and returns its records, each
    stamped with this worker's id, with the CPU time the run took.
    """

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.plan: ProcessPlan | None = None

    def info(self) -> dict:
        return {"worker": self.worker, "host": socket.gethostname(), "pid": os.getpid(), "now": time.time()}

    def load(self, plan_json: bytes) -> dict:
        self.plan = ProcessPlan.from_json(plan_json)
        gc.collect()
        return self.info()

    def run(self, epoch_wall: float) -> bytes:
        if self.plan is None:
            raise HarnessError(f"worker {self.worker} was given no share to run")
        plan, self.plan = self.plan, None
        before = resource.getrusage(resource.RUSAGE_SELF)
        records = run_async(run_process_plan(plan, epoch_wall=epoch_wall))
        after = resource.getrusage(resource.RUSAGE_SELF)
        for r in records:
            r.worker = self.worker
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return orjson.dumps({**self.info(), "cpu_s": cpu, "rows": [r.to_row() for r in records]})


def _process_worker(conn, worker: int) -> None:
    """A spawned worker process: a share in, ``ready`` out, the epoch in, its records out; again
    until told to stop."""
    runner = ShareRunner(worker)
    while True:
        msg = conn.recv_bytes()
        if msg == _STOP:
            return
        runner.load(msg)
        conn.send_bytes(b"ready")
        conn.send_bytes(runner.run(float(conn.recv_bytes())))


@dataclass(slots=True)
class WorkerReport:
    """What one worker sent in one stage: its records and where and how it ran."""

    worker: int
    host: str
    pid: int
    cpu_s: float
    records: list[RequestRecord] = field(repr=False)
    clock_offset_s: float = 0.0  # its wall clock minus the coordinator's (Ray; 0 for local processes)

    @classmethod
    def from_json(cls, raw: bytes, *, clock_offset_s: float = 0.0) -> WorkerReport:
        d = orjson.loads(raw)
        return cls(
            worker=d["worker"],
            host=d["host"],
            pid=d["pid"],
            cpu_s=d["cpu_s"],
            records=[RequestRecord.from_row(r) for r in d["rows"]],
            clock_offset_s=clock_offset_s,
        )

    def to_dict(self) -> dict:
        chunks = sum(len(r.chunk_s) for r in self.records)
        return {
            "worker": self.worker,
            "host": self.host,
            "pid": self.pid,
            "requests": len(self.records),
            "failed": sum(1 for r in self.records if not r.ok),
            "chunks": chunks,
            "cpu_s": round(self.cpu_s, 3),
            "cpu_us_per_chunk": round(self.cpu_s / chunks * 1e6, 1) if chunks else None,
            "clock_offset_ms": round(self.clock_offset_s * 1e3, 3),
        }


class WorkerPool:
    """N load workers kept across stages: spawned processes on this host, or Ray actors.

    ``with WorkerPool(4) as pool:`` starts them (and stops them on exit); ``backend="ray"`` places
    them as actors on the Ray cluster at ``ray_address`` (spread over its nodes), each reserving
    ``ray_num_cpus``. A driver that already called ``ray.init`` keeps its connection.
    """

    def __init__(
        self,
        workers: int,
        *,
        backend: str = BACKEND_PROCESS,
        ray_address: str | None = None,
        ray_num_cpus: float = 1.0,
        ray_runtime_env: dict | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        if workers < 1:
            raise HarnessError("a worker pool needs at least one worker")
        if backend not in BACKENDS:
            raise HarnessError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")
        self.size = workers
        self.backend = backend
        self.ray_address = ray_address
        self.ray_num_cpus = ray_num_cpus
        self.ray_runtime_env = ray_runtime_env
        self.start_timeout_s = start_timeout_s
        self.clock_offsets_s = [0.0] * workers
        self.hosts: list[str] = []
        self._procs: list = []
        self._conns: list = []
        self._actors: list = []
        self._ray_owned = False
        self._loaded: list[int] = []
        self._refs: dict = {}  # Ray: the running stage's result references -> worker

    @property
    def lead_s(self) -> float:
        return RAY_EPOCH_LEAD_S if self.backend == BACKEND_RAY else EPOCH_LEAD_S

    def __enter__(self) -> WorkerPool:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- start and stop
    def start(self) -> None:
        if self.backend == BACKEND_RAY:
            self._start_ray()
        else:
            self._start_processes()

    def _start_processes(self) -> None:
        if multiprocessing.current_process().daemon:
            raise HarnessError(
                "a daemonic process (a Celery prefork child) cannot start worker processes: "
                "use run_stage's client processes, or Ray actors"
            )
        ctx = multiprocessing.get_context("spawn")
        for j in range(self.size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_process_worker, args=(child, j), name=f"loadgen-{j}", daemon=True)
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        self.hosts = [socket.gethostname()] * self.size

    def _start_ray(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self.ray_address or "auto",
                logging_level="ERROR",
                log_to_driver=False,
            )
            self._ray_owned = True
        actor = ray.remote(ShareRunner).options(
            num_cpus=self.ray_num_cpus,
            scheduling_strategy="SPREAD",
            runtime_env=self.ray_runtime_env,
        )
        self._actors = [actor.remote(j) for j in range(self.size)]
        infos = ray.get([a.info.remote() for a in self._actors], timeout=self.start_timeout_s)
        self.hosts = [i["host"] for i in infos]
        self.clock_offsets_s = [self._clock_offset(a) for a in self._actors]

    @staticmethod
    def _clock_offset(actor, rounds: int = 5) -> float:
        """The actor's wall clock minus ours, from the round trip with the least delay (NTP's way):
        the error is at most half that round trip."""
        import ray

        best: tuple[float, float] | None = None
        for _ in range(rounds):
            sent = time.time()
            now = ray.get(actor.info.remote())["now"]
            back = time.time()
            if best is None or back - sent < best[0]:
                best = (back - sent, now - (sent + back) / 2)
        return best[1] if best else 0.0

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):  # a worker that is gone needs no stop
                conn.send_bytes(_STOP)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        if self._actors:
            import ray

            for a in self._actors:
                with contextlib.suppress(Exception):  # an actor already gone is what we wanted
                    ray.kill(a)
            self._actors = []
        if self._ray_owned:
            import ray

            ray.shutdown()
            self._ray_owned = False

    # --- one stage: load the shares, release them at one epoch, collect the records
    def load(self, shares: dict[int, ProcessPlan]) -> None:
        """Hand each worker its share; returns once every one of them is ready to start."""
        self._loaded = sorted(shares)
        if self.backend == BACKEND_RAY:
            import ray

            refs = [self._actors[j].load.remote(shares[j].to_json()) for j in self._loaded]
            try:
                ray.get(refs, timeout=self.start_timeout_s)
            except Exception as exc:
                raise HarnessError(f"a Ray load worker could not take its share: {exc}") from exc
            return
        for j in self._loaded:
            self._conns[j].send_bytes(shares[j].to_json())
        for j in self._loaded:
            if not self._conns[j].poll(self.start_timeout_s):
                raise HarnessError(f"load worker {j} did not get ready in {self.start_timeout_s:g} s")
            msg = self._recv(j)
            if msg != b"ready":
                raise HarnessError(f"load worker {j} said {msg[:200]!r} instead of ready")

    def release(self, epoch_wall: float) -> None:
        """Tell every loaded worker the epoch (shifted to its own clock)."""
        if self.backend == BACKEND_RAY:
            self._refs = {
                self._actors[j].run.remote(epoch_wall + self.clock_offsets_s[j]): j for j in self._loaded
            }
            return
        for j in self._loaded:
            self._conns[j].send_bytes(repr(epoch_wall).encode())

    def collect(self, *, progress: Progress | None = None, expected_s: float = 0.0) -> list[WorkerReport]:
        """Wait for every loaded worker's records (reporting progress while the stage runs)."""
        started = time.monotonic()

        def tick() -> None:
            if progress is not None and expected_s > 0:
                progress(min(0.99, (time.monotonic() - started) / expected_s), "sending")

        reports: list[WorkerReport] = []
        if self.backend == BACKEND_RAY:
            import ray

            pending = list(self._refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
                for ref in done:
                    j = self._refs[ref]
                    try:
                        raw = ray.get(ref)
                    except Exception as exc:
                        raise HarnessError(f"Ray load worker {j} failed: {exc}") from exc
                    reports.append(WorkerReport.from_json(raw, clock_offset_s=self.clock_offsets_s[j]))
                tick()
            return reports
        waiting = {self._conns[j]: j for j in self._loaded}
        while waiting:
            for conn in wait_connections(list(waiting), timeout=0.25):
                j = waiting.pop(conn)
                reports.append(WorkerReport.from_json(self._recv(j)))
            for conn, j in waiting.items():
                if not self._procs[j].is_alive() and not conn.poll():
                    raise HarnessError(f"load worker {j} exited {self._procs[j].exitcode} during the stage")
            tick()
        return reports

    def _recv(self, j: int) -> bytes:
        try:
            return self._conns[j].recv_bytes()
        except (EOFError, OSError) as exc:
            raise HarnessError(f"load worker {j} exited {self._procs[j].exitcode}: {exc!r}") from exc


def split_plan(plan: Plan, stage: StageConfig, target: Target, workers: int) -> dict[int, ProcessPlan]:
    """Worker ``j``'s share of the stage: every ``k``-th request of the one schedule from ``j``, and in
    a closed loop its part of the concurrency (``c // k``, the remainder to the first workers).

    ``k`` is ``workers``, fewer when the stage has fewer requests (or a closed loop fewer slots)
    than that: every share sends something, and no request is left without a worker to send it.
    """
    k = workers if plan.mode == MODE_RATE else min(workers, max(1, plan.concurrency))
    k = max(1, min(k, len(plan.requests)))
    duration = stage.duration_s if (plan.mode == MODE_CONCURRENCY and stage.num_requests is None) else 0.0
    conc = plan.concurrency
    return {
        j: ProcessPlan(
            target=target,
            mode=plan.mode,
            requests=plan.requests[j::k],
            concurrency=(conc // k + (1 if j < conc % k else 0)) if plan.mode == MODE_CONCURRENCY else 0,
            duration_s=duration,
            drain_s=stage.drain_s,
        )
        for j in range(k)
    }


def merge_records(
    reports: list[WorkerReport], shares: dict[int, ProcessPlan], *, mode: str
) -> list[RequestRecord]:
    """The stage's records from its workers' reports, proven exact, sorted by scheduled time.

    Raises ``MergeError`` when a record came from a worker its index was not given to, when an index
    comes twice, and in an open-loop stage when a scheduled arrival is missing or was planned for
    another time. (A closed loop stopped by time sends only part of its queue: a subset is right.)
    """
    owner: dict[int, int] = {}
    planned: dict[int, float] = {}
    for j, share in shares.items():
        for req in share.requests:
            owner[req.index] = j
            planned[req.index] = req.offset_s
    seen: set[int] = set()
    merged: list[RequestRecord] = []
    for rep in reports:
        if rep.worker not in shares:
            raise MergeError(f"records from worker {rep.worker}, which was given no share")
        for r in rep.records:
            if r.worker != rep.worker:
                raise MergeError(f"worker {rep.worker} returned a record stamped for worker {r.worker}")
            if owner.get(r.index) != rep.worker:
                raise MergeError(f"request {r.index} came from worker {rep.worker}, which was not given it")
            if r.index in seen:
                raise MergeError(f"request {r.index} came back twice")
            if mode == MODE_RATE and abs(r.planned_s - planned[r.index]) > 2e-6:
                raise MergeError(
                    f"request {r.index} was planned at {r.planned_s} s, the schedule says {planned[r.index]} s"
                )
            seen.add(r.index)
            merged.append(r)
    if mode == MODE_RATE and len(seen) != len(owner):
        missing = sorted(set(owner) - seen)
        raise MergeError(f"{len(missing)} scheduled requests never came back (first: {missing[:5]})")
    merged.sort(key=lambda r: (r.planned_s, r.index))
    return merged


def run_stage_distributed(
    *,
    target: Target,
    workload: Workload,
    stage: StageConfig,
    sla: Sla,
    pool: WorkerPool,
    progress: Progress | None = None,
    counter: TokenCounter | None = None,
) -> StageResult:
    """``run_stage`` with the sending spread over ``pool``'s workers; the same summary, plus
    ``summary["workers"]`` (per worker: host, requests, CPU per chunk, clock offset).

    Raises ``HarnessError`` before sending when the stage cannot be what it names, and
    ``MergeError`` when the workers' records do not add up to the stage.
    """
    counter = counter or counter_for(target)
    plan = build_plan(workload, stage, counter)
    if not plan.requests:
        raise HarnessError("the stage's schedule is empty: raise the duration or the rate")
    warmup: dict = {"requests": 0, "failed": 0}
    if stage.warmup_requests:
        warm = _warm_up(target, workload, stage, counter)
        warmup = {"requests": len(warm), "failed": sum(1 for r in warm if not r.ok)}
    shares = split_plan(plan, stage, target, pool.size)
    if plan.mode == MODE_RATE:
        expected_s = plan.requests[-1].offset_s + 0.06 * workload.mean_output_len + 0.5
    else:
        expected_s = stage.duration_s or 0.0
    pool.load(shares)
    epoch = time.time() + pool.lead_s
    scraper = MetricsScraper(target.metrics_url, interval_s=stage.scrape_interval_s, t0_wall=epoch).start()
    try:
        pool.release(epoch)
        reports = pool.collect(progress=progress, expected_s=expected_s)
    finally:
        series = scraper.stop()
    notes = [note] if (note := scraper.note()) else []
    records = merge_records(reports, shares, mode=plan.mode)
    offered = {**workload.arrival.to_dict(), "processes": len(shares), "backend": pool.backend}
    summary = summarize_stage(
        records, plan=plan, workload=workload, sla=sla, offered=offered, counter=counter, series=series
    )
    summary["warmup"] = warmup
    summary["workers"] = [r.to_dict() for r in sorted(reports, key=lambda r: r.worker)]
    skew = max((abs(r.clock_offset_s) for r in reports), default=0.0)
    if skew > CLOCK_NOTE_S:
        notes.append(
            f"worker clocks were up to {skew * 1e3:.1f} ms off the coordinator's; each worker's epoch "
            "was shifted by its estimated offset"
        )
    if progress is not None:
        progress(1.0, "stage done")
    return StageResult(summary=summary, series=series, records=records, notes=notes)


def stage_fn(pool: WorkerPool) -> Callable[..., StageResult]:
    """A ``find_capacity`` / ladder stage function that sends through ``pool``."""
    return functools.partial(run_stage_distributed, pool=pool)
