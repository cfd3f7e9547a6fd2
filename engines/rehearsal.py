"""Incident rehearsals in virtual time: the eight causes of the domain's TTFT and TPOT playbooks,
produced on purpose on simulated deployments, tick by tick.

A ``Scenario`` is a route's steady traffic (tenants, each a Poisson stream with its prompt and output
lengths and its share of a shared prompt prefix), and a fault that starts at ``fault_at_s``: a
long-prompt flood, batch traffic in the online pool, a prefix-cache collapse, KV exhaustion with
preemptions, outputs growing longer, a slower new release, a TPOT regression on one deployment, a
lost replica. ``Rehearsal.tick`` simulates one tick of every deployment with the virtual-time
engine simulator (``engines.sim``: vLLM's scheduler, KV blocks, prefix cache and step times) and
returns what the gateway would have metered and what each engine's ``/metrics`` would have said.

What the platform changes in response (route weights, a tenant's rate limit and token caps, replica
counts) comes in through ``Controls`` at each tick, and is applied here as the gateway and Ray Serve
apply it: weights split the traffic, prompts over the route's long-context threshold go to its
long-context pool, a prompt over the tenant's cap is refused with a 400 before it
reaches an engine, ``max_tokens`` is capped, requests past the rate limit get a 429, and replicas
share their deployment's traffic. So a rehearsal closes the loop: the SLOs, the incident, the
diagnosis and the playbook run for real, on the traffic the simulated engines produce.

Each tick is simulated from ``WARM_S`` before its start so that queues carry over from one tick to
the next; only the requests that arrive within the tick are kept. No Django, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from engines.presets import gpu_preset, model_preset
from engines.scheduler import EngineConfig
from engines.sim import SimConfig, simulate
from engines.workload import RequestSchedule

WARM_S = 20.0  # simulated before each tick so that its queues are those of a running engine
GROUP = 0  # the shared-prefix group every tenant's system prompt belongs to


@dataclass(frozen=True)
class Tenant:
    """One tenant's stream: Poisson arrivals, normal lengths (sd 20 %), a shared-prefix share."""

    name: str
    rate: float  # requests/s over the whole route
    input_mean: int
    output_mean: int
    shared_prefix: float = 0.0  # share of the prompt that is the common system prompt


@dataclass(frozen=True)
class Fault:
    """What changes at ``fault_at_s``. ``tenants`` replaces or adds streams by name."""

    tenants: tuple[Tenant, ...] = ()
    decode_slowdown: dict = field(default_factory=dict)  # deployment -> factor on TPOT
    prefill_slowdown: dict = field(default_factory=dict)  # deployment -> factor on TTFT
    error_rate: dict = field(default_factory=dict)  # deployment -> share answered 503
    kv_blocks: dict = field(default_factory=dict)  # deployment -> KV blocks left (memory taken)
    joins: str = ""  # a deployment that joins the route (a new release), taking ``joins_weight``
    joins_weight: int = 50


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    causes: tuple[str, ...]  # the diagnosis causes that name this fault correctly
    tenants: tuple[Tenant, ...]
    fault: Fault
    deployments: tuple[str, ...] = ("a", "b")
    # Deployments in the route's long-context pool: idle until the route's long-context threshold
    # is set, then they take the prompts over it (as ``gateway.router`` does).
    long_pool: tuple[str, ...] = ()
    model: str = "llama-3.1-8b"
    gpu: str = "L40S"
    max_num_seqs: int = 128
    fault_at_s: float = 300.0
    fault_for_s: float = 240.0  # the fault stops by itself after this long (a rehearsal ends)


BASE = (Tenant("acme", 2.0, 600, 150, 0.5), Tenant("globex", 2.0, 600, 150, 0.5))

