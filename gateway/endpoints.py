"""Which OpenAI endpoint a request is for, and which targets serve it.

A deployment runs one task (``deployments.constants.Task``): "generate" serves chat, completions and
responses; "embed" (vLLM's pooling runner) serves embeddings. The gateway sends a request only to
targets whose task serves its endpoint, and answers a clear 404 when none of the route's does.
"""

from __future__ import annotations

from snapshot.contract import Target

PATHS = {
    "chat": "/v1/chat/completions",
    "text": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
}
TASK_KINDS = {"generate": ("chat", "text", "responses"), "embed": ("embeddings",)}
# The field that bounds the output, per endpoint (embeddings produce none).
MAX_TOKENS_FIELD = {"chat": "max_tokens", "text": "max_tokens", "responses": "max_output_tokens"}


def serves(target: Target, kind: str) -> bool:
    return kind in TASK_KINDS.get(target.task, ())


def upstream_url(target: Target, kind: str) -> str:
    if kind == "chat":
        return target.chat_url
    if kind == "text":
        return target.completions_url
    return target.base_url + PATHS[kind][3:]  # base_url ends in /v1
