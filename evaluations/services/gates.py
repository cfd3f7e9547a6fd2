"""Gate policies, gate runs and gate decisions (ADR 0007).

- ``gate_policy_save`` validates a policy and adds it as the model's next immutable version (audited).
- ``gate_run_start`` queues a run of a version's gates; ``gate_run_execute`` (the Celery task's body)
  runs each gate — an eval run of the policy's suite against the candidate's and the baseline's
  deployments, a capacity sweep, a soak with a length mix and load waves — reusing a recent run on
  the same inputs, and records one immutable ``GateDecision`` per gate.
- A gate whose run or deployment fails ends as ``error``, never ``passed``.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog.selectors import model_serving_version
from catalog.services import model_version_memory_estimates
from core.lifecycle import Heartbeat, run_claim, run_finish, run_report
from core.runs import RunStatus
from deployments.selectors import (
    deployment_failures_between,
    deployment_for_version,
    deployment_health,
    model_has_deployment_on,
)
from engines.workload import Workload
from evalkit import stats
from evaluations import judge, schemas
from evaluations.constants import (
    GATE_KINDS,
    GATE_REUSE_HOURS,
    EvidenceLabel,
    GateKind,
    GateMode,
    GateRunStatus,
    RunKind,
    RunMode,
    Verdict,
)
from evaluations.models import BenchmarkRun, EvalRun, EvalSuite, GateDecision, GatePolicy, GateRun
from evaluations.schemas import schema_check
from evaluations.selectors.gates import gate_policy_current
from evaluations.services.benchmarks import benchmark_run_create, benchmark_run_execute
from evaluations.services.evals import eval_run_create, eval_run_execute
from events.services import emit

# Requests that may fail in an eval run before the endpoint counts as broken (the gate is then
# an error, not a quality verdict: a dying deployment says nothing about the model).
MAX_EVAL_ERROR_RATE = 0.02
# Gate evals keep this many cases in flight (bounded by the engine's max_num_seqs): enough to fill a
# continuous batch, few enough not to queue long prompts behind each other.
GATE_EVAL_CONCURRENCY = 32
MAX_WAVE_STAGES = 20

DEFAULT_QUALITY = {"required": True, "suite": "governor-core", "baseline": "serving",
                   "default": {"max_drop": 0.1, "min_score": 0.5}, "categories": {}}  # fmt: skip
DEFAULT_PERFORMANCE = {
    "required": True,
    "workload": {"input": {"kind": "fixed", "value": 512}, "output": {"kind": "fixed", "value": 128}},
    "sla": {"ttft_ms": 1000.0, "tpot_ms": 50.0},
    "stage_duration_s": 60.0,
    "min_goodput_ratio": 0.9,
    "max_p95_ttft_ms": 1000.0,
    "max_p95_tpot_ms": 50.0,
    "kv_context_tokens": 8192,
    "min_kv_seqs": 16,
    "max_usd_per_mtok": None,
}
DEFAULT_STABILITY = {
    "required": True,
    "duration_s": 600.0,
    "length_mix": [
        {"input": 256, "output": 128, "weight": 6},
        {"input": 2048, "output": 256, "weight": 3},
        {"input": 6000, "output": 512, "weight": 1},
    ],
    "waves": {"low_rps": 2.0, "high_rps": 8.0, "period_s": 120.0},
    "max_error_rate": 0.01,
    "max_preemptions": 0,
    "max_restarts": 0,
}


# --- policy validation --------------------------------------------------------------------------------
# ``schemas.GATE_POLICY`` holds every bound and choice; what follows normalises a valid policy and
# checks what a schema cannot: the suite and the baseline exist, a required gate has a limit to
# judge by, the KV limit has its context, the low wave is under the high one.


def _clean_quality(cfg: dict, errors: dict) -> dict:
    default = cfg.get("default") or {}
    out = {
        "required": bool(cfg.get("required")),
        "suite": (cfg.get("suite") or "").strip(),
        "baseline": "serving" if cfg.get("baseline") in (None, "", "serving") else int(cfg["baseline"]),
        "default": {"max_drop": default.get("max_drop"), "min_score": default.get("min_score")},
        "categories": {
            str(name).strip(): {
                "max_drop": (v or {}).get("max_drop"),
                "min_score": (v or {}).get("min_score"),
            }
            for name, v in (cfg.get("categories") or {}).items()
        },
    }
    if out["required"]:
        if not out["suite"]:
            errors["quality.suite"] = "A required quality gate needs an eval suite."
        elif not EvalSuite.objects.filter(name=out["suite"]).exists():
            errors["quality.suite"] = f"No eval suite named {out['suite']!r}."
        limits = [out["default"], *out["categories"].values()]
        if all(c["max_drop"] is None for c in limits):
            errors["quality.default.max_drop"] = "A required quality gate needs a maximum allowed drop."
    return out


PERFORMANCE_LIMITS = (
    "min_goodput_ratio",
    "max_p95_ttft_ms",
    "max_p95_tpot_ms",
    "min_kv_seqs",
    "max_usd_per_mtok",
)


def _clean_performance(cfg: dict, errors: dict) -> dict:
    out = {name: cfg.get(name) for name in ("kv_context_tokens", *PERFORMANCE_LIMITS)}
    out["required"] = bool(cfg.get("required"))
    out["workload"] = {"arrival": {"kind": "poisson", "rate": 1.0}, **(cfg.get("workload") or {})}
    try:
        Workload.from_dict(out["workload"])
    except (KeyError, TypeError, ValueError) as exc:
        errors["performance.workload"] = f"Invalid workload: {exc}"
    sla = cfg.get("sla") or {}
    out["sla"] = {"ttft_ms": sla.get("ttft_ms"), "tpot_ms": sla.get("tpot_ms")}
    stage = cfg.get("stage_duration_s", 60)
    out["stage_duration_s"] = stage
    if out["required"] and out["sla"]["ttft_ms"] is None and out["sla"]["tpot_ms"] is None:
        errors["performance.sla"] = "The benchmark needs an SLA (TTFT and/or TPOT limit)."
    if out["min_kv_seqs"] is not None and out["kv_context_tokens"] is None:
        errors["performance.kv_context_tokens"] = "A KV capacity limit needs the target context length."
    if out["required"] and all(out[k] is None for k in PERFORMANCE_LIMITS):
        errors["performance"] = "A required performance gate needs at least one limit."
    return out


def _clean_stability(cfg: dict, errors: dict) -> dict:
    waves = cfg.get("waves") or {}
    out = {
        "required": bool(cfg.get("required")),
        "duration_s": cfg.get("duration_s"),
        "length_mix": [
            {"input": int(m["input"]), "output": int(m["output"]), "weight": int(m.get("weight", 1))}
            for m in cfg.get("length_mix") or []
        ],
        "waves": {w: waves.get(w) for w in ("low_rps", "high_rps", "period_s")},
        "max_error_rate": cfg.get("max_error_rate") or 0.0,
        "max_preemptions": int(cfg.get("max_preemptions") or 0),
        "max_restarts": int(cfg.get("max_restarts") or 0),
    }
    low, high = out["waves"]["low_rps"], out["waves"]["high_rps"]
    if low is not None and high is not None and low > high:
        errors["stability.waves.low_rps"] = "The low rate cannot exceed the high rate."
    return out


def gate_policy_clean(*, model, gpu_type, quality: dict, performance: dict, stability: dict) -> dict:
    """Validated, normalized gate settings, or ``ValidationError`` naming every bad field.

    Keys are dotted paths (``stability.waves.low_rps``), which the policy form maps to its fields.
    """
    policy = {"quality": quality or {}, "performance": performance or {}, "stability": stability or {}}
    try:
        schema_check(schemas.GATE_POLICY, policy)
        errors: dict[str, str | list[str]] = {}
    except ValidationError as exc:
        errors = dict(exc.message_dict)
    cleaned = None
    if not errors:
        cleaned = {
            "quality": _clean_quality(policy["quality"], errors),
            "performance": _clean_performance(policy["performance"], errors),
            "stability": _clean_stability(policy["stability"], errors),
        }
    required = [k for k in GATE_KINDS if isinstance(policy[k], dict) and policy[k].get("required")]
    if not required:
        errors["__all__"] = "A policy needs at least one required gate."
    if gpu_type is None:
        errors["gpu_type"] = "Choose the GPU type the gates are judged on."
    elif required and not model_has_deployment_on(model_id=model.pk, gpu_type_id=gpu_type.pk):
        errors["gpu_type"] = (
            f"No version of {model.name} is deployed on {gpu_type.name}: the required "
            f"{', '.join(required)} gate(s) would have nothing to run against. Deploy one first "
            "or choose another GPU type."
        )
    baseline = cleaned["quality"]["baseline"] if cleaned else None
    if isinstance(baseline, int) and not model.versions.filter(pk=baseline).exists():
        errors["quality.baseline"] = f"Version {baseline} is not a version of {model.name}."
    if errors:
        raise ValidationError(errors)
    return cleaned  # type: ignore[return-value]


@transaction.atomic
def gate_policy_save(
    *, model, gpu_type, quality: dict, performance: dict, stability: dict, actor, reason: str = ""
) -> GatePolicy:
    """Add the model's next policy version (the previous ones stay, immutable) and audit the change."""
    cleaned = gate_policy_clean(
        model=model, gpu_type=gpu_type, quality=quality, performance=performance, stability=stability
    )
    # Lock the model's policies so two admins saving at once get consecutive numbers.
    previous = GatePolicy.objects.select_for_update().filter(model=model).order_by("-number").first()
    policy = GatePolicy.objects.create(
        model=model,
        number=(previous.number if previous else 0) + 1,
        gpu_type=gpu_type,
        reason=reason,
        created_by=actor if getattr(actor, "pk", None) else None,
        **cleaned,
    )
    fields = ("gpu_type_id", "quality", "performance", "stability")
    before = {f: getattr(previous, f) for f in fields} if previous else {}
    after = {f: getattr(policy, f) for f in fields}
    changed = [f for f in fields if before.get(f) != after[f]]
    audit_record(
        actor=actor,
        action="gate_policy.save",
        target=policy,
        before={f: before[f] for f in changed if f in before},
        after={"number": policy.number, **{f: after[f] for f in changed}},
        reason=reason,
    )
    return policy


