"""``POST /v1/embeddings``: validation and the budget's worst case, before anything is forwarded.

Inputs are checked as OpenAI checks them (a non-empty string, a non-empty array of non-empty strings,
an array of token ids or an array of such arrays), so a malformed request is a 400 in OpenAI's shape
and never reaches an engine or a budget. An embedding generates nothing: the hold is the input's
worst case, priced at the input rate.
"""

from __future__ import annotations

from gateway.validation import BadRequest
from snapshot.contract import Target

# Per input, what a tokenizer may add around the text (BOS/EOS, a pooling model's instruction).
SPECIAL_TOKENS_PER_INPUT = 8


def _is_token_id(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _inputs(body: dict) -> list:
    inp = body.get("input")
    if isinstance(inp, str):
        return [inp]
    if isinstance(inp, list) and inp and all(_is_token_id(t) for t in inp):
        return [inp]
    if isinstance(inp, list):
        if not inp:
            raise BadRequest("'input' must not be an empty array", param="input", code="invalid_value")
        return inp
    raise BadRequest(
        "'input' must be a string, an array of strings, or an array of token ids",
        param="input",
        code="invalid_type",
    )


def validate_embeddings(body, *, max_inputs: int = 2048) -> tuple[str, int, int, int | None]:
    """Returns (model, typical prompt tokens, hard upper bound on prompt tokens, longest token-id input)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string", param="model")
    inputs = _inputs(body)
    if len(inputs) > max_inputs:
        raise BadRequest(f"'input' may hold at most {max_inputs} items", param="input", code="invalid_value")
    est = bound = 0
    longest_ids = None
    for i, item in enumerate(inputs):
        if isinstance(item, str) and item:
            size = len(item.encode())
            est += 1 + (size + 2) // 3  # as estimate_prompt_tokens: ~3 bytes a token, leaning high
            bound += size  # a byte-level BPE tokenizer emits at most one token per byte
        elif isinstance(item, list) and item and all(_is_token_id(t) for t in item):
            est += len(item)
            bound += len(item)
            longest_ids = max(longest_ids or 0, len(item))
        else:
            raise BadRequest(
                f"input[{i}] must be a non-empty string or a non-empty array of token ids",
                param="input",
                code="invalid_value",
            )
        bound += SPECIAL_TOKENS_PER_INPUT
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise BadRequest("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise BadRequest("'dimensions' must be a positive integer", param="dimensions")
    if body.get("stream"):
        raise BadRequest("embeddings do not stream", param="stream")
    return model, est, bound, longest_ids


def context_error(longest_ids: int | None, targets: list[Target]) -> str | None:
    """Token-id inputs are counted exactly: refuse one longer than every target's context here. Text
    is counted by the engine's tokenizer, which answers its own OpenAI-style 400 when it is too long."""
    if longest_ids is None:
        return None
    limits = [t.max_model_len for t in targets]
    if not limits or None in limits:
        return None
    limit = max(limits)
    if longest_ids <= limit:
        return None
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested {longest_ids} "
        "tokens in the input for embedding generation. Please reduce the length of the input."
    )
