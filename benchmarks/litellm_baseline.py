"""The LiteLLM proxy as the gateway benchmark's baseline (``benchmarks.gateway --baseline litellm``).

LiteLLM is not a dependency of Governor: its proxy extra pins versions of FastAPI, pydantic, uvicorn,
cryptography and more that conflict with ours. It runs from a virtualenv of its own, as a child
process, and is reached only over HTTP. Which interpreter runs it:

1. ``--litellm-python PATH`` or ``GOVERNOR_LITELLM_PYTHON``: an interpreter where
   ``litellm[proxy]`` is installed. Used as it is; if it lacks LiteLLM the run stops.
2. Otherwise ``var/litellm-venv`` under ``GOVERNOR_VAR_DIR`` (default: the repository's ``var/``),
   created on first use with ``pip install`` of ``LITELLM_REQUIREMENT`` (the ``bench`` extra in
   ``pyproject.toml`` names the same pin; a test keeps the two equal). ``--no-litellm-install``
   refuses to create it.

When LiteLLM cannot be found or installed, ``LiteLLMUnavailable`` says why and the benchmark exits
non-zero: it never reports a baseline it did not measure.

What the proxy is configured to do per request (``proxy_config``): check the master key, route the
model to its one deployment (the same simulated engine the gateway forwards to), count the
deployment's requests and tokens per minute in Redis against rpm/tpm limits
(``usage-based-routing-v2``), stream the upstream's SSE back, and compute the response's cost from
per-token prices. It cannot hold a budget or keep spend without its PostgreSQL database (its own
start-up warning says a budget is then not enforced), so it does neither here; Governor's gateway
does both (budget hold and settle in Redis, a usage event fsynced to its spool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from procs import free_port, http_child

ROOT = Path(__file__).resolve().parent.parent
# The newest release whose proxy extra resolves from PyPI here (later ones pin litellm-proxy and
# .post releases of litellm-proxy-extras / litellm-enterprise that the index does not serve).
LITELLM_REQUIREMENT = "litellm[proxy]==1.106.12"
PYTHON_ENV = "GOVERNOR_LITELLM_PYTHON"
MASTER_KEY_PREFIX = "sk-bench-"  # LiteLLM requires master keys to start with "sk-"
# uvicorn's access log off, as the gateway runs (``python -m gateway`` without --access-log):
# neither side pays for a log line per request.
QUIET_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"default": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "WARNING"},
        "uvicorn.error": {"level": "WARNING"},
        "uvicorn.access": {"handlers": ["default"], "level": "WARNING", "propagate": False},
    },
}
WHAT_IT_DOES = (
    "LiteLLM proxy {version}, 1 worker (uvicorn, access log off), no database: master-key auth, "
    "routing to one deployment, rpm/tpm limits of that deployment counted in Redis "
    "(router usage-based-routing-v2), SSE passthrough, per-response cost from per-token prices; "
    "no budget and no spend log (both need LiteLLM's PostgreSQL database)"
)


class LiteLLMUnavailable(RuntimeError):
    """LiteLLM's proxy cannot be run here; the message says why and what to do."""


def default_venv() -> Path:
    var = Path(os.environ.get("GOVERNOR_VAR_DIR") or ROOT / "var")
    return var / "litellm-venv"