# --- gate runs -----------------------------------------------------------------------------------------


def gate_run_start(*, version, actor, mode: str = GateMode.PREDICTED, kinds: list[str] | None = None,
                   enqueue: bool = True) -> GateRun:  # fmt: skip
    """Queue a run of the version's gates under the model's current policy."""
    if mode not in GateMode.values:
        raise ValidationError({"mode": f"Unknown mode {mode!r}: use predicted or measured."})
    policy = gate_policy_current(model_id=version.model_id)
    if policy is None:
        raise ValidationError(
            {"policy": f"{version.model.name} has no gate policy yet: an admin must define one."}
        )
    kinds = list(kinds or [k for k in GATE_KINDS if policy.gate(k).get("required")])
    unknown = [k for k in kinds if k not in GateKind.values]
    if unknown or not kinds:
        raise ValidationError({"kinds": f"Choose gates among {', '.join(GateKind.values)}."})
    if version.lifecycle in ("rejected", "retired"):
        raise ValidationError({"version": f"{version} is {version.lifecycle}: its gates are closed."})
    with transaction.atomic():
        active = GateRun.objects.select_for_update().filter(
            model_version=version, status__in=(GateRunStatus.QUEUED, GateRunStatus.RUNNING)
        )
        if active.exists():
            raise ValidationError({"version": "The gates of this version are already running."})
        run = GateRun.objects.create(
            model_version=version,
            policy=policy,
            mode=mode,
            kinds=kinds,
            created_by=actor if getattr(actor, "pk", None) else None,
            progress_message="queued",
        )
        audit_record(actor=actor, action="gate_run.start", target=run,
                     after={"version": version.pk, "policy": policy.number, "mode": mode, "kinds": kinds})  # fmt: skip
        if enqueue:
            emit("evaluations.gate_run_queued", subject=run, payload={"run": run.pk})
    return run