SCENARIOS = {
    s.name: s
    for s in (
        Scenario("long_prompt_flood", "A tenant floods the route with long prompts", ("long_prompts",), BASE,
                 Fault(tenants=(Tenant("globex", 3.0, 7000, 150, 0.0),))),
        Scenario("batch_in_online_pool", "A batch job runs in the online pool", ("load_surge", "queue_vs_prefill"),
                 BASE, Fault(tenants=(Tenant("batch-jobs", 24.0, 700, 150, 0.0),))),
        Scenario("prefix_cache_collapse", "A prompt release breaks the shared prefix", ("prefix_cache_collapse",),
                 (Tenant("acme", 2.5, 3000, 100, 0.95), Tenant("globex", 2.5, 3000, 100, 0.95)),
                 Fault(tenants=(Tenant("acme", 2.5, 3000, 100, 0.0), Tenant("globex", 2.5, 3000, 100, 0.0)))),
        Scenario("kv_exhaustion", "The KV cache runs out and requests are preempted", ("kv_pressure",), BASE,
                 Fault(kv_blocks={"a": 280, "b": 280})),
        Scenario("longer_outputs", "Outputs suddenly grow longer", ("longer_outputs",),
                 (Tenant("acme", 3.0, 600, 150, 0.5), Tenant("globex", 3.0, 600, 150, 0.5)),
                 Fault(tenants=(Tenant("acme", 3.0, 600, 1000, 0.5), Tenant("globex", 3.0, 600, 1000, 0.5)))),
        Scenario("slower_release", "A new release is slower", ("deployment_regression",), BASE,
                 Fault(joins="c", prefill_slowdown={"c": 20.0}, decode_slowdown={"c": 3.0})),
        Scenario("tpot_regression", "One deployment's decoding regresses", ("deployment_regression",), BASE,
                 Fault(decode_slowdown={"b": 4.0})),
        Scenario("lost_replica", "A replica is lost: its deployment answers errors", ("errors_one_deployment",),
                 BASE, Fault(error_rate={"b": 1.0})),
    )
}  # fmt: skip


@dataclass
class Controls:
    """What the platform has set, read back at every tick."""

    weights: dict[str, int]  # deployment -> weight (deployments not listed get no traffic)
    replicas: dict[str, int] = field(default_factory=dict)
    rpm_limit: dict[str, int] = field(default_factory=dict)  # tenant -> requests/min (0 = none)
    max_input_tokens: dict[str, int] = field(default_factory=dict)
    max_output_tokens: dict[str, int] = field(default_factory=dict)
    long_threshold: int | None = None  # the route's long-context threshold (prompt tokens)
    long_pool: frozenset[str] = frozenset()  # deployments in the long-context pool


COUNTERS = (
    "vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
    "vllm:generation_tokens", "vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count",
    "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
)  # fmt: skip


