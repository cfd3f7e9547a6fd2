"""The one writer of Ray Serve's config: compile every desired deployment, PUT it whole, observe.

``deployments_reconcile`` runs under a PostgreSQL advisory lock, so two runs never interleave
(a second one waits, then finds the work done). It is idempotent: it compares the compiled config's
hash with the last one Ray accepted and the application names Ray reports, and PUTs only when they
differ, so a beat tick every few seconds costs one GET. ``deployments_observe`` only reads Ray's
status and stores it (the status watcher runs it every second while something is changing).

Ray unreachable → every live deployment shows ``UNKNOWN`` with the error, the caller retries
(``RayUnreachable``), and the first run that reaches Ray again re-PUTs if Ray lost its apps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction
from django.utils import timezone

from deployments import ray_client
from deployments.compiler import (
    ENGINE_DEPLOYMENT_NAMES,
    compile_application,
    compile_serve_config,
    config_hash,
    desired_deployments,
    serve_http_options,
)
from deployments.constants import RAY_APP_STATUS, TRANSITIONAL, DesiredState, EventKind, Status
from deployments.models import Deployment, DeploymentEvent, ReconcileRun
from deployments.ray_client import RayRejected, RayUnreachable
from deployments.selectors.gpu_hours import GPU_HOLDING_STATUSES
from events.services import emit

log = logging.getLogger(__name__)

# pg advisory lock key: "GOVD" in ASCII. One key for the whole cluster's Serve config.
LOCK_KEY = 0x474F5644
LOCK_WAIT_S = 120.0
KEEP_RUNS = 500
# Ray deployment states that will change without us: keep watching while any is present.
RAY_MOVING = frozenset({"UPDATING", "UPSCALING", "DOWNSCALING", "DEPLOYING", "NOT_STARTED", "DELETING"})


class LockBusy(Exception):
    """Another reconcile holds the lock (only raised when not waiting for it)."""


@contextmanager
def reconcile_lock(*, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the cluster-wide reconcile lock (a session-level PostgreSQL advisory lock).

    Session-level, not transaction-level, so the HTTP calls to Ray happen outside any transaction;
    a worker that dies closes its connection and PostgreSQL frees the lock.
    """
    deadline = time.monotonic() + wait_s
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
            if cursor.fetchone()[0]:
                break
            if time.monotonic() >= deadline:
                raise LockBusy(f"the reconcile lock was busy for {wait_s:.0f} s")
            time.sleep(0.1)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def _validate_application(app: dict) -> str:
    """Ray's own schema check for one application; returns the error text or ''."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeApplicationSchema

    try:
        ServeApplicationSchema.model_validate(app)
    except ValidationError as exc:
        return str(exc)
    return ""


def _last_accepted_hash() -> str:
    run = (
        ReconcileRun.objects.filter(
            outcome__in=[ReconcileRun.Outcome.APPLIED, ReconcileRun.Outcome.UNCHANGED]
        )
        .exclude(config_hash="")
        .order_by("-finished_at", "-id")
        .first()
    )
    return run.config_hash if run else ""


def deployments_reconcile(*, trigger: str = "manual", wait_s: float = LOCK_WAIT_S) -> ReconcileRun:
    """Make Ray Serve run exactly the desired deployments, then store what Ray reports.

    Raises ``RayUnreachable`` (after recording it) so the Celery task can retry with backoff.
    """
    run = ReconcileRun.objects.create(trigger=trigger[:32])
    unreachable: RayUnreachable | None = None
    try:
        with reconcile_lock(wait_s=wait_s):
            run.locked_at = timezone.now()
            run.save(update_fields=["locked_at"])
            desired = desired_deployments()
            invalid: dict[int, str] = {}
            valid = []
            for d in desired:
                error = _validate_application(compile_application(d))
                if error:
                    invalid[d.pk] = f"The compiled Serve application is invalid: {error}"
                else:
                    valid.append(d)
            config = compile_serve_config(valid)
            run.config_hash = config_hash(config)
            run.applications = len(valid)
            rejected = ""
            try:
                details = ray_client.get_applications()
                # Apps Ray is deleting are on their way out because an earlier PUT left them out.
                ray_apps = {
                    name
                    for name, app in (details.get("applications") or {}).items()
                    if app.get("status") != "DELETING"
                }
                wanted = {d.app_name for d in valid}
                if run.config_hash != _last_accepted_hash() or ray_apps != wanted:
                    try:
                        ray_client.put_applications(config)
                        run.outcome = ReconcileRun.Outcome.APPLIED
                    except RayRejected as exc:
                        rejected = exc.text
                        run.outcome = ReconcileRun.Outcome.REJECTED
                        run.error = exc.text[:10000]
                    details = ray_client.get_applications()
                else:
                    run.outcome = ReconcileRun.Outcome.UNCHANGED
            except RayUnreachable as exc:
                unreachable = exc
                run.outcome = ReconcileRun.Outcome.UNREACHABLE
                run.error = str(exc)[:10000]
                _mark_unreachable(str(exc))
            else:
                _store_observation(details, invalid=invalid, rejected=rejected)
            # Stamped before the lock is released: locked_at..finished_at is the critical section,
            # and _last_accepted_hash orders runs by finished_at, so a run stamped after the next
            # one took the lock would pass for the newest.
            run.finished_at = timezone.now()
            run.save()
    except LockBusy as exc:
        run.outcome = ReconcileRun.Outcome.UNREACHABLE
        run.error = str(exc)
        run.finished_at = timezone.now()
        run.save()
        raise
    _prune_runs()
    if unreachable is not None:
        raise unreachable
    return run


def deployments_observe() -> bool:
    """Read Ray's status and store it, without changing Ray; skipped while a reconcile runs.

    Returns True when something is still changing (the watcher should look again).
    """
    try:
        with reconcile_lock(wait_s=0):
            try:
                details = ray_client.get_applications()
            except RayUnreachable as exc:
                # Beat keeps probing every few seconds; a 1 s watch loop would only add noise.
                _mark_unreachable(str(exc))
                return False
            return _store_observation(details, invalid={}, rejected="")
    except LockBusy:
        return True


def _compact_deployments(app: dict) -> list[dict]:
    """Ray's deployments of one app, trimmed to what the console shows."""
    out = []
    for name, dep in sorted((app.get("deployments") or {}).items()):
        out.append(
            {
                "name": name,
                "status": dep.get("status", ""),
                "status_trigger": dep.get("status_trigger", ""),
                "message": dep.get("message", ""),
                "target_num_replicas": dep.get("target_num_replicas"),
                "replicas": [
                    {
                        "replica_id": r.get("replica_id", ""),
                        "state": r.get("state", ""),
                        "node_ip": r.get("node_ip") or "",
                        "pid": r.get("pid"),
                        "start_time_s": r.get("start_time_s"),
                    }
                    for r in dep.get("replicas") or []
                ],
            }
        )
    return out


