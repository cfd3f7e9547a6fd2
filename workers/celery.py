"""The Celery application. Broker and result backend are Redis (``REDIS_URL``).

Tasks live in each app's ``tasks.py`` (discovered automatically) and in ``workers.tasks`` for
platform-wide ones. The beat schedule is collected here so there is one place to read it.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")

app = Celery("governor")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    [
        "workers",
        "events",
        "audit",
        "catalog",
        "billing",
        "notify",
        "deployments",
        "evaluations",
        "operations",
        "batches",
    ]
)

# Periodic work. Entries are added by the apps that own the work (see each tasks.py docstring).
app.conf.beat_schedule = {}

# batches: take up the batches whose runs died with a worker (docs/decisions/0036).
app.conf.beat_schedule["batches-sweep"] = {
    "task": "batches.sweep",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}

# deployments: reconcile Ray Serve with the desired deployments (also triggered on every change).
app.conf.beat_schedule["deployments-reconcile"] = {
    "task": "deployments.reconcile",
    "schedule": float(os.environ.get("RAY_RECONCILE_INTERVAL_S") or 10.0),
    "kwargs": {"trigger": "beat"},
    # A tick that waited in the queue longer than the interval is superseded by the next one.
    "options": {"expires": float(os.environ.get("RAY_RECONCILE_INTERVAL_S") or 10.0)},
}

# events: deliver what the after-commit dispatch missed (a process died after its commit, a
# dispatcher was killed mid-batch) and retry failed reactions whose backoff ran out (ADR 0030).
app.conf.beat_schedule["events-sweep"] = {
    "task": "events.sweep",
    "schedule": float(os.environ.get("EVENTS_SWEEP_S") or 5.0),
    "options": {"expires": float(os.environ.get("EVENTS_SWEEP_S") or 5.0)},
}

# audit: seal events into the hash chain (each write also seals on commit; this catches the rest,
# e.g. raw writes the database trigger recorded).
app.conf.beat_schedule["audit-seal"] = {"task": "audit.seal", "schedule": 1.0, "options": {"expires": 1.0}}
# audit: walk the whole chain against the witness (the ``chain`` check, ADR 0018) and compare every
# governed row with its events (the ``drift`` check, ADR 0020); the Audit page's badge shows both.
app.conf.beat_schedule["audit-verify"] = {
    "task": "audit.verify",
    "schedule": 300.0,
    "options": {"expires": 300.0},
}
app.conf.beat_schedule["audit-checks"] = {
    "task": "audit.checks",
    "schedule": float(os.environ.get("AUDIT_CHECK_INTERVAL_S") or 300.0),
    "options": {"expires": float(os.environ.get("AUDIT_CHECK_INTERVAL_S") or 300.0)},
}

# deployments: republish the routes section of the gateway snapshot (changes also publish on commit).
app.conf.beat_schedule["deployments-routes-publish"] = {
    "task": "deployments.routes_publish",
    "schedule": 15.0,
    "options": {"expires": 15.0},
}

# deployments: the rollout controller (steps, analysis windows, aborts). Steps also run on commit.
app.conf.beat_schedule["deployments-rollouts-tick"] = {
    "task": "deployments.rollouts_tick",
    "schedule": float(os.environ.get("ROLLOUT_TICK_S") or 2.0),
    "options": {"expires": float(os.environ.get("ROLLOUT_TICK_S") or 2.0)},
}

# billing: republish the tenancy section of the gateway snapshot and record budget alerts.
app.conf.beat_schedule["billing-gateway-snapshot"] = {
    "task": "billing.gateway_snapshot_publish",
    "schedule": 15.0,
    "options": {"expires": 15.0},
}
app.conf.beat_schedule["billing-budget-alerts"] = {
    "task": "billing.budget_alerts_record",
    "schedule": 60.0,
    "options": {"expires": 60.0},
}

# billing: roll usage events up into the hourly/daily aggregates the cost pages read.
app.conf.beat_schedule["billing-usage-rollup"] = {
    "task": "billing.usage_rollup",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}

# notify: retry webhook deliveries whose backoff has run out; escalate pages nobody acknowledged.
app.conf.beat_schedule["notify-deliveries-retry"] = {
    "task": "notify.deliveries_retry",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}
app.conf.beat_schedule["notify-pages-escalate"] = {
    "task": "notify.pages_escalate",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}

# operations: evaluate every active SLO's burn-rate windows (pages go through the event spine).
app.conf.beat_schedule["operations-slos-evaluate"] = {
    "task": "operations.slos_evaluate",
    "schedule": float(os.environ.get("OPERATIONS_SLO_EVAL_S") or 10.0),
    "options": {"expires": float(os.environ.get("OPERATIONS_SLO_EVAL_S") or 10.0)},
}

# operations: sample every SLO route's engines' /metrics for the route page and incident diagnosis.
app.conf.beat_schedule["operations-engines-scrape"] = {
    "task": "operations.engines_scrape",
    "schedule": float(os.environ.get("OPERATIONS_SLO_EVAL_S") or 10.0),
    "options": {"expires": float(os.environ.get("OPERATIONS_SLO_EVAL_S") or 10.0)},
}

# Fail the runs of every kind (benchmark, eval, gate, plan, rehearsal) whose worker died (their
# heartbeat stopped).
app.conf.beat_schedule["runs-reap-stale"] = {
    "task": "workers.runs_reap_stale",
    "schedule": 60.0,
    "options": {"expires": 60.0},
}
