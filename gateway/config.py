"""Gateway settings, read once at start from the environment.

The gateway never imports Django (it must start fast and stay lean per request), so it reads the
same variables the console does through ``envconf``'s stdlib-only helpers, and falls back to
the launcher's ``var/governor.env`` for the local embedded Redis/Postgres, as the console does in DEBUG.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envconf import env_bool, env_float, env_int, env_str, load_env_file
from snapshot.batchline import line_secret

BASE_DIR = Path(__file__).resolve().parent.parent
# The hooks a gateway runs unless GATEWAY_HOOKS says otherwise ("none": none): the semantic cache,
# which does nothing on a route until an admin turns it on there (docs/semantic-cache.md).
DEFAULT_HOOKS = "gateway.semcache.hook:SemanticCache"


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the gateway process needs to know that is not in the published snapshot."""

    redis_url: str
    database_url: str | None
    key_prefix: str
    spool_dir: Path
    max_body_bytes: int
    default_max_tokens: int
    absurd_max_tokens: int
    upstream_connect_timeout_s: float
    upstream_idle_timeout_s: float
    eject_s: float
    snapshot_poll_s: float
    spool_commit_interval_s: float
    ship_interval_s: float
    ship_batch: int
    session_header: str
    max_header_bytes: int
    lease_s: float
    journal_s: float
    # Dotted paths of the request path's hooks, in order (gateway/hooks.py; docs/decisions/0025).
    hooks: tuple[str, ...] = ()
    # The hand-tuned pieces, or the libraries they replaced (docs/decisions/0029): the client of the
    # two Redis scripts, the client to the deployments, and what writes a stream's chunks.
    redis_client: str = "fastredis"
    upstream_client: str = "http1"
    stream_pusher: str = "bodypusher"
    # Admission control (gateway.admission; docs/decisions/0035): on for deployments with a limit.
    admission: bool = True
    workers: int = 1
    admission_shares: str = ""
    admission_wait_s: str = ""
    # The Batch API (gateway.batchapi, gateway.batchlines; docs/decisions/0036): the console that
    # keeps batches, the largest upload passed on to it, and the key batch lines are signed with.
    console_url: str = "http://127.0.0.1:8000"
    max_upload_bytes: int = 512 * 1024 * 1024
    batch_secret: bytes | None = None
    # What the engines report (gateway.engine_signals): scraped every engine_scrape_s; a deployment
    # whose engine queues more than saturation_queue requests or uses more than saturation_kv of its
    # KV cache takes no sheddable traffic.
    engine_signals: bool = True
    engine_scrape_s: float = 0.5
    saturation_queue: float = 5
    saturation_kv: float = 0.8


# Each setting's choices: the hand-tuned piece first (the default), then the library it replaced.
CHOICES = {
    "GATEWAY_REDIS_CLIENT": ("fastredis", "redis-py"),
    "GATEWAY_UPSTREAM_CLIENT": ("http1", "aiohttp"),
    "GATEWAY_STREAM_PUSHER": ("bodypusher", "task"),
}


def env_choice(name: str) -> str:
    """``name``'s value, one of ``CHOICES[name]`` (the first when unset); anything else fails loudly."""
    choices = CHOICES[name]
    value = (env_str(name) or choices[0]).strip().lower()
    if value not in choices:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return value