def _engine_replicas(deployment: Deployment, compact: list[dict]) -> int:
    """RUNNING replicas of the engine deployment (the vLLM app also has an ingress deployment)."""
    engine_name = ENGINE_DEPLOYMENT_NAMES.get(deployment.engine_kind)
    counts = {d["name"]: sum(1 for r in d["replicas"] if r["state"] == "RUNNING") for d in compact}
    if engine_name in counts:
        return counts[engine_name]
    llm = [c for name, c in counts.items() if name.startswith("LLMServer")]
    if llm:
        return sum(llm)
    return max(counts.values(), default=0)


def _ray_message(app: dict) -> str:
    """Ray's application message, plus the deployments' messages when they say more."""
    parts = [app.get("message") or ""]
    for name, dep in sorted((app.get("deployments") or {}).items()):
        message = dep.get("message") or ""
        if message and message not in parts[0]:
            parts.append(f"{name}: {message}")
    return "\n".join(p for p in parts if p).strip()


def _observed_fields(deployment: Deployment, app: dict | None, *, invalid: str, rejected: str) -> dict:
    """What to store on the row for what Ray reports about its app (``None``: Ray has no such app)."""
    if app is None:
        if deployment.is_deleted:
            status, message = Status.DELETED, ""
        elif deployment.desired_state == DesiredState.STOPPED:
            status, message = Status.STOPPED, ""
        elif invalid:
            status, message = Status.DEPLOY_FAILED, invalid
        elif rejected:
            status, message = Status.DEPLOY_FAILED, f"Ray rejected the config: {rejected}"
        elif deployment.status == Status.DEPLOY_FAILED and not deployment.ray_app_status:
            # Failed before reaching Ray (invalid or rejected): a status-only read knows no better.
            status, message = Status.DEPLOY_FAILED, deployment.status_message
        else:
            status, message = Status.PENDING, "Waiting for Ray to accept the application."
        fields = {"status": status, "status_message": message, "running_replicas": 0, "ray_app_status": ""}
        if status == Status.DEPLOY_FAILED:
            fields["ray_deployments"] = []
        return fields
    compact = _compact_deployments(app)
    ray_status = app.get("status", "")
    status = RAY_APP_STATUS.get(ray_status, Status.UNKNOWN)
    if (
        deployment.is_deleted or deployment.desired_state == DesiredState.STOPPED
    ) and status != Status.DELETING:
        # Sent without it already; Ray is about to delete it.
        status = Status.DELETING
    return {
        "status": status,
        "status_message": _ray_message(app),
        "running_replicas": _engine_replicas(deployment, compact),
        "ray_app_status": ray_status[:16],
        "ray_deployments": compact,
    }