class Rehearsal:
    """One scenario's traffic over virtual time; ``tick`` advances it by one tick."""

    def __init__(self, scenario: Scenario, *, seed: int = 0, fault: bool = True) -> None:
        self.s = scenario
        self.seed = seed
        self.fault = fault
        self.counters: dict[str, dict] = {}  # per deployment: its cumulative counters (``COUNTERS``)
        self._model = model_preset(scenario.model)
        self._gpu = gpu_preset(scenario.gpu)

    def faulted(self, t: float) -> bool:
        return self.fault and self.s.fault_at_s <= t < self.s.fault_at_s + self.s.fault_for_s

    def tenants_at(self, t: float) -> list[Tenant]:
        streams = {x.name: x for x in self.s.tenants}
        if self.faulted(t):
            streams.update({x.name: x for x in self.s.fault.tenants})
        return list(streams.values())

    def _arrivals(self, t0: float, t1: float, rate: float, rng: np.random.Generator) -> np.ndarray:
        n = rng.poisson(rate * (t1 - t0))
        return np.sort(rng.uniform(t0, t1, n))

    def tick(self, t0: float, t1: float, controls: Controls) -> tuple[list[dict], dict[str, dict]]:
        """Requests arriving in ``[t0, t1)`` (dicts with what the gateway meters) and each engine's
        metrics at ``t1``. Deterministic for a seed and the same controls."""
        rng = np.random.default_rng([self.seed, int(t0 * 1000)])
        weights = {d: w for d, w in controls.weights.items() if w > 0}
        # The gateway's pools (``gateway.router.Router.candidates``): prompts over the threshold go to
        # the long-context pool when it has weight; the rest to the others (to it only when none).
        long_w = {d: w for d, w in weights.items() if d in controls.long_pool}
        short_w = {d: w for d, w in weights.items() if d not in controls.long_pool} or long_w
        start = t0 - WARM_S  # before 0 too: a rehearsal starts on engines already serving
        records: list[dict] = []
        # Requests per deployment replica: (arrival, tenant, input, output, prefix_len)
        per_replica: dict[tuple[str, int], list[tuple]] = {}
        admitted: dict[str, int] = {}
        for seg0, seg1 in _segments(start, t1, self.s.fault_at_s, self.s.fault_at_s + self.s.fault_for_s):
            for stream in self.tenants_at(seg0):
                arr = self._arrivals(seg0, seg1, stream.rate, rng)
                inp = np.maximum(16, rng.normal(stream.input_mean, 0.2 * stream.input_mean, len(arr))).astype(
                    int
                )
                out = np.maximum(
                    2, rng.normal(stream.output_mean, 0.2 * stream.output_mean, len(arr))
                ).astype(int)
                name = stream.name
                per_s = controls.rpm_limit.get(name, 0) / 60.0
                cap_in = controls.max_input_tokens.get(name, 0)
                cap_out = controls.max_output_tokens.get(name, 0)
                for a, i, o in zip(arr, inp, out, strict=True):
                    i, o = int(i), min(int(o), cap_out) if cap_out else int(o)
                    http = 200
                    if cap_in and i > cap_in:
                        http = 400  # the gateway refuses a prompt over the tenant's cap
                    elif per_s:
                        # The limiter admits ``per_s`` a second on average (one request of burst).
                        if admitted.get(name, 0) >= per_s * (a - start) + 1:
                            http = 429
                        else:
                            admitted[name] = admitted.get(name, 0) + 1
                    if http != 200:
                        if t0 <= a < t1:
                            records.append(_refused(a, name, i, http))
                        continue
                    long = bool(controls.long_threshold and i > controls.long_threshold and long_w)
                    dep = _pick(long_w if long else short_w, rng)
                    if dep is None:
                        continue
                    if self.faulted(a) and rng.random() < self.s.fault.error_rate.get(dep, 0.0):
                        if t0 <= a < t1:
                            records.append({**_refused(a, name, i, 503), "deployment": dep})
                        continue
                    replica = int(rng.integers(0, max(1, controls.replicas.get(dep, 1))))
                    prefix = int(i * stream.shared_prefix)
                    per_replica.setdefault((dep, replica), []).append((a, name, i, o, prefix))
        metrics: dict[str, dict] = {}
        for dep in sorted({d for d, _ in per_replica} | set(weights)):
            gauges = {"vllm:num_requests_waiting": 0.0, "vllm:num_requests_running": 0.0,
                      "vllm:kv_cache_usage_perc": 0.0}  # fmt: skip
            c = self.counters.setdefault(dep, dict.fromkeys(COUNTERS, 0.0))
            for (d, _replica), reqs in sorted(per_replica.items()):
                if d != dep:
                    continue
                kept, g = self._simulate(dep, reqs, start, t0, t1)
                records += kept
                for k, v in g.items():
                    gauges[k] = max(gauges[k], v) if k == "vllm:kv_cache_usage_perc" else gauges[k] + v
                for r in kept:
                    c["vllm:num_preemptions"] += r.pop("_preemptions")
                    c["vllm:prefix_cache_queries"] += r["prompt_tokens"]
                    c["vllm:prefix_cache_hits"] += r["cached_tokens"]
                    c["vllm:prompt_tokens"] += r["prompt_tokens"]
                    c["vllm:generation_tokens"] += r["completion_tokens"]
                    c["vllm:request_queue_time_seconds_sum"] += r.pop("_queue_s")
                    c["vllm:request_queue_time_seconds_count"] += 1
                    c["vllm:time_to_first_token_seconds_sum"] += r.pop("_engine_ttft_s")
                    c["vllm:time_to_first_token_seconds_count"] += 1
            metrics[dep] = {**gauges, **c}
        records.sort(key=lambda r: r["at_s"])
        return records, metrics

    def _simulate(
        self, dep: str, reqs: list[tuple], start: float, t0: float, t1: float
    ) -> tuple[list[dict], dict]:
        faulted = self.faulted(t0)
        blocks = self.s.fault.kv_blocks.get(dep) if faulted else None
        engine = EngineConfig(max_num_seqs=self.s.max_num_seqs, num_gpu_blocks_override=blocks)
        cfg = SimConfig(model=self._model, gpu=self._gpu, engine=engine, sample_interval_s=1.0)
        reqs.sort(key=lambda r: r[0])
        arr = np.array([r[0] - start for r in reqs])
        sched = RequestSchedule(
            arrival_s=arr, input_len=np.array([r[2] for r in reqs]), output_len=np.array([r[3] for r in reqs]),
            prefix_group=np.array([GROUP if r[4] > 0 else -1 for r in reqs]), prefix_len=np.array([r[4] for r in reqs]),
        )  # fmt: skip
        res = simulate(None, cfg, schedule=sched)
        pre_f = self.s.fault.prefill_slowdown.get(dep, 1.0) if faulted else 1.0
        dec_f = self.s.fault.decode_slowdown.get(dep, 1.0) if faulted else 1.0
        kept = []
        for k, (a, tenant, i, o, _p) in enumerate(reqs):
            if not t0 <= a < t1:
                continue
            ttft, tpot = float(res.ttft_s[k]), float(res.tpot_s[k])
            if np.isnan(ttft) or res.rejected[k]:
                kept.append({**_refused(a, tenant, i, 400), "deployment": dep})
                continue
            kept.append({
                "at_s": a, "tenant": tenant, "deployment": dep, "prompt_tokens": i, "completion_tokens": o,
                "cached_tokens": int(res.prefix_hit_tokens[k]), "ttft_ms": ttft * 1000 * pre_f,
                "tpot_ms": None if np.isnan(tpot) else tpot * 1000 * dec_f, "status": "ok", "http_status": 200,
                "_preemptions": int(res.preemptions[k]), "_queue_s": float(res.queue_s[k]),
                "_engine_ttft_s": float(res.engine_ttft_s[k]) * pre_f,
            })  # fmt: skip
        ts = res.timeseries
        at = np.searchsorted(ts["t"], t1 - start, side="right") - 1 if len(ts["t"]) else -1
        gauges = {
            "vllm:num_requests_waiting": float(ts["waiting"][at]) if at >= 0 else 0.0,
            "vllm:num_requests_running": float(ts["running"][at]) if at >= 0 else 0.0,
            "vllm:kv_cache_usage_perc": float(ts["kv_usage"][at]) if at >= 0 else 0.0,
        }
        return kept, gauges


