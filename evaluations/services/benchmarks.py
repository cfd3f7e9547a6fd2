"""Benchmark writes: create a run (validated, snapshotted, enqueued), execute it, cancel it.

``benchmark_run_execute`` is what the Celery task and ``manage.py benchmark`` call: it claims the
row (queued → running, once), runs the harness (or the simulator for predicted runs), stores the
report and the headline figures, and always leaves the row in a final state.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from core.lifecycle import Heartbeat, run_cancel, run_claim, run_fail, run_finish, run_report
from core.runs import RunStatus
from deployments.services import deployment_capacity_record
from engines.workload import Workload
from evaluations import schemas
from evaluations.constants import (
    DEFAULT_SAMPLING,
    DEFAULT_STAGE,
    MAX_CONCURRENCY,
    MAX_LADDER_LEVELS,
    MAX_RATE_RPS,
    MAX_REQUESTS_PER_STAGE,
    MAX_SWEEP_STAGES,
    MAX_TOKENS_PER_REQUEST,
    RunKind,
    RunMode,
    TargetKind,
)
from evaluations.models import BenchmarkRun
from evaluations.reports import build_results
from evaluations.schemas import schema_check
from evaluations.services.calibrations import (
    EXTRAPOLATION_WIDENING,
    extrapolation,
    prediction_basis,
    with_interval,
)
from events.services import emit
from loadtest import Sla, StageConfig, SweepConfig, Target, find_capacity, run_ladder, run_stage
from loadtest.crosscheck import CrossCheckError, unavailable_reason
from loadtest.runner import HarnessError, arrival_at, cross_check_stage
from loadtest.sweep import DEFAULT_TARGET_ATTAINMENT


class RunCancelled(Exception):
    """Raised inside the harness's progress callback when an admin cancelled the run."""


# --- create -----------------------------------------------------------------------------------


def _validate_workload(workload: dict) -> Workload:
    """The schema (``schemas.WORKLOAD``: kinds and bounds), then the dataclass's own rules."""
    schema_check(schemas.WORKLOAD, workload, field="workload")
    try:
        return Workload.from_dict(workload)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValidationError({"workload": f"Invalid workload: {exc}"}) from exc


def _length_upper(dist) -> float:
    """The longest length a distribution is meant to produce (its max, else its defining figure)."""
    if dist.max is not None:
        return float(dist.max)
    if dist.kind == "fixed":
        return float(dist.value)
    if dist.kind == "uniform":
        return float(dist.high)
    return float(dist.mean)


def _check_lengths(wl: Workload, *, context: int, context_source: str) -> None:
    """Every request must fit the model's context (and the platform's max) with its output."""
    limit = min(context, MAX_TOKENS_PER_REQUEST)
    if wl.empirical is not None:
        longest = max(i + o for i, o in wl.empirical)
        if longest > limit:
            raise ValidationError(
                {
                    "workload": f"An empirical pair needs {longest:,} tokens; {context_source} allows {limit:,}."
                }
            )
        return
    uppers = {}
    for side, dist in (("input", wl.input), ("output", wl.output)):
        if dist.std is not None and not 0 <= dist.std <= limit:
            raise ValidationError({"workload": f"The {side} length's std must be in [0, {limit:,}] tokens."})
        uppers[side] = _length_upper(dist)
        if uppers[side] > limit:
            raise ValidationError(
                {
                    "workload": f"{side.capitalize()} lengths up to {uppers[side]:,.0f} tokens exceed {limit:,} ({context_source})."
                }
            )
    if uppers["input"] + uppers["output"] > limit:
        raise ValidationError(
            {
                "workload": f"Input plus output ({uppers['input']:,.0f} + {uppers['output']:,.0f} tokens) "
                f"exceeds {limit:,} tokens ({context_source})."
            }
        )


def _context_of(*, deployment, model_version) -> tuple[int, str]:
    if deployment is not None and getattr(deployment, "max_model_len", None):
        return int(deployment.max_model_len), "the deployment's max_model_len"
    mv = deployment.model_version if deployment is not None else model_version
    if mv is not None:
        return int(mv.model.max_context), f"{mv.model.name}'s context"
    return MAX_TOKENS_PER_REQUEST, "the platform's per-request maximum"


