"""Django settings, read from the environment through ``envconf``'s typed helpers.

Outside DEBUG, ``SECRET_KEY``, ``DATABASE_URL`` and ``REDIS_URL`` are required. In DEBUG, values
missing from the environment are taken from ``var/governor.env``, which the launcher
(``python -m governor run`` / ``test``) writes after starting the embedded PostgreSQL and Redis.
"""

from __future__ import annotations

import time
from pathlib import Path

from csp.constants import NONE, SELF

from envconf import (
    ConfigError,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    load_env_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("GOVERNOR_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
if DEBUG:
    load_env_file(VAR_DIR / "governor.env")

SECRET_KEY = env_str("SECRET_KEY", "governor-insecure-local-dev-key" if DEBUG else None, required=not DEBUG)
_database_url = env_str("DATABASE_URL", required=True)
REDIS_URL = env_str("REDIS_URL", required=True)
if len(SECRET_KEY or "") < 16:
    raise ConfigError("SECRET_KEY must be at least 16 characters")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "django_htmx",
    "pgtrigger",
    "governor",
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

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "core.middleware.RejectNulBytesMiddleware",
    "core.middleware.NeutraliseBidiControlsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "audit.context.AuditContextMiddleware",
]

ROOT_URLCONF = "governor.urls"
WSGI_APPLICATION = "governor.wsgi.application"
ASGI_APPLICATION = "governor.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.context_processors.roles",
            ],
        },
    }
]

DATABASES = {"default": database_from_url(_database_url)}
# The role that owns the schema and runs ``migrate`` (docs/decisions/0020); DATABASE_URL's role then
# owns nothing. Only its user and password are used: host, port and database are DATABASE_URL's.
_migrate_database_url = env_str("MIGRATE_DATABASE_URL", "")
MIGRATE_DATABASE = database_from_url(_migrate_database_url) if _migrate_database_url else None
if MIGRATE_DATABASE is not None and any(
    MIGRATE_DATABASE[key] != DATABASES["default"][key] for key in ("HOST", "PORT", "NAME")
):
    raise ConfigError("MIGRATE_DATABASE_URL must name the same host, port and database as DATABASE_URL")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Basic first: DRF takes the first class's WWW-Authenticate challenge, so an anonymous
        # call gets 401 + `WWW-Authenticate: Basic realm="api"` instead of a bare 403.
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.access.IsPlatformUser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Governor API",
    "DESCRIPTION": "Catalog, tenants, deployments, benchmarks and billing of a Governor installation.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["core.access.IsPlatformUser"],
    # The docs pages load Swagger UI and Redoc from this installation's static files, never a CDN,
    # so they work offline and under the CSP below.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several apps have a "status" or "kind" field with different choices; name each enum apart.
    "ENUM_NAME_OVERRIDES": {
        "DeploymentStatusEnum": "deployments.constants.Status",
        "DeploymentEventKindEnum": "deployments.constants.EventKind",
        "BenchmarkRunStatusEnum": "core.runs.RunStatus",
        "BenchmarkRunKindEnum": "evaluations.constants.RunKind",
        "UsageEventStatusEnum": "billing.models.UsageEvent.Status",
    },
}