def _enqueue(run_id: int) -> None:
    from evaluations.tasks import gate_run_execute_task

    result = gate_run_execute_task.delay(run_id)
    GateRun.objects.filter(pk=run_id).update(task_id=result.id or "")


class GateError(Exception):
    """The gate could not be judged (no deployment, a run failed, the deployment died): verdict error."""

    def __init__(self, message: str, **evidence) -> None:
        super().__init__(message)
        self.evidence = evidence


def gate_run_execute(*, run_id: int) -> GateRun:
    """Claim a queued gate run and decide each of its gates. A second call does nothing."""
    claimed = run_claim(GateRun, pk=run_id, progress=1)
    run = GateRun.objects.select_related("model_version__model", "policy__gpu_type").get(pk=run_id)
    if not claimed:
        return run
    # The gates run their evals and benchmarks inline; the heartbeat says the worker is alive.
    with Heartbeat(lambda: run_report(GateRun, pk=run_id), every_s=5.0, name=f"gate-run-{run_id}-heartbeat"):
        _decide_all(run)
    run_finish(GateRun, pk=run_id)
    run.refresh_from_db()
    return run


def _decide_all(run: GateRun) -> None:
    run_id = run.pk
    runners = {GateKind.QUALITY: _quality, GateKind.PERFORMANCE: _performance, GateKind.STABILITY: _stability}
    for k, kind in enumerate(run.kinds):
        run_report(GateRun, pk=run_id, progress=max(1, int(100 * k / len(run.kinds))),
                   progress_message=f"{kind} gate running")  # fmt: skip
        try:
            fields = runners[kind](run)
        except GateError as exc:
            fields = {"verdict": Verdict.ERROR, "summary": str(exc), **exc.evidence}
        except Exception as exc:  # noqa: BLE001 - an unexpected failure is an error verdict, never a pass
            fields = {"verdict": Verdict.ERROR, "summary": f"{type(exc).__name__}: {exc}"}
        _decide(run, kind, **fields)