def _check_volume(*, wl: Workload, stage: StageConfig, mode: str, ladder: list[float], sweep) -> None:
    """Bound the requests one stage plans (a worker samples them all up front)."""
    if mode == RunMode.LADDER:
        cap = MAX_CONCURRENCY if wl.arrival.closed_loop else MAX_RATE_RPS
        if any(not math.isfinite(x) or x > cap for x in ladder):
            unit = "clients" if wl.arrival.closed_loop else "req/s"
            raise ValidationError({"ladder": f"Ladder levels must be at most {cap:,.0f} {unit}."})
    if mode == RunMode.SWEEP and (sweep.max_rate > MAX_RATE_RPS or sweep.max_stages > MAX_SWEEP_STAGES):
        raise ValidationError(
            {
                "sweep": f"A sweep goes up to at most {MAX_RATE_RPS:,.0f} req/s in at most {MAX_SWEEP_STAGES} stages."
            }
        )
    if stage.duration_s is None or wl.arrival.closed_loop:
        return
    top = wl.arrival.rate
    if mode == RunMode.LADDER and ladder:
        top = max(ladder)
    elif mode == RunMode.SWEEP:
        top = sweep.max_rate
    planned = top * stage.duration_s
    if planned > MAX_REQUESTS_PER_STAGE:
        raise ValidationError(
            {
                "stage": f"{top:,.0f} req/s for {stage.duration_s:,.0f} s plans {planned:,.0f} requests in a stage; "
                f"at most {MAX_REQUESTS_PER_STAGE:,}. Shorten the stage or lower the rate."
            }
        )


def _validate_sla(sla: dict) -> Sla:
    schema_check(schemas.SLA, sla, field="sla")
    parsed = Sla.from_dict(sla)
    if parsed.ttft_ms is None and parsed.tpot_ms is None and parsed.e2e_ms is None:
        raise ValidationError({"sla": "An SLA needs at least one limit."})
    return parsed


def _validate_stage(stage: dict) -> StageConfig:
    schema_check(schemas.STAGE, stage, field="stage")
    merged = {**DEFAULT_STAGE, **stage}
    if merged.get("duration_s") is None and merged.get("num_requests") is None:
        raise ValidationError({"stage": "Stop each stage by a duration or a request count."})
    return StageConfig(
        duration_s=None if merged.get("duration_s") is None else float(merged["duration_s"]),
        num_requests=None if merged.get("num_requests") is None else int(merged["num_requests"]),
        warmup_requests=int(merged.get("warmup_requests") or 0),
        processes=int(merged.get("processes") or 0),
        seed=int(merged.get("seed") or 0),
    )


def _local_tokenizer_dir(uri: str) -> str:
    """A weights URI that is a local model directory with ``tokenizer.json`` (``file://`` or a path)."""
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    if path.startswith("/") and (Path(path) / "tokenizer.json").is_file():
        return path
    return ""


def _snapshot(
    *, deployment, model_version, gpu_type, gpus: int | None, tensor_parallel: int, replicas: int
) -> dict:
    """What is under test, frozen at creation (the report must not change when the catalog does)."""
    from catalog.services import gpu_hourly_cost

    snap: dict = {}
    if deployment is not None:
        model_version = deployment.model_version
        gpu_type = deployment.gpu_type
        tensor_parallel = deployment.tensor_parallel_size
        replicas = deployment.num_replicas
        if getattr(deployment, "scaling_mode", "fixed") != "fixed":
            replicas = max(deployment.running_replicas or 0, deployment.min_replicas or 1)
        per_replica = deployment.gpus_per_replica
        gpus = per_replica * replicas
        snap.update(
            deployment=deployment.name,
            deployment_id=deployment.pk,
            engine_kind=deployment.engine_kind,
            max_num_seqs=deployment.max_num_seqs,
            max_num_batched_tokens=deployment.max_num_batched_tokens,
            enable_prefix_caching=deployment.enable_prefix_caching,
            quantization=deployment.quantization,
            kv_cache_dtype=deployment.kv_cache_dtype,
        )
    if model_version is not None:
        snap.update(
            model=model_version.model.name,
            model_version=model_version.label,
            model_version_id=model_version.pk,
            precision=model_version.precision,
            framework=model_version.framework,
        )
        if tok := _local_tokenizer_dir(model_version.weights_uri or ""):
            snap["tokenizer_dir"] = tok
    if gpu_type is not None:
        snap.update(
            gpu_type=gpu_type.name, gpu_type_id=gpu_type.pk, gpu_usd_per_hour=str(gpu_hourly_cost(gpu_type))
        )
    snap.update(
        tensor_parallel=tensor_parallel,
        replicas=replicas,
        gpus=gpus if gpus is not None else (tensor_parallel * replicas if gpu_type is not None else 0),
        parallelism=f"TP={tensor_parallel} × {replicas} replica{'s' if replicas != 1 else ''}",
    )
    return snap


