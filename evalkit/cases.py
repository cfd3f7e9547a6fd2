"""The unit of an evaluation: one prompt, its expected answer and how to score the output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Case:
    """One evaluation case.

    Exactly one of ``messages`` (chat: a list of ``{"role", "content"}``) or ``prompt`` (plain
    completion) is set. ``expected`` is what the scorer compares against (its meaning depends on
    the scorer: a string, a dict of JSON fields, a number, a boolean for refusals). ``weight``
    scales the case in weighted category means. ``context_len`` is the approximate prompt length
    in tokens for long-context cases (``None`` for ordinary ones).
    """

    id: str
    category: str
    scorer: str
    expected: Any = None
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    scorer_args: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    context_len: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    def chat_messages(self) -> list[dict[str, str]]:
        """The case as chat messages (a plain prompt becomes one user message)."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def prompt_text(self) -> str:
        """All the prompt's text, for hashing and length estimates."""
        if self.messages is not None:
            return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages)
        return self.prompt or ""

    def to_dict(self) -> dict[str, Any]:
        """The JSONL form (optional fields left out when they hold their defaults)."""
        out: dict[str, Any] = {"id": self.id, "category": self.category}
        if self.messages is not None:
            out["messages"] = [dict(m) for m in self.messages]
        else:
            out["prompt"] = self.prompt
        out["expected"] = self.expected
        out["scorer"] = self.scorer
        if self.scorer_args:
            out["scorer_args"] = self.scorer_args
        if self.weight != 1.0:
            out["weight"] = self.weight
        if self.context_len is not None:
            out["context_len"] = self.context_len
        if self.max_tokens != DEFAULT_MAX_TOKENS:
            out["max_tokens"] = self.max_tokens
        return out
