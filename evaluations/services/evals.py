"""Eval suites and eval runs: upload a suite (validated, immutable, checksummed), run it, score it.

``eval_run_execute`` is what the Celery task and the gate runner call: it claims the row (queued →
running, once), sends every case with ``evalkit.runner`` (temperature 0, fixed seed, bounded
concurrency), saves one ``EvalCaseResult`` per case as results arrive, and ends with per-category
scores and their intervals from ``evalkit.stats``. It always leaves the row in a final state.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.services import audit_record
from core.lifecycle import Heartbeat, run_cancel, run_claim, run_fail, run_finish, run_report
from core.runs import RunStatus
from evalkit import builtin, stats
from evalkit.cases import Case
from evalkit.runner import CaseResult, run_cases
from evalkit.suites import SuiteError, dump_jsonl, parse_jsonl
from evaluations.constants import (
    EVAL_DEFAULT_CONCURRENCY,
    EVAL_DEFAULT_SEED,
    EVAL_MAX_CONCURRENCY,
    MAX_SUITE_BYTES,
    EvidenceLabel,
)
from evaluations.models import EvalCaseResult, EvalRun, EvalSuite, EvalSuiteVersion
from events.services import emit

PROMPT_CHARS = 2000
log = logging.getLogger(__name__)

# --- suites ------------------------------------------------------------------------------------------


def suite_parse(*, content: str | bytes) -> tuple[str, list[Case]]:
    """(normalized text, cases) or ``ValidationError`` naming the bad line."""
    if len(content) > MAX_SUITE_BYTES:
        raise ValidationError({"content": f"The file is larger than {MAX_SUITE_BYTES // (1024 * 1024)} MiB."})
    try:
        cases = parse_jsonl(content)
    except SuiteError as exc:
        where = f"Line {exc.line}: " if exc.line else ""
        raise ValidationError({"content": f"{where}{exc.message}"}) from exc
    return dump_jsonl(cases), cases


@transaction.atomic
def eval_suite_upload(
    *,
    name: str,
    content: str | bytes,
    actor,
    description: str = "",
    note: str = "",
    builtin_suite: bool = False,
) -> EvalSuiteVersion:
    """Add a version to the suite ``name`` (created if new). Nothing is saved when a line is bad.

    The same content twice is refused (the checksum is unique per suite) rather than stored twice.
    """
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "A suite needs a name."})
    text, cases = suite_parse(content=content)
    checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
    suite, created = EvalSuite.objects.select_for_update().get_or_create(
        name=name,
        defaults={
            "description": description,
            "builtin": builtin_suite,
            "created_by": actor if getattr(actor, "pk", None) else None,
        },
    )
    existing = suite.versions.filter(checksum=checksum).first()
    if existing is not None:
        raise ValidationError({"content": f"This content is already {existing} (same SHA-256)."})
    number = (suite.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    version = EvalSuiteVersion.objects.create(
        suite=suite,
        number=number,
        content=text,
        case_count=len(cases),
        categories=sorted({c.category for c in cases}),
        checksum=checksum,
        note=note,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    audit_record(
        actor=actor,
        action="eval_suite.upload",
        target=version,
        after={"suite": suite.name, "number": number, "cases": len(cases), "checksum": checksum},
        reason=note,
    )
    return version


# Built-in suites registered by ``manage.py eval_builtin_suites`` and the demo: evalkit generator →
# number of cases. 80 cases per category keep a 95 % interval of a difference near ±0.1.
BUILTIN_REGISTRY = {
    "governor-core": {
        "description": "Arithmetic, JSON extraction, refusals and needle-in-a-haystack at ~1k and ~4k tokens "
        "(evalkit's built-in generators, seed 7). Fits an 8k context.",
        "parts": {"arithmetic": 80, "json_extraction": 80, "refusal": 80, "needle_1k": 40, "needle_4k": 40},
        "seed": 7,
    },
    "governor-long-context": {
        "description": "Needle-in-a-haystack at ~16k tokens (evalkit, seed 7): needs a 16k+ context.",
        "parts": {"needle_16k": 40},
        "seed": 7,
    },
}


def eval_builtin_suites_register(*, actor="system:seed") -> list[EvalSuiteVersion]:
    """Create the built-in suites that are missing (an existing suite is left as it is)."""
    created = []
    for name, spec in BUILTIN_REGISTRY.items():
        if EvalSuite.objects.filter(name=name).exists():
            continue
        cases = [
            c for part, n in spec["parts"].items() for c in builtin.generate(part, seed=spec["seed"], n=n)
        ]
        created.append(
            eval_suite_upload(
                name=name,
                content=dump_jsonl(cases),
                actor=actor,
                description=spec["description"],
                note="built-in",
                builtin_suite=True,
            )
        )
    return created


# --- eval runs -----------------------------------------------------------------------------------------


def eval_run_create(
    *,
    actor,
    suite_version: EvalSuiteVersion,
    deployment=None,
    base_url: str = "",
    model_name: str = "",
    model_version=None,
    label: str = "",
    seed: int = EVAL_DEFAULT_SEED,
    concurrency: int = EVAL_DEFAULT_CONCURRENCY,
    enqueue: bool = True,
) -> EvalRun:
    """Validate the target, save a queued run and (after commit) enqueue its task.

    The target is a deployment (its OpenAI base URL through Ray Serve and its served model name;
    the label follows its engine: simulated engines give *simulated* scores) or a bare URL.
    """
    if not 1 <= concurrency <= EVAL_MAX_CONCURRENCY:
        raise ValidationError({"concurrency": f"Concurrency must be between 1 and {EVAL_MAX_CONCURRENCY}."})
    snapshot: dict = {"suite": str(suite_version), "checksum": suite_version.checksum}
    gpu_type = None
    if deployment is not None:
        if deployment.is_deleted:
            raise ValidationError({"deployment": "This deployment was deleted."})
        base_url = deployment.openai_base_url
        model_name = deployment.effective_served_model_name
        model_version = deployment.model_version
        gpu_type = deployment.gpu_type
        label = EvidenceLabel.SIMULATED if deployment.engine_kind == "simulated" else EvidenceLabel.MEASURED
        snapshot.update(
            target=deployment.name,
            deployment_id=deployment.pk,
            engine_kind=deployment.engine_kind,
            gpu_type=str(gpu_type or ""),
        )
    elif not base_url or not model_name:
        raise ValidationError({"base_url": "An eval run needs a deployment, or a base URL and a model name."})
    else:
        snapshot["target"] = base_url
        label = label or EvidenceLabel.MEASURED
    if model_version is not None:
        snapshot.update(model_version=str(model_version), model_version_id=model_version.pk)
    with transaction.atomic():
        run = EvalRun.objects.create(
            suite_version=suite_version,
            model_version=model_version,
            deployment=deployment,
            gpu_type=gpu_type,
            label=label,
            base_url=base_url,
            model_name=model_name,
            seed=seed,
            concurrency=concurrency,
            cases_total=suite_version.case_count,
            snapshot=snapshot,
            created_by=actor if getattr(actor, "pk", None) else None,
            progress_message="queued",
        )
        if enqueue:
            emit("evaluations.eval_run_queued", subject=run, payload={"run": run.pk})
    return run


def _enqueue(run_id: int) -> None:
    from evaluations.tasks import eval_run_execute_task

    result = eval_run_execute_task.delay(run_id)
    EvalRun.objects.filter(pk=run_id).update(task_id=result.id or "")


def eval_run_cancel(*, run: EvalRun, actor) -> bool:
    """Queued or running → cancelled; the runner stops sending cases at the next save."""
    changed = run_cancel(EvalRun, pk=run.pk, actor=actor)
    run.refresh_from_db()
    return changed


class _Saver:
    """Collects results from the runner's event loop; the run's heartbeat thread saves them.

    The ORM refuses to run inside an event loop, so ``on_result`` only appends; the heartbeat
    (``lifecycle.Heartbeat``, about twice a second) saves the new rows and the progress, and reads
    back whether the run was cancelled. A batch that fails to save goes back to ``pending`` and is
    saved by the next beat or the final flush.
    """

    def __init__(self, run: EvalRun, cases: dict[str, Case]) -> None:
        self.run = run
        self.cases = cases
        self.pending: list[CaseResult] = []
        self.lock = threading.Lock()
        self.done = 0
        self.failed = 0
        self.cancelled = False
        self.heartbeat = Heartbeat(self.flush, every_s=0.5, name=f"eval-{run.pk}-saver")

    def on_result(self, result: CaseResult) -> None:
        with self.lock:
            self.pending.append(result)

    def should_stop(self) -> bool:
        return self.cancelled

    def __enter__(self) -> _Saver:
        self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.heartbeat.__exit__(*exc)
        self.flush()

    def flush(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        try:
            self._save(batch)
        except Exception:
            with self.lock:
                self.pending = batch + self.pending
            raise

    def _save(self, batch: list[CaseResult]) -> None:
        rows = []
        for r in batch:
            case = self.cases[r.case_id]
            rows.append(
                EvalCaseResult(
                    run_id=self.run.pk,
                    case_id=r.case_id,
                    category=r.category,
                    prompt=case.prompt_text()[:PROMPT_CHARS],
                    expected="" if case.expected is None else str(case.expected)[:PROMPT_CHARS],
                    output=r.output or "",
                    score=r.score,
                    latency_ms=r.latency_ms,
                    prompt_tokens=r.prompt_tokens,
                    output_tokens=r.completion_tokens,
                    error=r.error or "",
                )
            )
        if rows:
            EvalCaseResult.objects.bulk_create(rows, ignore_conflicts=True)
        done = self.done + len(batch)
        failed = self.failed + sum(1 for r in batch if r.error)
        total = max(1, self.run.cases_total)
        status = run_report(
            EvalRun,
            pk=self.run.pk,
            cases_done=done,
            cases_failed=failed,
            progress=min(99, int(100 * done / total)),
            progress_message=f"{done} of {total} cases",
        )
        self.done, self.failed = done, failed
        self.cancelled = status == EvalRun.CANCELLED


def scores_of(results) -> dict:
    """``{category: {"mean", "low", "high", "n", "method"}}`` from case results (rows or dicts)."""
    return {
        cat: {"mean": s.mean, "low": s.lo, "high": s.hi, "n": s.n, "method": s.method}
        for cat, s in stats.category_scores(results).items()
    }


def eval_run_execute(*, run_id: int) -> EvalRun:
    """Claim a queued run, send its cases, store results and scores. A second call does nothing."""
    claimed = run_claim(EvalRun, pk=run_id)
    run = EvalRun.objects.select_related("suite_version", "deployment").get(pk=run_id)
    if not claimed:
        return run
    try:
        cases = parse_jsonl(run.suite_version.content)
        by_id = {c.id: c for c in cases}
        with _Saver(run, by_id) as saver:
            run_cases(
                base_url=run.base_url,
                model=run.model_name,
                api_key="",
                cases=cases,
                concurrency=run.concurrency,
                seed=run.seed,
                temperature=0.0,
                include_truth=run.label == EvidenceLabel.SIMULATED,
                on_result=saver.on_result,
                should_stop=saver.should_stop,
            )
        run.refresh_from_db()
        if run.status == RunStatus.CANCELLED:
            return run
        rows = list(run.case_results.values("category", "score", "error"))
        failed = sum(1 for r in rows if r["error"])
        if rows and failed == len(rows):
            sample = next(r["error"] for r in rows if r["error"])
            raise RuntimeError(f"every request failed, e.g. {sample}")
        scores = scores_of(rows)
    except Exception as exc:  # recorded on the row: the page must say why, not spin forever
        run_fail(EvalRun, pk=run_id, error=f"{type(exc).__name__}: {exc}")
        run.refresh_from_db()
        return run
    msg = "done" + (f": {failed} of {len(rows)} requests failed (scored 0)" if failed else "")
    run_finish(EvalRun, pk=run_id, message=msg, scores=scores, cases_done=len(rows), cases_failed=failed)
    run.refresh_from_db()
    return run