# Audit: tables whose writes outside the services are caught by a database trigger (audit.raw_capture;
# refreshed after every migrate), and who may read the trail (a dotted path to ``f(user) -> bool``).
AUDIT_GOVERNED_TABLES = env_list(
    "AUDIT_GOVERNED_TABLES",
    [
        "catalog_gputype",
        "catalog_model",
        "catalog_modelversion",
        "deployments_deployment",
        "deployments_modelroute",
        "deployments_routetarget",
        "billing_tenant",
        "billing_membership",
        "billing_apikey",
        "billing_tenantlimits",
        "billing_price",
        "billing_budget",
        "evaluations_benchmarkrun",
    ],
)
# Columns that workers keep up to date as they observe or run things (Ray's status of a deployment,
# a benchmark's progress): an update that changes only these is operational state, not a governed
# change, and the raw-write trigger leaves it out of the trail. Creating, deleting or changing any
# other column of these rows is still recorded.
AUDIT_OPERATIONAL_COLUMNS = {
    "deployments_deployment": [
        "status", "status_message", "status_changed_at", "last_error", "last_error_at", "observed_at",
        "running_replicas", "ray_app_status", "ray_deployments", "updated_at",
    ],
    "evaluations_benchmarkrun": [
        "status", "progress", "progress_message", "error", "results", "series", "capacity_rps",
        "token_goodput", "attainment", "usd_per_mtok", "client_bound", "started_at", "heartbeat_at",
        "finished_at", "task_id",
    ],
}  # fmt: skip
AUDIT_READER_CHECK = "core.access.reads_everything"
# A periodic check (drift, chain) whose latest result is older than this shows as stale, not green.
AUDIT_CHECK_STALE_S = env_float("AUDIT_CHECK_STALE_S", 3600.0)
# An unchanged passing result (the seal's, after every batch) is rewritten at most this often.
AUDIT_CHECK_REFRESH_S = env_float("AUDIT_CHECK_REFRESH_S", 60.0)
# Which public model names exist (the routes), for billing's price forms: billing sits below
# deployments, so the project names the selector here (docs/decisions/0017).
BILLING_PUBLIC_MODEL_NAMES = "deployments.selectors.route_public_names"
# Redis key of the published chain head; empty = one key per database name (tests get their own).
AUDIT_HEAD_KEY = env_str("AUDIT_HEAD_KEY", "")
# Format 2 (ADR 0018): the Ed25519 signing key (a file, generated on first use with mode 0600, unless
# GOVERNOR_AUDIT_SIGNING_KEY holds the seed) and the witness of signed checkpoints (by default an
# append-only file per database under var/audit/; AUDIT_WITNESS_CLASS names another audit.witness.Witness).
AUDIT_SIGNING_KEY_FILE = env_str("AUDIT_SIGNING_KEY_FILE", "")
AUDIT_WITNESS_PATH = env_str("AUDIT_WITNESS_PATH", "")
AUDIT_WITNESS_CLASS = env_str("AUDIT_WITNESS_CLASS", "")
# Seal right after each commit on a background thread of the process (the request does not wait for
# the seal's transaction); off, the committing thread seals (tests use that: deterministic).
AUDIT_SEAL_IN_BACKGROUND = env_bool("AUDIT_SEAL_IN_BACKGROUND", True)
# How long that thread gathers commits before sealing them together (seconds).
AUDIT_SEAL_BATCH_DELAY_S = env_float("AUDIT_SEAL_BATCH_DELAY_S", 0.05)

# Content-Security-Policy: no inline script anywhere (docs/decisions/0011). Behaviour lives in
# static files; data for scripts travels in <script type="application/json"> blocks, which are
# not executed. Styles come from static files too (templates use classes, not style="").
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Celery: broker and result backend are both Redis.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3300)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Tests give each run its own queue so a running platform's worker never takes their tasks.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")

# Ray: where the reconciler finds the cluster, and where Serve's HTTP proxy answers.
RAY_ADDRESS = env_str("RAY_ADDRESS", "127.0.0.1:6390")
RAY_DASHBOARD_URL = env_str("RAY_DASHBOARD_URL", "http://127.0.0.1:8265")
RAY_SERVE_URL = env_str("RAY_SERVE_URL", "http://127.0.0.1:8100")
RAY_AUTH_TOKEN = env_str("RAY_AUTH_TOKEN", "")
RAY_RECONCILE_INTERVAL_S = env_float("RAY_RECONCILE_INTERVAL_S", 10.0)
# When this platform started (Unix time): the launcher passes one value to every process it starts;
# a process started on its own uses its own start. Deployment statuses Ray reported before this are
# shown as "unknown" until the reconciler hears from Ray again (Deployment.display_status).
PLATFORM_STARTED_AT = env_float("GOVERNOR_STARTED_AT", time.time())