def _segments(t0: float, t1: float, f0: float, f1: float) -> list[tuple[float, float]]:
    """``[t0, t1)`` cut at the fault's start and end, so each piece has one set of streams."""
    cuts = sorted({t0, t1, *(x for x in (f0, f1) if t0 < x < t1)})
    return list(zip(cuts, cuts[1:], strict=False))


def _pick(weights: dict[str, int], rng: np.random.Generator) -> str | None:
    total = sum(weights.values())
    if total <= 0:
        return None
    x = rng.random() * total
    for d, w in sorted(weights.items()):
        x -= w
        if x < 0:
            return d
    return sorted(weights)[-1]


def _refused(at: float, tenant: str, prompt: int, http: int) -> dict:
    return {"at_s": at, "tenant": tenant, "deployment": "", "prompt_tokens": prompt, "completion_tokens": 0,
            "cached_tokens": 0, "ttft_ms": None, "tpot_ms": None, "status": "error", "http_status": http}  # fmt: skip


def scenario(name: str, **changes) -> Scenario:
    """A scenario by name, with fields replaced (``fault_at_s``, ``fault_for_s``...)."""
    return replace(SCENARIOS[name], **changes)


def metrics_text(values: dict) -> str:
    """An engine's ``/metrics`` as vLLM writes it (Prometheus text: gauges, ``_total`` counters, and
    the queue-time and TTFT histograms' ``_sum``/``_count``), from ``Rehearsal.tick``'s values."""
    lines = []
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        lines += [f"# TYPE {name} gauge", f"{name} {values.get(name, 0.0)}"]
    for name in COUNTERS[:5]:
        lines += [
            f"# TYPE {name}_total counter",
            f"{name}_total {values.get(name, 0.0)}",
        ]  # as vLLM writes it
    for name in ("vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds"):
        n = values.get(f"{name}_count", 0.0)
        lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf"}} {n}',
                  f"{name}_sum {values.get(f'{name}_sum', 0.0)}", f"{name}_count {n}"]  # fmt: skip
    return "\n".join(lines) + "\n"