def _decide(
    run: GateRun, kind: str, *, verdict: str, summary: str = "", label: str = "", **fields
) -> GateDecision:
    policy = run.policy
    default_label = EvidenceLabel.PREDICTED if run.mode == GateMode.PREDICTED else EvidenceLabel.MEASURED
    with transaction.atomic():
        decision = GateDecision.objects.create(
            gate_run=run,
            model_version=run.model_version,
            policy=policy,
            gpu_type=policy.gpu_type,
            kind=kind,
            verdict=verdict,
            label=label or (EvidenceLabel.SIMULATED if kind == GateKind.QUALITY else default_label),
            thresholds=fields.pop("thresholds", policy.gate(kind)),
            summary=summary[:5000],
            decided_by="controller",
            **fields,
        )
        audit_record(
            actor="controller",
            action="gate_decision.record",
            target=decision,
            after={"kind": kind, "verdict": verdict, "label": decision.label, "policy": policy.number},
            reason=summary[:1000],
            evidence={
                "gate_run": run.pk,
                "eval_run": decision.eval_run_id,
                "baseline_eval_run": decision.baseline_eval_run_id,
                "benchmark_run": decision.benchmark_run_id,
                "baseline_benchmark_run": decision.baseline_benchmark_run_id,
                "checks": decision.checks,
            },
        )
        if verdict in (Verdict.FAILED, Verdict.ERROR):
            # An operational signal beside the audited decision, for reactions that warn someone.
            emit(
                "evaluations.gate_failed",
                subject=decision,
                payload={
                    "gate_run": run.pk,
                    "version": run.model_version_id,
                    "kind": kind,
                    "verdict": verdict,
                },
            )
    return decision


def _summary(checks: list[dict], verdict: str) -> str:
    failed = [f"{c['name']}: {c['detail'] or c['value']}" for c in checks if not c["passed"]]
    if verdict == Verdict.PASSED:
        return f"all {len(checks)} checks passed"
    return "failed: " + "; ".join(failed)


def _baseline_version(run: GateRun):
    version = run.model_version
    setting = run.policy.quality.get("baseline", "serving")
    if isinstance(setting, int):
        baseline = version.model.versions.filter(pk=setting).first()
    else:
        baseline = model_serving_version(model_id=version.model_id) or version.baseline
    if baseline is None or baseline.pk == version.pk:
        raise GateError(
            f"No baseline for {version}: no other version of {version.model.name} is serving, and it has no baseline."
        )
    return baseline


def _deployment(version, gpu_type, *, needed_for: str):
    d = deployment_for_version(version_id=version.pk, gpu_type_id=gpu_type.pk)
    if d is None:
        raise GateError(f"No live deployment of {version} on {gpu_type.name}: the {needed_for} needs one.")
    return d