def _hooks(raw: str) -> tuple[str, ...]:
    """GATEWAY_HOOKS as dotted paths; "none": no hook at all (the cache's included)."""
    if raw.strip().lower() == "none":
        return ()
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def load_config() -> GatewayConfig:
    """Read the gateway's settings; missing Redis is fatal, missing Postgres only stops shipping."""
    var_dir = Path(env_str("GOVERNOR_VAR_DIR", str(BASE_DIR / "var")))
    load_env_file(var_dir / "governor.env")  # written by the launcher, as for the console
    redis_url = env_str("GATEWAY_REDIS_URL") or env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
    return GatewayConfig(
        redis_url=redis_url,
        database_url=env_str("GATEWAY_DATABASE_URL") or env_str("DATABASE_URL"),
        key_prefix=env_str("GATEWAY_KEY_PREFIX", "gw:"),
        spool_dir=Path(env_str("GATEWAY_SPOOL_DIR", str(var_dir / "gateway-spool"))),
        max_body_bytes=env_int("GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024),
        default_max_tokens=env_int("GATEWAY_DEFAULT_MAX_TOKENS", 4096),
        # Above this no model we serve can answer; rejecting early keeps holds meaningful.
        absurd_max_tokens=env_int("GATEWAY_ABSURD_MAX_TOKENS", 1_000_000),
        upstream_connect_timeout_s=env_float("GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S", 5.0),
        upstream_idle_timeout_s=env_float("GATEWAY_UPSTREAM_IDLE_TIMEOUT_S", 120.0),
        eject_s=env_float("GATEWAY_EJECT_S", 10.0),
        snapshot_poll_s=env_float("GATEWAY_SNAPSHOT_POLL_S", 1.0),
        spool_commit_interval_s=env_float("GATEWAY_SPOOL_COMMIT_INTERVAL_S", 0.002),
        ship_interval_s=env_float("GATEWAY_SHIP_INTERVAL_S", 0.5),
        ship_batch=env_int("GATEWAY_SHIP_BATCH", 2000),
        session_header=env_str("GATEWAY_SESSION_HEADER", "x-session-id"),
        # Request line + headers; the server protocol (gateway.protocol) enforces it while reading.
        max_header_bytes=env_int("GATEWAY_MAX_HEADER_BYTES", 32 * 1024),
        # A worker whose lease is not renewed for this long is taken for dead and its in-flight
        # requests are settled by the others (gateway.ledger).
        lease_s=env_float("GATEWAY_LEASE_S", 15.0),
        # How often each stream's delivered-token count is journalled for the reaper (what a kill
        # can leave unbilled is at most this much output).
        journal_s=env_float("GATEWAY_JOURNAL_S", 0.5),
        hooks=_hooks(env_str("GATEWAY_HOOKS", DEFAULT_HOOKS)),
        redis_client=env_choice("GATEWAY_REDIS_CLIENT"),
        upstream_client=env_choice("GATEWAY_UPSTREAM_CLIENT"),
        stream_pusher=env_choice("GATEWAY_STREAM_PUSHER"),
        admission=env_bool("GATEWAY_ADMISSION", True),
        # How many processes share the port (``python -m gateway --workers N`` sets it): each takes
        # its share of a deployment's in-flight limit.
        workers=max(1, env_int("GATEWAY_WORKERS", 1)),
        # Per class, "interactive,standard,sheddable": the share of a limit each may fill, and the
        # seconds each may wait for room before it is shed. Empty: the defaults in gateway.admission.
        admission_shares=env_str("GATEWAY_ADMISSION_SHARES", ""),
        admission_wait_s=env_str("GATEWAY_ADMISSION_WAIT_S", ""),
        engine_signals=env_bool("GATEWAY_ENGINE_SIGNALS", True),
        engine_scrape_s=env_float("GATEWAY_ENGINE_SCRAPE_S", 0.5),
        saturation_queue=env_float("GATEWAY_SATURATION_QUEUE", 5.0),
        saturation_kv=env_float("GATEWAY_SATURATION_KV", 0.8),
        console_url=env_str("GATEWAY_CONSOLE_URL") or env_str("CONSOLE_PUBLIC_URL", "http://127.0.0.1:8000"),
        max_upload_bytes=env_int("GATEWAY_MAX_UPLOAD_BYTES", 512 * 1024 * 1024),
        batch_secret=line_secret(env_str("GOVERNOR_BATCH_SECRET"), env_str("SECRET_KEY")),
    )
