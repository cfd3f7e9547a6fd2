"""Skips that must not hide a broken CI: outside CI a missing optional piece skips with its reason;
under ``CI=true`` the same absence fails, because CI is meant to have it."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_unless_ci(reason: str) -> None:
    if in_ci():
        pytest.fail(f"{reason} (CI=true: CI must provide it, so this is a failure, not a skip)")
    pytest.skip(reason)