@transaction.atomic
def benchmark_run_create(
    *,
    actor,
    kind: str = RunKind.MEASURED,
    mode: str = RunMode.SINGLE,
    target_kind: str = TargetKind.DEPLOYMENT,
    deployment=None,
    base_url: str = "",
    model_name: str = "",
    api: str = "completions",
    model_version=None,
    gpu_type=None,
    gpus: int | None = None,
    tensor_parallel: int = 1,
    replicas: int = 1,
    workload: dict,
    sla: dict,
    ladder: list[float] | None = None,
    sweep: dict | None = None,
    stage: dict | None = None,
    sampling: dict | None = None,
    tokenizer_dir: str = "",
    name: str = "",
    enqueue: bool = True,
) -> BenchmarkRun:
    """Validate, snapshot the target, save a queued run and (after commit) enqueue its task.

    ``tokenizer_dir``: a local directory with the served model's ``tokenizer.json``; prompts are
    then built to exact token counts locally (without one, the harness asks the server). A catalog
    version whose weights URI is such a directory supplies it by itself.
    """
    if tokenizer_dir and not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise ValidationError({"tokenizer_dir": f"No tokenizer.json in {tokenizer_dir}."})
    wl = _validate_workload(workload)
    sla_obj = _validate_sla(sla)
    stage_cfg = _validate_stage(stage or {})
    ladder = [float(x) for x in (ladder or [])]
    if mode not in RunMode.values:
        raise ValidationError({"mode": f"Unknown mode {mode!r}."})
    if kind not in RunKind.values:
        raise ValidationError({"kind": f"Unknown kind {kind!r}."})
    if mode == RunMode.LADDER and (
        not ladder or len(ladder) > MAX_LADDER_LEVELS or any(x <= 0 for x in ladder)
    ):
        raise ValidationError({"ladder": f"A ladder needs 1 to {MAX_LADDER_LEVELS} positive levels."})
    try:
        sweep_cfg = SweepConfig.from_dict({"target_attainment": DEFAULT_TARGET_ATTAINMENT, **(sweep or {})})
        sweep_cfg.validate()
    except (HarnessError, TypeError) as exc:
        raise ValidationError({"sweep": str(exc)}) from exc
    _check_volume(wl=wl, stage=stage_cfg, mode=mode, ladder=ladder, sweep=sweep_cfg)
    if mode == RunMode.SWEEP:
        if wl.arrival.closed_loop:
            raise ValidationError(
                {"workload": "A sweep searches offered rates: use constant, Poisson or gamma arrivals."}
            )
        if stage_cfg.duration_s is None:
            raise ValidationError(
                {"stage": "A sweep's stages stop by duration (rates are compared per second)."}
            )

    if kind == RunKind.PREDICTED:
        if deployment is None and (model_version is None or gpu_type is None):
            raise ValidationError(
                {"deployment": "A predicted run needs a deployment, or a model version and a GPU type."}
            )
        target_kind = TargetKind.DEPLOYMENT if deployment is not None else TargetKind.URL
    elif target_kind == TargetKind.DEPLOYMENT:
        if deployment is None:
            raise ValidationError({"deployment": "Choose the deployment to measure."})
        base_url = deployment.openai_base_url
        model_name = model_name or deployment.effective_served_model_name
    elif target_kind == TargetKind.GATEWAY:
        base_url = settings.GATEWAY_PUBLIC_URL.rstrip("/") + "/v1"
        if not model_name:
            raise ValidationError({"model_name": "Name the public model to request through the gateway."})
    elif target_kind == TargetKind.URL:
        if not base_url.startswith(("http://", "https://")):
            raise ValidationError({"base_url": "Give an http(s) OpenAI base URL, e.g. http://host:8000/v1."})
        if not model_name:
            raise ValidationError({"model_name": "Name the model the endpoint serves."})
    else:
        raise ValidationError({"target_kind": f"Unknown target {target_kind!r}."})
    if tensor_parallel < 1 or replicas < 1 or (gpus is not None and gpus < 0):
        raise ValidationError({"gpus": "GPU counts must be positive."})
    if tensor_parallel > 64 or replicas > 1024 or (gpus is not None and gpus > 65_536):
        raise ValidationError({"gpus": "At most TP 64, 1,024 replicas and 65,536 GPUs."})
    context, context_source = _context_of(deployment=deployment, model_version=model_version)
    _check_lengths(wl, context=context, context_source=context_source)

    snapshot = _snapshot(
        deployment=deployment,
        model_version=model_version,
        gpu_type=gpu_type,
        gpus=gpus,
        tensor_parallel=tensor_parallel,
        replicas=replicas,
    )
    if tokenizer_dir:
        snapshot["tokenizer_dir"] = tokenizer_dir
    if kind == RunKind.PREDICTED and deployment is not None and deployment.gpu_type_id is None:
        raise ValidationError({"deployment": "A predicted run needs a deployment with a GPU type."})
    run = BenchmarkRun.objects.create(
        name=name or _default_name(kind=kind, mode=mode, snapshot=snapshot, model_name=model_name),
        kind=kind,
        mode=mode,
        target_kind=target_kind,
        deployment=deployment,
        base_url=base_url,
        model_name=model_name,
        api=api,
        model_version_id=snapshot.get("model_version_id"),
        gpu_type_id=snapshot.get("gpu_type_id"),
        snapshot=snapshot,
        workload=wl.to_dict(),
        sampling=sampling if sampling is not None else dict(DEFAULT_SAMPLING),
        sla=sla_obj.to_dict(),
        ladder=ladder,
        sweep=sweep_cfg.to_dict(),
        stage=stage_cfg.to_dict(),
        created_by=actor if getattr(actor, "pk", None) else None,
        progress_message="queued",
    )
    audit_record(
        actor=actor,
        action="benchmark_run.create",
        target=run,
        after={"kind": kind, "mode": mode, "target_kind": target_kind, "deployment": run.deployment_id,
               "base_url": base_url, "workload": run.workload, "sla": run.sla},
    )  # fmt: skip
    if enqueue:
        emit("evaluations.benchmark_run_queued", subject=run, payload={"run": run.pk})
    return run


