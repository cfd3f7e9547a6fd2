"""One real vLLM (CPU) server of the trained tiny model, shared by the test files that only talk to it.

Starting vLLM is the slow part of every test that uses it (about 45 s alone, minutes on a busy
2-core host), and four files need nothing but a running server of the tiny model: the engine's
OpenAI surface and metrics, the harness against vLLM, the evaluation report, and the quality gate's
serving baseline. Those files name the xdist group in their module-level ``pytestmark``
(``pytest.mark.xdist_group("tiny-vllm")``, a literal: the scheduler reads it from the source); the scheduler in ``tests/conftest.py`` hands a group to one worker as one unit, so
the ``tiny_vllm`` fixture below starts once per run instead of once per file (ADR 0023).

The files use it one after another on that worker, never at once, so a test that reads a counter
before and after its own requests still sees only its own work.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from procs import ROOT
from tests.support.ci import skip_unless_ci

# The served name, the context and the batch every file of the group assumes.
MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 16


def require_vllm() -> None:
    """Skip when vLLM is not installed; fail loudly when it is installed but cannot import."""
    from engines.vllm_cpu import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason is None:
        return
    if "not installed" in reason:
        skip_unless_ci(reason)
    pytest.fail(reason)


def process_group(pgid: int) -> list[int]:
    """Live processes of one process group."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="session")
def tiny_vllm_model() -> Path:
    """The trained tiny checkpoint (cached under var/models; a fresh clone trains it once, a few
    CPU minutes). It answers the quality gate's arithmetic and serves every other file's
    fixed-length requests just as a random one would; its directory is also its tokenizer."""
    require_vllm()
    from engines.tiny_train import Recipe, ensure_trained_model

    return ensure_trained_model(Recipe(), root=ROOT / "var/models")


@pytest.fixture(scope="session")
def tiny_vllm(tiny_vllm_model, tmp_path_factory) -> Iterator:
    """The running server (``engines.vllm_cpu.VllmCpuServer``) of ``tiny_vllm_model``."""
    from engines.vllm_cpu import vllm_cpu_server

    model = tiny_vllm_model
    log = tmp_path_factory.mktemp("tiny-vllm") / "server.log"
    with vllm_cpu_server(
        model_path=model,
        served_model_name=MODEL_NAME,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=MAX_NUM_SEQS,
        log_path=log,
        timeout_s=900,
    ) as server:
        print(f"shared vLLM healthy after {server.startup_s:.1f} s")
        pgid = server.process.pid
        # API server + EngineCore (+ worker), in the server's own process group.
        assert len(process_group(pgid)) >= 2
        yield server
    # stop() took the engine processes along: nothing of this server's process group is left.
    assert process_group(pgid) == []