def _store_observation(details: dict, *, invalid: dict[int, str], rejected: str) -> bool:
    """Write Ray's view onto every deployment that is live or not yet confirmed gone."""
    apps = details.get("applications") or {}
    now = timezone.now()
    moving = False
    changed = False
    rows = list(
        Deployment.objects.exclude(status=Status.DELETED)
        .filter(rehearsal=False)
        .select_related("model_version__model")
    )
    # A deleted deployment's slug may already serve a new deployment: that app is not the old one's.
    live_slugs = {d.slug for d in rows if not d.is_deleted}
    for d in rows:
        app = None if d.is_deleted and d.slug in live_slugs else apps.get(d.app_name)
        fields = _observed_fields(d, app, invalid=invalid.get(d.pk, ""), rejected=rejected)
        fields["observed_at"] = now
        failed = fields["status"] in (Status.DEPLOY_FAILED, Status.UNHEALTHY)
        if failed and fields["status_message"] and fields["status_message"] != d.last_error:
            fields["last_error"] = fields["status_message"]
            fields["last_error_at"] = now
        if fields["status"] != d.status:
            fields["status_changed_at"] = now
            changed = True
        elif fields["status"] != d.display_status:
            # The first word from Ray since the platform started: the status was already stored but
            # read UNKNOWN (and the gateway did not route to it); publish so it routes again.
            changed = True
        elif (
            d.capacity_inflight
            and not d.max_inflight
            and fields.get("running_replicas", 0) != d.running_replicas
        ):
            # Its admission limit is per replica (Deployment.admission_limit): the gateways must know.
            changed = True
        _apply(d, fields)
        if fields["status"] in TRANSITIONAL or any(
            dep["status"] in RAY_MOVING for dep in fields.get("ray_deployments") or []
        ):
            moving = True
    if changed:
        _publish_routes()
    return moving


def _mark_unreachable(error: str) -> None:
    now = timezone.now()
    message = f"Cluster unreachable: {error}"
    changed = False
    for d in Deployment.objects.exclude(status__in=[Status.DELETED]).filter(rehearsal=False):
        fields = {"status": Status.UNKNOWN, "status_message": message, "observed_at": now}
        if d.status != Status.UNKNOWN:
            fields["status_changed_at"] = now
            changed = True
        _apply(d, fields)
    if changed:
        # The signal "a deployment is unreachable" (issue 28), and the gateway stops routing to it.
        _publish_routes("deployments.cluster_unreachable", {"message": message[:500]})


@transaction.atomic
def _apply(d: Deployment, fields: dict) -> None:
    """Store observed fields only (never desired ones: an admin may be editing them) and log changes."""
    before = d.status
    Deployment.objects.filter(pk=d.pk).update(**fields)
    after = fields.get("status", before)
    if after != before:
        DeploymentEvent.objects.create(
            deployment=d,
            kind=EventKind.STATUS,
            message=fields.get("status_message", "")[:20000],
            before={"status": before},
            after={
                "status": after,
                "ray_app_status": fields.get("ray_app_status", ""),
                # GPU-hour accounting (deployments.selectors.gpu_hours) reads replicas from this history.
                "running_replicas": fields.get("running_replicas", d.running_replicas),
            },
        )
    elif (
        "running_replicas" in fields
        and fields["running_replicas"] != d.running_replicas
        and after in GPU_HOLDING_STATUSES
    ):
        # Ray added or removed replicas (an autoscaler, a lost one): GPU-hours and the planner read
        # the replicas held over time from these (deployments.selectors.gpu_hours).
        DeploymentEvent.objects.create(
            deployment=d,
            kind=EventKind.REPLICAS,
            message=f"replicas running {d.running_replicas} → {fields['running_replicas']}",
            before={"status": after, "running_replicas": d.running_replicas},
            after={"status": after, "running_replicas": fields["running_replicas"]},
        )
    elif fields.get("last_error") and fields.get("last_error") != d.last_error:
        DeploymentEvent.objects.create(
            deployment=d, kind=EventKind.ERROR, message=fields["last_error"][:20000], after={"status": after}
        )


def _publish_routes(kind: str = "deployments.status_changed", payload: dict | None = None) -> None:
    """What the gateway may route to changed: an operational signal outside the audit chain, which
    republishes the ``routes`` section after commit (``deployments.reactions.routes_publish``)."""
    emit(kind, payload=payload)


def _prune_runs() -> None:
    keep = ReconcileRun.objects.order_by("-id").values_list("id", flat=True)[KEEP_RUNS : KEEP_RUNS + 1]
    cutoff = next(iter(keep), None)
    if cutoff is not None:
        ReconcileRun.objects.filter(id__lte=cutoff).delete()


def serve_config_preview() -> dict:
    """The config the next reconcile would send (for the console and the API)."""
    config = compile_serve_config(desired_deployments())
    config["http_options"] = serve_http_options()
    return config