def _default_name(*, kind: str, mode: str, snapshot: dict, model_name: str) -> str:
    what = snapshot.get("deployment") or snapshot.get("model") or model_name or "endpoint"
    return f"{RunMode(mode).label} · {what} ({kind})"


def _enqueue(run_id: int) -> None:
    from evaluations.tasks import benchmark_run_execute_task

    result = benchmark_run_execute_task.delay(run_id)
    BenchmarkRun.objects.filter(pk=run_id).update(task_id=result.id or "")


# --- cancel -----------------------------------------------------------------------------------


@transaction.atomic
def benchmark_run_cancel(*, run: BenchmarkRun, actor) -> bool:
    """Queued or running → cancelled. A running harness notices within a second and stops."""
    changed = run_cancel(BenchmarkRun, pk=run.pk, actor=actor)
    run.refresh_from_db()
    if changed:
        audit_record(actor=actor, action="benchmark_run.cancel", target=run, after={"status": run.status})
    return changed


# --- execute ----------------------------------------------------------------------------------


class _ProgressWriter:
    """The harness's progress callback: it records the latest value, and the run's heartbeat thread
    (``lifecycle.Heartbeat``, once a second) writes it and reads back whether the run was cancelled,
    which makes the next callback raise ``RunCancelled``.
    """

    def __init__(self, run_id: int, on_progress=None) -> None:
        self.run_id = run_id
        self.value = (0.0, "starting")
        self.cancelled = False
        self.on_progress = on_progress
        self.heartbeat = Heartbeat(self.flush, every_s=1.0, name=f"benchmark-{run_id}-progress")

    def __call__(self, frac: float, message: str) -> None:
        self.value = (max(0.0, min(1.0, frac)), message)
        if self.on_progress is not None:
            self.on_progress(*self.value)
        if self.cancelled:
            raise RunCancelled()

    def __enter__(self) -> _ProgressWriter:
        self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.heartbeat.__exit__(*exc)

    def flush(self) -> None:
        frac, msg = self.value
        status = run_report(BenchmarkRun, pk=self.run_id, progress=min(99, int(frac * 100)),
                            progress_message=msg[:255])  # fmt: skip
        self.cancelled = status == BenchmarkRun.CANCELLED


