"""Under CI=true a missing optional piece fails instead of skipping."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.support.ci import skip_unless_ci


def test_missing_piece_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(Skipped):
        skip_unless_ci("vllm is not installed")


def test_missing_piece_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Failed, match="CI must provide it"):
        skip_unless_ci("vllm is not installed")
