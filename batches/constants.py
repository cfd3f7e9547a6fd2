"""The Batch API's vocabulary in one place: OpenAI's statuses and endpoints, and the lines' states."""

from __future__ import annotations

# OpenAI's batch statuses (https://platform.openai.com/docs/api-reference/batch/object).
VALIDATING = "validating"
FAILED = "failed"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
EXPIRED = "expired"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
STATUSES = (VALIDATING, FAILED, IN_PROGRESS, FINALIZING, COMPLETED, EXPIRED, CANCELLING, CANCELLED)
# Still to finish: a runner works on these (``batches.services.runner``).
ACTIVE = (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING)
ENDED = (FAILED, COMPLETED, EXPIRED, CANCELLED)

# What a batch may call, the openai client's ``endpoint`` values.
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
COMPLETION_WINDOWS = ("24h",)

# A line's own states. ``running``: a runner holds it until ``lease_until``.
LINE_PENDING = "pending"
LINE_RUNNING = "running"
LINE_SUCCEEDED = "succeeded"
LINE_FAILED = "failed"
LINE_CANCELLED = "cancelled"
LINE_EXPIRED = "expired"
LINE_STATUSES = (LINE_PENDING, LINE_RUNNING, LINE_SUCCEEDED, LINE_FAILED, LINE_CANCELLED, LINE_EXPIRED)
LINE_OPEN = (LINE_PENDING, LINE_RUNNING)

PURPOSE_BATCH = "batch"
PURPOSE_OUTPUT = "batch_output"
PURPOSES = (PURPOSE_BATCH, PURPOSE_OUTPUT)
