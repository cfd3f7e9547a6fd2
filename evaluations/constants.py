"""Choices and defaults of the evaluations app, in one place."""

from django.db import models


class RunKind(models.TextChoices):
    MEASURED = "measured", "Measured"  # real requests against a live endpoint
    PREDICTED = "predicted", "Predicted"  # the virtual-time simulator, for any deployment spec


class RunMode(models.TextChoices):
    SINGLE = "single", "Single stage"
    LADDER = "ladder", "Ladder of rates / concurrencies"
    SWEEP = "sweep", "Sweep to capacity goodput"


class TargetKind(models.TextChoices):
    DEPLOYMENT = "deployment", "Deployment (through Ray Serve)"
    GATEWAY = "gateway", "Gateway"
    URL = "url", "OpenAI-compatible URL"


class Api(models.TextChoices):
    COMPLETIONS = "completions", "/v1/completions"
    CHAT = "chat", "/v1/chat/completions"


# Defaults of the start form and the API (docs/domain.md's example SLA, 90% attainment target).
DEFAULT_SLA = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "e2e_ms": None}
DEFAULT_WORKLOAD = {
    "arrival": {"kind": "poisson", "rate": 1.0},
    "input": {"kind": "fixed", "value": 512},
    "output": {"kind": "fixed", "value": 128},
}
DEFAULT_STAGE = {"duration_s": 30.0, "num_requests": None, "warmup_requests": 4, "processes": 0, "seed": 0}
DEFAULT_SAMPLING = {"temperature": 0.0, "ignore_eos": True}


# --- eval suites, eval runs and gates -------------------------------------------------------------


class EvidenceLabel(models.TextChoices):
    """Where a figure came from: real requests to a real engine, the simulated engine, or the simulator."""

    MEASURED = "measured", "Measured"
    SIMULATED = "simulated", "Simulated"
    PREDICTED = "predicted", "Predicted"


class GateKind(models.TextChoices):
    QUALITY = "quality", "Quality"
    PERFORMANCE = "performance", "Performance"
    STABILITY = "stability", "Stability"


GATE_KINDS = (GateKind.QUALITY, GateKind.PERFORMANCE, GateKind.STABILITY)


class Verdict(models.TextChoices):
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    ERROR = "error", "Error"


class RouterStatus(models.TextChoices):
    """A router policy's life: trained (draft), served by the gateway (active), replaced (retired)."""

    DRAFT = "draft", "Draft"
    ACTIVE = "active", "Active"
    RETIRED = "retired", "Retired"


class GateMode(models.TextChoices):
    """How a gate run gets its performance and stability figures."""

    PREDICTED = "predicted", "Predicted (simulator; quality on simulated/real engines)"
    MEASURED = "measured", "Measured (real load on the deployments)"


class GateRunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    ERROR = "error", "Error"


# Eval runs: temperature 0 and a fixed seed make a rerun send exactly the same requests.
EVAL_DEFAULT_SEED = 1234
EVAL_DEFAULT_CONCURRENCY = 8
EVAL_MAX_CONCURRENCY = 64
# A finished run on the same inputs younger than this is reused by a gate instead of rerun.
GATE_REUSE_HOURS = 24
MAX_SUITE_BYTES = 5 * 1024 * 1024
# Bounds of what a benchmark may ask for: generous for any real deployment, small enough that a
# run can be planned and held in memory by a worker. The service enforces them (forms and the API
# show its errors); the form fields repeat them as max_value so browsers refuse early.
MAX_TOKENS_PER_REQUEST = 1_048_576  # platform max: no served model has a longer context
MAX_RATE_RPS = 100_000.0  # offered requests per second (start, ladder levels, sweep max)
MAX_CONCURRENCY = 10_000  # closed-loop clients
MAX_REQUESTS_PER_STAGE = 1_000_000  # planned requests in one stage (count, or rate × duration)
MAX_STAGE_SECONDS = 3600
MAX_WARMUP_REQUESTS = 10_000
MAX_CLIENT_PROCESSES = 64
MAX_PREFIX_GROUPS = 100_000
MAX_EMPIRICAL_PAIRS = 100_000
MAX_LADDER_LEVELS = 20
MAX_SWEEP_STAGES = 50
MAX_SLA_MS = 3_600_000.0  # an hour per request is already no SLA
MAX_LOGNORMAL_SIGMA = 5.0