def _recent():
    return timezone.now() - timedelta(hours=GATE_REUSE_HOURS)


# --- quality ------------------------------------------------------------------------------------------


def _eval_on(deployment, suite_version) -> EvalRun:
    """A recent succeeded eval of this suite version on this deployment, or a new one run now."""
    reused = (
        EvalRun.objects.filter(
            suite_version=suite_version,
            deployment=deployment,
            model_version=deployment.model_version,
            status=RunStatus.SUCCEEDED,
            cases_failed=0,
            created_at__gte=_recent(),
        )
        .order_by("-created_at")
        .first()
    )
    if reused is not None:
        return reused
    run = eval_run_create(
        actor="controller", suite_version=suite_version, deployment=deployment, enqueue=False
    )
    return eval_run_execute(run_id=run.pk)


def _check_eval(run: EvalRun, deployment, who: str) -> None:
    health = deployment_health(pk=deployment.pk)
    if health["deleted"] or health["status"] in ("DEPLOY_FAILED", "UNHEALTHY", "STOPPED"):
        raise GateError(
            f"The {who} deployment {deployment} is {health['status'].lower()}: {health['message']}".strip(
                ": "
            )
        )
    if run.status != RunStatus.SUCCEEDED:
        raise GateError(f"The {who} eval run #{run.pk} {run.status}: {run.error or run.progress_message}")
    if run.cases_total and run.cases_failed / run.cases_total > MAX_EVAL_ERROR_RATE:
        raise GateError(
            f"{run.cases_failed} of {run.cases_total} requests of the {who} eval run #{run.pk} failed: "
            "the endpoint did not answer reliably, so its scores say nothing about the model."
        )


def _quality(run: GateRun) -> dict:
    policy, version, gpu = run.policy, run.model_version, run.policy.gpu_type
    cfg = policy.quality
    suite = EvalSuite.objects.filter(name=cfg.get("suite")).first()
    suite_version = suite.versions.order_by("-number").first() if suite else None
    if suite_version is None:
        raise GateError(f"The policy's eval suite {cfg.get('suite')!r} has no version.")
    baseline = _baseline_version(run)
    cand_dep = _deployment(version, gpu, needed_for="quality gate")
    base_dep = _deployment(baseline, gpu, needed_for="quality gate's baseline")
    cand_run = _eval_on(cand_dep, suite_version)
    evidence = {"eval_run": cand_run, "baseline_version": baseline}
    try:
        _check_eval(cand_run, cand_dep, "candidate")
        base_run = _eval_on(base_dep, suite_version)
        evidence["baseline_eval_run"] = base_run
        _check_eval(base_run, base_dep, "baseline")
    except GateError as exc:
        exc.evidence.update(evidence)
        raise
    cand_rows = list(cand_run.case_results.values("category", "score", "error"))
    base_rows = list(base_run.case_results.values("category", "score", "error"))
    comparison = {
        cat: {"delta": d.diff, "low": d.lo, "high": d.hi}
        for cat, d in stats.compare(cand_rows, base_rows).items()
    }
    checks, verdict = judge.judge_quality(
        policy=cfg, candidate=cand_run.scores, baseline=base_run.scores, comparison=comparison
    )
    label = (
        EvidenceLabel.SIMULATED
        if EvidenceLabel.SIMULATED in (cand_run.label, base_run.label)
        else EvidenceLabel.MEASURED
    )
    return {
        "verdict": verdict,
        "summary": _summary(checks, verdict),
        "label": label,
        "checks": checks,
        "measured": {"candidate": cand_run.scores, "baseline": base_run.scores, "comparison": comparison},
        **evidence,
    }


# --- performance -------------------------------------------------------------------------------------


