"""Fault injection for the simulated engine: slower first tokens, slower decoding, errors.

An admin applies faults to a simulated deployment to rehearse a bad canary (the rollout analysis
must catch it and abort). They wrap the engine's ASGI app from the outside, at request start, so
the engine's streaming internals stay untouched (``engine_args`` adjusts the build arguments,
``wrap`` wraps the built app):

- ``ttft_extra_ms``: the request waits this long before the engine sees it (adds to TTFT and E2E);
- ``decode_slowdown``: decoding runs ``factor`` times slower. In fixed-timing mode the TPOT is
  multiplied; in model mode the engine's clock runs ``factor`` times slower (prefill too), because
  slowing decode alone would reach into the scheduler;
- ``error_rate``: that fraction of completions answers 500 at once, in the OpenAI error shape.

Only ``/v1/completions`` and ``/v1/chat/completions`` are affected; health, models and metrics are not.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass

import orjson


class FaultError(ValueError):
    """Fault settings out of range."""


@dataclass(frozen=True)
class Faults:
    ttft_extra_ms: float = 0.0
    decode_slowdown: float = 1.0
    error_rate: float = 0.0

    @classmethod
    def from_dict(cls, data: dict | None) -> Faults:
        data = dict(data or {})
        unknown = set(data) - {"ttft_extra_ms", "decode_slowdown", "error_rate"}
        if unknown:
            raise FaultError(f"unknown fault settings: {', '.join(sorted(unknown))}")
        try:
            f = cls(**{k: float(v) for k, v in data.items() if v not in (None, "")})
        except (TypeError, ValueError):
            raise FaultError("fault settings are numbers") from None
        if not 0 <= f.ttft_extra_ms <= 600_000:
            raise FaultError("ttft_extra_ms must be between 0 and 600000")
        if not 1 <= f.decode_slowdown <= 100:
            raise FaultError("decode_slowdown must be between 1 and 100 (1 = normal speed)")
        if not 0 <= f.error_rate <= 1:
            raise FaultError("error_rate must be between 0 and 1")
        return f

    @property
    def active(self) -> bool:
        return self != Faults()

    def as_dict(self) -> dict:
        """Only the settings that differ from normal (``{}`` = no faults)."""
        normal = Faults()
        return {k: v for k, v in asdict(self).items() if v != getattr(normal, k)}


_ERROR_BODY = orjson.dumps(
    {"error": {"message": "injected fault", "type": "server_error", "param": None, "code": "injected_fault"}}
)


class FaultyApp:
    """ASGI wrapper applying ``Faults`` to completion requests of ``app``."""

    def __init__(self, app, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    def __getattr__(self, name):  # the engine's attributes (model_name, engine, metrics) stay reachable
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope["path"].rstrip("/").endswith("completions"):
            await self.app(scope, receive, send)
            return
        f = self.faults
        if f.error_rate and random.random() < f.error_rate:
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": _ERROR_BODY})
            return
        if f.ttft_extra_ms:
            await asyncio.sleep(f.ttft_extra_ms / 1000)
        await self.app(scope, receive, send)


def engine_args(args: dict) -> dict:
    """The engine's build arguments with ``decode_slowdown`` applied (a copy; ``args`` unchanged)."""
    f = Faults.from_dict(args.get("faults"))
    if f.decode_slowdown == 1:
        return args
    out = dict(args)
    if out.get("fixed_ttft_ms") is not None or out.get("fixed_tpot_ms") is not None:
        out["fixed_tpot_ms"] = float(out.get("fixed_tpot_ms") or 0) * f.decode_slowdown
    else:
        out["time_scale"] = float(out.get("time_scale", 1.0)) / f.decode_slowdown
    return out


def wrap(app, args: dict):
    """``app`` itself when ``args`` carry no TTFT or error faults, else wrapped in ``FaultyApp``."""
    f = Faults.from_dict(args.get("faults"))
    if f.ttft_extra_ms or f.error_rate:
        return FaultyApp(app, f)
    return app
