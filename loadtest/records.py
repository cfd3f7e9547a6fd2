"""What one request of a load run produced, in a compact form that crosses process boundaries.

Times are seconds relative to the stage's shared start epoch (wall clock, so records from several
client processes on one host merge on one axis); chunk times are kept per request because ITL is
pooled over every gap of every request (docs/domain.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Error types, in the order the UI lists them. "ok" is not an error.
CONNECT_ERROR = "connect_error"  # refused, DNS, unreachable: the server never saw the request
TIMEOUT = "timeout"  # the per-request deadline passed (connect, first byte or whole stream)
HTTP_4XX = "http_4xx"  # the server rejected the request (bad model, bad params, rate limit)
HTTP_5XX = "http_5xx"  # the server failed before streaming
STREAM_CUT = "stream_cut"  # the stream ended without a finish_reason / [DONE]
INVALID_RESPONSE = "invalid_response"  # a chunk that is not JSON, or an error object mid-stream
EMPTY_RESPONSE = "empty_response"  # [DONE] without a single content chunk
CLIENT_ERROR = "client_error"  # anything else raised inside the client (a bug, reported as such)

ERROR_TYPES: tuple[str, ...] = (
    CONNECT_ERROR,
    TIMEOUT,
    HTTP_4XX,
    HTTP_5XX,
    STREAM_CUT,
    INVALID_RESPONSE,
    EMPTY_RESPONSE,
    CLIENT_ERROR,
)


@dataclass(slots=True)
class RequestRecord:
    """One request: when it was planned and sent, when each content chunk arrived, what it cost."""

    index: int
    planned_s: float  # when the schedule wanted it sent
    sent_s: float = 0.0  # when the client actually started it
    chunk_s: list[float] = field(default_factory=list)  # arrival of every chunk that carries a choice
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_missing: bool = False  # token counts estimated from chunks because the server sent no usage
    error: str = ""  # one of ERROR_TYPES, "" when the request succeeded
    detail: str = ""  # first 200 characters of the error, for the report
    # Which client process (or Ray actor) sent it, when a stage is spread over several
    # (``loadtest.distributed``); ``index`` is the request's place in the stage's one schedule, so
    # (worker, index) says who sent what and merging can prove nothing was lost or sent twice.
    worker: int = -1

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def schedule_delay_s(self) -> float:
        return self.sent_s - self.planned_s

    @property
    def ttft_s(self) -> float | None:
        """First chunk carrying a choice minus the send time."""
        return (self.chunk_s[0] - self.sent_s) if self.chunk_s else None

    @property
    def e2e_s(self) -> float | None:
        """Last content chunk minus the send time."""
        return (self.chunk_s[-1] - self.sent_s) if self.chunk_s else None

    @property
    def tpot_s(self) -> float | None:
        """``(e2e - ttft) / (output_tokens - 1)``, only when more than one token came back."""
        if not self.chunk_s or self.output_tokens <= 1:
            return None
        return (self.chunk_s[-1] - self.chunk_s[0]) / (self.output_tokens - 1)

    def itl_s(self) -> list[float]:
        """Gaps between consecutive content chunks."""
        c = self.chunk_s
        return [c[i] - c[i - 1] for i in range(1, len(c))]

    def to_row(self) -> list:
        """Compact JSON form (a list, not a dict: 20,000 records cross a pipe per stage)."""
        return [
            self.index,
            round(self.planned_s, 6),
            round(self.sent_s, 6),
            [round(t, 6) for t in self.chunk_s],
            self.prompt_tokens,
            self.output_tokens,
            self.usage_missing,
            self.error,
            self.detail,
            self.worker,
        ]

    @classmethod
    def from_row(cls, row: list) -> RequestRecord:
        return cls(
            index=row[0],
            planned_s=row[1],
            sent_s=row[2],
            chunk_s=list(row[3]),
            prompt_tokens=row[4],
            output_tokens=row[5],
            usage_missing=bool(row[6]),
            error=row[7],
            detail=row[8],
            worker=row[9] if len(row) > 9 else -1,
        )