def _benchmark(*, run: GateRun, version, deployment, mode: str, workload: dict, sla: dict, stage: dict,
               ladder: list[float] | None = None) -> BenchmarkRun:  # fmt: skip
    """A recent succeeded benchmark on the same inputs, or a new one run now (inline, in this task)."""
    kind = RunKind.PREDICTED if run.mode == GateMode.PREDICTED else RunKind.MEASURED
    gpu = run.policy.gpu_type
    if kind == RunKind.MEASURED and deployment is None:
        raise GateError(f"No live deployment of {version} on {gpu.name} to measure.")
    filters = dict(kind=kind, mode=mode, status=RunStatus.SUCCEEDED, model_version=version, gpu_type=gpu,
                   deployment=deployment, created_at__gte=_recent())  # fmt: skip
    for candidate in BenchmarkRun.objects.filter(**filters).order_by("-created_at")[:20]:
        if (candidate.workload, candidate.sla, candidate.ladder) == (
            Workload.from_dict(workload).to_dict(),
            _sla_dict(sla),
            [float(x) for x in (ladder or [])],
        ) and all(candidate.stage.get(k) == v for k, v in stage.items()):
            return candidate
    created = benchmark_run_create(
        actor="controller",
        kind=kind,
        mode=mode,
        deployment=deployment,
        model_version=None if deployment else version,
        gpu_type=None if deployment else gpu,
        workload=workload,
        sla=sla,
        stage=stage,
        ladder=ladder,
        name=f"Gate: {mode} of {version}",
        enqueue=False,
    )
    return benchmark_run_execute(run_id=created.pk)


def _sla_dict(sla: dict) -> dict:
    from loadtest import Sla

    return Sla.from_dict(sla).to_dict()


def _capacity_stage(bench: BenchmarkRun) -> dict:
    number = (bench.results.get("capacity") or {}).get("stage")
    return next((s for s in bench.results.get("stages", []) if s.get("stage") == number), {})


def _check_bench(bench: BenchmarkRun, deployment, who: str) -> None:
    if deployment is not None and bench.kind == RunKind.MEASURED:
        health = deployment_health(pk=deployment.pk)
        if health["deleted"] or health["status"] in ("DEPLOY_FAILED", "UNHEALTHY", "STOPPED"):
            raise GateError(
                f"The {who} deployment {deployment} is {health['status'].lower()} {health['message']}".strip()
            )
    if bench.status != RunStatus.SUCCEEDED:
        raise GateError(
            f"The {who} benchmark #{bench.pk} {bench.status}: {bench.error or bench.progress_message}"
        )


def _kv_seqs(version, gpu, deployment, context: int | None) -> int | None:
    if context is None:
        return None
    tp = (deployment.tensor_parallel_size,) if deployment else (1, 2, 4, 8)
    util = deployment.gpu_memory_utilization if deployment else 0.9
    row = model_version_memory_estimates(
        version=version,
        gpu_types=[gpu],
        tensor_parallel_sizes=tp,
        gpu_memory_utilization=util,
        context_len=context,
    )[0]
    return row["best"].max_concurrent_seqs if row["best"] else 0


def _performance(run: GateRun) -> dict:
    cfg, version, gpu = run.policy.performance, run.model_version, run.policy.gpu_type
    workload = {"arrival": {"kind": "poisson", "rate": 1.0}, **cfg["workload"]}
    sla = {k: v for k, v in cfg["sla"].items() if v is not None}
    stage = {"duration_s": cfg.get("stage_duration_s") or 60.0, "warmup_requests": 4, "seed": 0}
    cand_dep = deployment_for_version(version_id=version.pk, gpu_type_id=gpu.pk)
    evidence: dict = {}
    bench = _benchmark(
        run=run,
        version=version,
        deployment=cand_dep,
        mode=RunMode.SWEEP,
        workload=workload,
        sla=sla,
        stage=stage,
    )
    evidence["benchmark_run"] = bench
    baseline_bench = None
    try:
        _check_bench(bench, cand_dep, "candidate")
        if cfg.get("min_goodput_ratio") is not None:
            baseline = _baseline_version(run)
            evidence["baseline_version"] = baseline
            base_dep = deployment_for_version(version_id=baseline.pk, gpu_type_id=gpu.pk)
            baseline_bench = _benchmark(run=run, version=baseline, deployment=base_dep, mode=RunMode.SWEEP,
                                        workload=workload, sla=sla, stage=stage)  # fmt: skip
            evidence["baseline_benchmark_run"] = baseline_bench
            _check_bench(baseline_bench, base_dep, "baseline")
    except GateError as exc:
        exc.evidence.update(evidence)
        raise
    kv = _kv_seqs(version, gpu, cand_dep, cfg.get("kv_context_tokens"))
    cand = {
        "capacity_rps": bench.capacity_rps,
        "usd_per_mtok": bench.usd_per_mtok,
        "stage": _capacity_stage(bench),
    }
    base = (
        {"capacity_rps": baseline_bench.capacity_rps, "usd_per_mtok": baseline_bench.usd_per_mtok}
        if baseline_bench
        else None
    )
    checks, verdict = judge.judge_performance(policy=cfg, candidate=cand, baseline=base, kv_seqs=kv)
    stage_row = cand["stage"]
    measured = {
        "capacity_rps": bench.capacity_rps,
        "baseline_capacity_rps": base["capacity_rps"] if base else None,
        "p95_ttft_ms": (stage_row.get("ttft_ms") or {}).get("p95"),
        "p95_tpot_ms": (stage_row.get("tpot_ms") or {}).get("p95"),
        "kv_seqs": kv,
        "usd_per_mtok": bench.usd_per_mtok,
    }
    label = EvidenceLabel.PREDICTED if bench.kind == RunKind.PREDICTED else EvidenceLabel.MEASURED
    return {"verdict": verdict, "summary": _summary(checks, verdict), "label": label, "checks": checks,
            "measured": measured, **evidence}  # fmt: skip