def _target_for(run: BenchmarkRun) -> Target:
    return Target(
        base_url=run.base_url,
        model=run.model_name,
        api=run.api,
        api_key=getattr(settings, "BENCHMARK_API_KEY", "")
        if run.target_kind != TargetKind.DEPLOYMENT
        else "",
        sampling=run.sampling or {},
        tokenizer=(run.snapshot or {}).get("tokenizer_dir", "") if run.api == "completions" else "",
    )


def _predicted_engine(run: BenchmarkRun):
    """One replica's simulator config from the run's snapshot (deployment or spec fields), with the
    GPU type's newest calibration when there is one; returns ``(engine, prediction basis)``."""
    from catalog.selectors import gpu_type_get, model_version_get
    from engines.scheduler import EngineConfig
    from engines.sim import SimConfig
    from loadtest.predict import PredictedEngine

    snap = run.snapshot
    version = model_version_get(pk=snap["model_version_id"])
    gpu = gpu_type_get(pk=snap["gpu_type_id"])
    efficiency, basis = prediction_basis(gpu_type=gpu)
    engine_kwargs = {
        k: snap[k] for k in ("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching") if k in snap
    }
    engine = PredictedEngine(
        config=SimConfig(
            model=version.to_spec(),
            gpu=gpu.to_spec(),
            tensor_parallel=int(snap.get("tensor_parallel") or 1),
            engine=EngineConfig(**engine_kwargs),
            efficiency=efficiency,
        ),
        replicas=int(snap.get("replicas") or 1),
    )
    return engine, basis


def benchmark_run_execute(*, run_id: int, on_progress=None) -> BenchmarkRun:
    """Claim a queued run, run it, store its report. Idempotent: a second call does nothing."""
    claimed = run_claim(BenchmarkRun, pk=run_id)
    run = BenchmarkRun.objects.get(pk=run_id)
    if not claimed:
        return run
    try:
        with _ProgressWriter(run_id, on_progress) as writer:
            results, series = _execute(run, writer)
            writer.flush()
    except RunCancelled:
        run.refresh_from_db()
        return run
    except Exception as exc:  # recorded on the row: the page must say why, not spin forever
        run_fail(BenchmarkRun, pk=run_id, error=f"{type(exc).__name__}: {exc}")
        run.refresh_from_db()
        return run
    capacity = results["capacity"]
    cost = results["cost"]
    failed = results["totals"]["failed"]
    msg = "done"
    if failed:
        msg = f"done: {failed} of {results['totals']['requests']} requests failed ({', '.join(f'{k} {v}' for k, v in results['totals']['errors'].items())})"
    if results["client_bound"]:
        msg += " — CLIENT-BOUND stages, see warnings"
    run_finish(
        BenchmarkRun,
        pk=run_id,
        message=msg,
        results=results,
        series=series,
        capacity_rps=capacity["rate"] if capacity.get("level_unit") == "req/s" else None,
        token_goodput=capacity["token_goodput"],
        attainment=capacity["attainment"]
        if capacity["attainment"] is not None
        else (results["stages"][-1]["attainment"] if results["stages"] else None),
        usd_per_mtok=cost.get("usd_per_mtok_output") if cost.get("available") else None,
        client_bound=results["client_bound"],
    )
    run.refresh_from_db()
    inflight = capacity_inflight(results)
    if run.kind == RunKind.MEASURED and run.deployment_id and inflight and not results["client_bound"]:
        deployment_capacity_record(deployment_id=run.deployment_id, inflight=inflight, run_id=run.pk)
    return run