def installed_version(python: Path) -> str | None:
    """LiteLLM's version in ``python``'s environment if its proxy imports there, else None."""
    probe = "import importlib.metadata as m, litellm.proxy.proxy_cli, fastapi, uvicorn; print(m.version('litellm'))"
    try:
        done = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=300, env=_quiet_env()
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def resolve_python(explicit: str | None = None, *, install: bool = True, log=print) -> tuple[Path, str]:
    """The interpreter that runs LiteLLM's proxy and LiteLLM's version there (module docstring)."""
    chosen = explicit or os.environ.get(PYTHON_ENV)
    if chosen:
        python = Path(chosen)
        version = installed_version(python)
        if version is None:
            raise LiteLLMUnavailable(
                f"{python} (from {'--litellm-python' if explicit else PYTHON_ENV}) cannot import LiteLLM's "
                f"proxy: install it there with `{python} -m pip install '{LITELLM_REQUIREMENT}'`"
            )
        return python, version
    where = default_venv()
    python = where / "bin" / "python"
    if python.exists():
        version = installed_version(python)
        if version is not None:
            return python, version
    if not install:
        raise LiteLLMUnavailable(
            f"no LiteLLM proxy in {where} and --no-litellm-install given: create it with "
            f"`python -m venv {where} && {python} -m pip install '{LITELLM_REQUIREMENT}'`, "
            f"or point {PYTHON_ENV} at an interpreter that has it"
        )
    log(
        f"LiteLLM's proxy is not installed in {where}: creating that virtualenv and installing "
        f"{LITELLM_REQUIREMENT} (once; a few minutes). LiteLLM never goes into Governor's own environment."
    )
    try:
        if not python.exists():
            venv.EnvBuilder(with_pip=True, clear=where.exists()).create(where)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", LITELLM_REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise LiteLLMUnavailable(f"could not create {where}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise LiteLLMUnavailable(f"`pip install '{LITELLM_REQUIREMENT}'` into {where} failed:\n{tail}")
    version = installed_version(python)
    if version is None:
        raise LiteLLMUnavailable(
            f"{LITELLM_REQUIREMENT} installed into {where}, but its proxy does not import"
        )
    return python, version


def proxy_config(
    *, upstream_base_url: str, model: str, master_key: str, redis_url: str, prices: dict
) -> dict:
    """LiteLLM's config for the same job as the gateway's snapshot: one model, one upstream.

    ``prices`` are the gateway's nano-dollars per token (``input_nanos``, ``output_nanos``); the rpm/tpm
    limits are as high as the gateway's (never reached: both count, neither refuses)."""
    big = 1_000_000_000
    return {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": upstream_base_url,
                    "api_key": "none",
                    "rpm": big,
                    "tpm": big,
                },
                "model_info": {
                    "input_cost_per_token": prices["input_nanos"] / 1e9,
                    "output_cost_per_token": prices["output_nanos"] / 1e9,
                },
            }
        ],
        "router_settings": {"routing_strategy": "usage-based-routing-v2", "redis_url": redis_url},
        "general_settings": {"master_key": master_key},
    }


def _quiet_env() -> dict[str, str]:
    """The proxy's environment: no database (ours is not LiteLLM's), no network at start, no telemetry."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "REDIS_HOST", "PYTHONPATH") and not k.startswith("LITELLM_")
    }
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False", PYTHONUNBUFFERED="1")
    return env


@contextmanager
def litellm_proxy(
    python: Path, config: dict, work: Path, *, timeout_s: float = 180
) -> Iterator[tuple[int, int]]:
    """Run LiteLLM's proxy (one worker) on ``config``; yields ``(port, pid)`` and always stops it."""
    work.mkdir(parents=True, exist_ok=True)
    config_path = work / "litellm-config.json"  # YAML is a superset of JSON: LiteLLM reads it as is
    config_path.write_text(json.dumps(config, indent=2))
    log_config = work / "litellm-logging.json"
    log_config.write_text(json.dumps(QUIET_LOGGING))
    port = free_port()
    argv = [
        str(python), "-m", "litellm.proxy.proxy_cli", "--config", str(config_path), "--host", "127.0.0.1",
        "--port", str(port), "--num_workers", "1", "--log_config", str(log_config),
    ]  # fmt: skip
    stack = ExitStack()
    try:
        proc = stack.enter_context(
            http_child(
                argv,
                health_url=f"http://127.0.0.1:{port}/health/liveliness",
                timeout_s=timeout_s,
                env=_quiet_env(),
                cwd=work,
            )
        )
    except RuntimeError as exc:
        raise LiteLLMUnavailable(f"LiteLLM's proxy did not start: {exc}") from exc
    with stack:
        yield port, proc.pid


def main() -> int:
    """``python -m benchmarks.litellm_baseline``: find or install LiteLLM and say where it is."""
    try:
        python, version = resolve_python(log=lambda m: print(m, file=sys.stderr))
    except LiteLLMUnavailable as exc:
        print(f"LiteLLM unavailable: {exc}", file=sys.stderr)
        return 2
    print(f"LiteLLM {version} at {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