# --- stability ---------------------------------------------------------------------------------------


def soak_plan(cfg: dict) -> tuple[dict, list[float], float]:
    """(workload with the length mix, wave levels low/high/…, seconds per level) of a soak."""
    mix = cfg["length_mix"]
    pairs = [[p["input"], p["output"]] for p in mix for _ in range(int(p["weight"]))]
    waves = cfg["waves"]
    half = waves["period_s"] / 2
    stages = max(2, min(MAX_WAVE_STAGES, math.ceil(cfg["duration_s"] / half)))
    per_stage = cfg["duration_s"] / stages
    levels = [waves["low_rps"] if i % 2 == 0 else waves["high_rps"] for i in range(stages)]
    workload = {"arrival": {"kind": "poisson", "rate": waves["low_rps"]}, "empirical": pairs}
    return workload, levels, per_stage


def _preemptions(bench: BenchmarkRun) -> int | None:
    stages = bench.results.get("stages", [])
    if stages and all("preemptions" in s for s in stages):
        return int(sum(s["preemptions"] or 0 for s in stages))
    values = [s["preemptions"] for s in bench.series if s.get("preemptions") is not None]
    return int(max(values) - min(values)) if values else None


def _stability(run: GateRun) -> dict:
    cfg, version, gpu = run.policy.stability, run.model_version, run.policy.gpu_type
    workload, levels, per_stage = soak_plan(cfg)
    deployment = deployment_for_version(version_id=version.pk, gpu_type_id=gpu.pk)
    started = timezone.now()
    bench = _benchmark(run=run, version=version, deployment=deployment, mode=RunMode.LADDER, workload=workload,
                       sla={"ttft_ms": 60_000}, stage={"duration_s": per_stage, "warmup_requests": 0, "seed": 0},
                       ladder=levels)  # fmt: skip
    try:
        _check_bench(bench, deployment, "soak")
    except GateError as exc:
        exc.evidence["benchmark_run"] = bench
        raise
    totals = bench.results.get("totals", {})
    if bench.kind == RunKind.PREDICTED:
        restarts, restarts_detail = (
            0,
            "predicted: the simulator models no crash; run measured gates to observe restarts",
        )
    else:
        restarts = deployment_failures_between(
            pk=deployment.pk, since=bench.started_at or started, until=timezone.now()
        )
        restarts_detail = "times the deployment went unhealthy or failed during the soak"
    soak = {
        "requests": totals.get("requests"),
        "failed": totals.get("failed"),
        "preemptions": _preemptions(bench),
        "restarts": restarts,
        "restarts_detail": restarts_detail,
        "duration_s": sum(s.get("duration_s") or 0 for s in bench.results.get("stages", [])),
    }
    checks, verdict = judge.judge_stability(policy=cfg, soak=soak)
    label = EvidenceLabel.PREDICTED if bench.kind == RunKind.PREDICTED else EvidenceLabel.MEASURED
    return {"verdict": verdict, "summary": _summary(checks, verdict), "label": label, "checks": checks,
            "measured": {**soak, "levels": levels, "seconds_per_level": per_stage}, "benchmark_run": bench}  # fmt: skip
