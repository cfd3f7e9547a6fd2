"""``python -m benchmarks.audit_chain --smoke`` runs end to end and reports every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process


@pytest.mark.django_db(transaction=True)
def test_audit_chain_benchmark_smoke(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.audit_chain", "--json", str(out), "--smoke"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    data = json.loads(out.read_text())
    assert data["verify"]["events"] > 300 and data["verify_events_per_s"] > 0
    assert data["offline_verify_events_per_s"] > 0
    assert isinstance(data["write_overhead_ms_p50"], float)
    assert "drift_check_s" in data and data["conditions"]["load_avg_1m_start"] >= 0