def capacity_inflight(results: dict) -> int | None:
    """Requests in flight at the capacity the sweep found (None without one): the stage's concurrency
    for a closed loop, else Little's law on what was measured there (completed requests per second
    × mean end-to-end seconds), rounded up. The gateways' default admission limit (gateway.admission)."""
    number = (results.get("capacity") or {}).get("stage")
    if number is None:
        return None
    stage = next((s for s in results.get("stages") or [] if s.get("stage") == number), None)
    if not stage:
        return None
    offered = stage.get("offered") or {}
    if offered.get("kind") == "concurrency" and offered.get("concurrency"):
        return int(offered["concurrency"])
    rps = stage.get("request_throughput")
    e2e = (stage.get("e2e_ms") or {}).get("mean")
    if not rps or not e2e:
        return None
    return max(1, math.ceil(rps * e2e / 1000))


def _execute(run: BenchmarkRun, progress: _ProgressWriter) -> tuple[dict, list]:
    workload = Workload.from_dict(run.workload)
    sla = Sla.from_dict(run.sla)
    stage_cfg = StageConfig(**{k: v for k, v in run.stage.items() if k in StageConfig.__dataclass_fields__})
    sweep_cfg = SweepConfig.from_dict(run.sweep)
    target = _target_for(run)
    stage_fn = run_stage
    engine = basis = None
    if run.kind == RunKind.PREDICTED:
        engine, basis = _predicted_engine(run)
        stage_fn = engine.stage
        stage_cfg.warmup_requests = 0
    started = time.monotonic()
    sweep_record = None
    if run.mode == RunMode.SWEEP:
        out = find_capacity(
            target=target,
            workload=workload,
            stage=stage_cfg,
            sla=sla,
            sweep=sweep_cfg,
            progress=progress,
            stage_fn=stage_fn,
        )
        stages = out.pop("_results")
        sweep_record = {
            k: out[k] for k in ("capacity_rate", "bracket", "converged", "order", "target_attainment")
        }
    elif run.mode == RunMode.LADDER:
        if run.kind == RunKind.PREDICTED:
            stages = []
            for k, level in enumerate(run.ladder):
                wl = _at(workload, level)
                stages.append(stage_fn(target=target, workload=wl, stage=stage_cfg, sla=sla))
                progress((k + 1) / len(run.ladder), f"level {level:g} simulated")
        else:
            stages = run_ladder(
                target=target,
                workload=workload,
                levels=run.ladder,
                stage=stage_cfg,
                sla=sla,
                progress=progress,
            )
    else:
        stages = [stage_fn(target=target, workload=workload, stage=stage_cfg, sla=sla, progress=progress)]
    results, series = build_results(
        stages=stages,
        sla=run.sla,
        snapshot=run.snapshot,
        target_attainment=sweep_cfg.target_attainment,
        sweep=sweep_record,
    )
    results["kind"] = run.kind
    if basis is not None:
        results["prediction"] = _prediction_with_intervals(results, basis)
    results["wall_s"] = time.monotonic() - started
    results["workload"] = run.workload
    return results, series


def _prediction_with_intervals(results: dict, basis: dict) -> dict:
    """The prediction's basis; each stage gets the interval of its predicted TTFT and TPOT medians
    (``p50_interval``, None without a held-out calibration). A stage whose mean lengths or load lie
    outside the calibrated range says so (``extrapolating``) and gets a wider interval."""
    iv = basis.get("interval_pct")
    for st in results.get("stages") or []:
        completed = st.get("completed") or 0
        offered = st.get("offered") or {}
        outside = extrapolation(
            basis.get("calibrated_range"),
            input_len=st["input_tokens"] / completed if completed and "input_tokens" in st else None,
            output_len=st["output_tokens"] / completed if completed and "output_tokens" in st else None,
            concurrency=offered.get("concurrency"),
            rate=offered.get("rate"),
        )
        widen = EXTRAPOLATION_WIDENING if outside else 1.0
        if outside:
            st["extrapolating"] = outside
        st["p50_interval"] = {
            "ttft_ms": with_interval((st.get("ttft_ms") or {}).get("p50"), iv, "ttft", widen=widen),
            "tpot_ms": with_interval((st.get("tpot_ms") or {}).get("p50"), iv, "tpot", widen=widen),
        }
    return basis