# Gateway (data plane): the console links to it and shows tenants their base URL.
GATEWAY_PUBLIC_URL = env_str("GATEWAY_PUBLIC_URL", "http://127.0.0.1:8080")
# Redis key prefix of the gateway's snapshot and counters: the same variable the gateway reads, so
# workers that publish (rollout steps, price changes) reach the gateways of this installation.
GATEWAY_KEY_PREFIX = env_str("GATEWAY_KEY_PREFIX", "gw:")
# API key the benchmark harness presents when its target is the gateway.
BENCHMARK_API_KEY = env_str("BENCHMARK_API_KEY", "")

# The Batch API (batches; docs/decisions/0036). Runners send lines to this gateway (inside the
# installation; the public URL by default), signed with GOVERNOR_BATCH_SECRET (derived from
# SECRET_KEY when unset; the gateways derive the same). An input file may hold at most
# BATCH_FILE_MAX_BYTES and BATCH_MAX_LINES lines. BATCH_CONCURRENCY lines are in flight per runner at
# most (fewer while the gateway sheds them); a runner holds a line BATCH_LINE_LEASE_S seconds, renewed
# while it waits, so a line of a killed worker is taken up again after that long. Lines are sent only
# inside BATCH_OFF_PEAK_WINDOWS when set ("22:00-06:00,12:00-13:00", UTC); empty: at any hour.
GATEWAY_INTERNAL_URL = env_str("GATEWAY_INTERNAL_URL", GATEWAY_PUBLIC_URL)
GOVERNOR_BATCH_SECRET = env_str("GOVERNOR_BATCH_SECRET", "")
BATCH_FILE_MAX_BYTES = env_int("BATCH_FILE_MAX_BYTES", 200 * 1024 * 1024)
BATCH_MAX_LINES = env_int("BATCH_MAX_LINES", 50_000)
BATCH_CONCURRENCY = env_int("BATCH_CONCURRENCY", 16)
BATCH_LINE_LEASE_S = env_float("BATCH_LINE_LEASE_S", 30.0)
BATCH_RUN_SLICE_S = env_float("BATCH_RUN_SLICE_S", 60.0)
BATCH_OFF_PEAK_WINDOWS = env_str("BATCH_OFF_PEAK_WINDOWS", "")

# The promotion rule: may a version be approved, may it take production traffic? It lives with the
# eval gates; the catalog's lifecycle and the rollouts, a layer below, ask it through
# ``catalog.promotion``, which calls the function named here (ADR 0027).
GOVERNOR_PROMOTION_RULE = "evaluations.selectors.gates.version_promotion"