def _at(workload: Workload, level: float) -> Workload:
    return replace(workload, arrival=arrival_at(workload.arrival, level))


# --- cross-check with vLLM's own benchmark --------------------------------------------------------


def _cross_check_blocker(run: BenchmarkRun) -> str | None:
    if run.status != RunStatus.SUCCEEDED:
        return "Only a finished run can be cross-checked."
    if run.kind != RunKind.MEASURED:
        return "A predicted run sent no requests: there is nothing for vLLM to replay."
    if run.mode == RunMode.SWEEP:
        return "Cross-check a single or ladder run: a sweep's stages are chosen as it goes."
    if (run.results or {}).get("cross_check", {}).get("status") in ("queued", "running"):
        return "A cross-check of this run is already under way."
    return unavailable_reason(
        tokenizer_dir=(run.snapshot or {}).get("tokenizer_dir"), target=_target_for(run)
    )


def benchmark_run_cross_check_request(*, run: BenchmarkRun, actor, enqueue: bool = True) -> BenchmarkRun:
    """Ask for the run's stages to be replayed with ``vllm bench serve``; refused with a reason when impossible."""
    if reason := _cross_check_blocker(run):
        raise ValidationError(reason)
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
        results = dict(locked.results or {})
        before = results.get("cross_check", {}).get("status")
        results["cross_check"] = {"status": "queued", "tool": "vllm bench serve", "stages": []}
        locked.results = results
        locked.save(update_fields=["results"])
        audit_record(
            actor=actor,
            action="benchmark_run.cross_check",
            target=locked,
            before={"cross_check": before},
            after={"cross_check": "queued"},
            reason="replay the run's requests with vllm bench serve",
        )
        if enqueue:
            emit("evaluations.cross_check_queued", subject=locked, payload={"run": run.pk})
    run.refresh_from_db()
    return run


def _enqueue_cross_check(run_id: int) -> None:
    from evaluations.tasks import benchmark_run_cross_check_task

    benchmark_run_cross_check_task.delay(run_id)


def _set_cross_check(run_id: int, value: dict) -> None:
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run_id)
        results = dict(locked.results or {})
        results["cross_check"] = value
        locked.results = results
        locked.save(update_fields=["results"])


def _cross_check_claim(run_id: int) -> bool:
    """queued → running under the row's lock, once: a task enqueued twice (delivery is at least
    once) replays the run only once."""
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run_id)
        results = dict(locked.results or {})
        if (results.get("cross_check") or {}).get("status") not in ("queued", None):
            return False
        results["cross_check"] = {"status": "running", "tool": "vllm bench serve", "stages": []}
        locked.results = results
        locked.save(update_fields=["results"])
        return True


def benchmark_run_cross_check_execute(*, run_id: int) -> dict:
    """Replay each stage of a finished run with ``vllm bench serve`` and store both tools' figures."""
    if not _cross_check_claim(run_id):
        return (BenchmarkRun.objects.get(pk=run_id).results or {}).get("cross_check") or {}
    run = BenchmarkRun.objects.get(pk=run_id)
    target = _target_for(run)
    workload = Workload.from_dict(run.workload)
    stage_cfg = StageConfig(**{k: v for k, v in run.stage.items() if k in StageConfig.__dataclass_fields__})
    stage_cfg.warmup_requests = 0
    tokenizer_dir = (run.snapshot or {}).get("tokenizer_dir", "")
    out: list[dict] = []
    try:
        for summary in run.results.get("stages", []):
            level = summary.get("level")
            wl = _at(workload, level) if run.mode == RunMode.LADDER else workload
            check = cross_check_stage(
                target=target, workload=wl, stage=stage_cfg, summary=summary, tokenizer_dir=tokenizer_dir
            )
            out.append({"stage": summary.get("stage"), "level": level, **check})
    except (CrossCheckError, HarnessError, OSError) as exc:
        state = {"status": "failed", "tool": "vllm bench serve", "stages": out, "error": str(exc)[:2000]}
    else:
        state = {
            "status": "done",
            "tool": "vllm bench serve",
            "stages": out,
            "finished_at": timezone.now().isoformat(),
        }
    _set_cross_check(run_id, state)
    return state