# The event spine (ADR 0030): which reactions follow which events. A key is an event kind (a
# governed change's audit action, or an operational signal named '<app>.<what happened>'), a
# 'prefix.*' or '*'; a value lists dotted paths, each living in the app that owns the action and
# imported at dispatch time (a system check refuses one that does not import). Delivery is at least
# once: every reaction is idempotent.
GOVERNOR_REACTIONS = {
    # billing: the gateway's tenancy section follows keys, tenants, limits, budgets and prices.
    "tenant.*": ["billing.reactions.tenancy_publish"],
    "apikey.*": ["billing.reactions.tenancy_publish"],
    "tenantlimits.*": ["billing.reactions.tenancy_publish"],
    "price.*": ["billing.reactions.tenancy_publish"],
    "budget.create": ["billing.reactions.tenancy_publish", "billing.reactions.refusal_mark_clear"],
    "budget.update": ["billing.reactions.tenancy_publish", "billing.reactions.refusal_mark_clear"],
    "budget.delete": ["billing.reactions.tenancy_publish"],
    # notify: a queued webhook delivery gets its first attempt now; signals that need a person page
    # the platform's on-call.
    "notify.delivery_queued": ["notify.reactions.delivery_enqueue"],
    "deployments.analysis_failed": ["notify.reactions.page_oncall"],
    "evaluations.gate_failed": ["notify.reactions.page_oncall"],
    # operations: an SLO's burn-rate alert pages the on-call; its recovery resolves the page.
    # A breach also opens (or joins) the route's incident and diagnoses it; recovery resolves it.
    "operations.slo_breached": ["operations.reactions.breach_page", "operations.reactions.incident_open"],
    # operations: a console rehearsal was queued; a worker runs it.
    "operations.rehearsal_queued": ["operations.reactions.rehearsal_enqueue"],
    "operations.slo_recovered": [
        "operations.reactions.recovery_resolve",
        "operations.reactions.incident_recover",
    ],
    # deployments: Ray follows desired state; the gateway's routes section follows what it may route to.
    "deployment.*": ["deployments.reactions.reconcile", "deployments.reactions.routes_publish"],
    "modelroute.*": ["deployments.reactions.routes_publish"],
    "model_route.*": ["deployments.reactions.routes_publish"],
    "routetarget.*": ["deployments.reactions.routes_publish"],
    "route.*": ["deployments.reactions.routes_publish"],
    "deployments.status_changed": [
        "deployments.reactions.routes_publish",
        "notify.reactions.unreachable_resolve",
    ],
    "deployments.cluster_unreachable": [
        "deployments.reactions.routes_publish",
        "notify.reactions.page_oncall",
    ],
    "rollout.start": ["deployments.reactions.rollout_kick"],
    "rollout.resume": ["deployments.reactions.rollout_kick"],
    "deployments.analysis_due": ["deployments.reactions.analysis_enqueue"],
    # evaluations: a queued run's task is enqueued (its lifecycle claims it once).
    "evaluations.benchmark_run_queued": ["evaluations.reactions.benchmark_run_enqueue"],
    "evaluations.cross_check_queued": ["evaluations.reactions.cross_check_enqueue"],
    "evaluations.eval_run_queued": ["evaluations.reactions.eval_run_enqueue"],
    "evaluations.gate_run_queued": ["evaluations.reactions.gate_run_enqueue"],
    "evaluations.capacity_plan_queued": ["evaluations.reactions.capacity_plan_enqueue"],
    # evaluations: the gateway's routers section follows which router policy each route serves.
    "router_policy.activate": ["evaluations.reactions.routers_publish"],
    "router_policy.retire": ["evaluations.reactions.routers_publish"],
}
# A failed reaction is retried after 2 s, 4 s, 8 s … up to this cap, and given up (shown as failed
# in the admin and by ``manage.py events``) after this many attempts.
EVENTS_RETRY_BASE_S = env_float("EVENTS_RETRY_BASE_S", 2.0)
EVENTS_RETRY_MAX_S = env_float("EVENTS_RETRY_MAX_S", 300.0)
EVENTS_MAX_ATTEMPTS = env_int("EVENTS_MAX_ATTEMPTS", 12)
# Beat period of ``events.sweep`` (what the after-commit dispatch missed, and retries), and how long
# settled events stay in the outbox.
EVENTS_SWEEP_S = env_float("EVENTS_SWEEP_S", 5.0)
EVENTS_KEEP_DAYS = env_float("EVENTS_KEEP_DAYS", 7.0)

# Outbound calls to URLs users set (tenant webhooks) never reach loopback, private, link-local or
# metadata addresses (core.outbound, ADR 0016), except the destinations listed here by the
# platform admin: host names, host:port, addresses or CIDR networks, comma-separated.
OUTBOUND_ALLOWED_DESTINATIONS = env_list("OUTBOUND_ALLOWED_DESTINATIONS", [])

# How often every active SLO's burn-rate windows are evaluated (operations.slos_evaluate, ADR 0032).
OPERATIONS_SLO_EVAL_S = env_float("OPERATIONS_SLO_EVAL_S", 10.0)

# Where people reach the console: links in notifications and webhook payloads point here.
CONSOLE_PUBLIC_URL = env_str("CONSOLE_PUBLIC_URL", "http://127.0.0.1:8000")

# Notifications email tenant admins and the on-call; the console backend (stdout) unless a real one is set.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "governor@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = False
    SECURE_CONTENT_TYPE_NOSNIFF = True
