"""The system check that refuses a reaction settings name but Python cannot call (ADR 0030)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string


def reactions_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Every pattern of ``GOVERNOR_REACTIONS`` is well formed and every path imports to a callable."""
    errors: list[checks.CheckMessage] = []
    registry = getattr(settings, "GOVERNOR_REACTIONS", {})
    if not isinstance(registry, dict):
        return [
            checks.Error(
                "GOVERNOR_REACTIONS must map event kinds to lists of dotted paths.", id="events.E001"
            )
        ]
    for pattern, paths in registry.items():
        if (
            not isinstance(pattern, str)
            or not pattern
            or ("*" in pattern and pattern != "*" and not pattern.endswith(".*"))
            or pattern.count("*") > 1
        ):
            errors.append(
                checks.Error(
                    f"GOVERNOR_REACTIONS pattern {pattern!r} is not a kind, 'prefix.*' or '*'.",
                    hint="Name a kind ('price.publish'), every kind under a prefix ('price.*'), or '*'.",
                    id="events.E002",
                )
            )
        if isinstance(paths, str) or not isinstance(paths, list | tuple):
            errors.append(
                checks.Error(
                    f"GOVERNOR_REACTIONS[{pattern!r}] must be a list of dotted paths.", id="events.E001"
                )
            )
            continue
        for path in paths:
            try:
                func = import_string(path)
            except ImportError as exc:
                errors.append(
                    checks.Error(
                        f"GOVERNOR_REACTIONS[{pattern!r}] names reaction {path!r}, which cannot be imported: {exc}",
                        hint="Fix the dotted path, or remove the reaction from GOVERNOR_REACTIONS.",
                        id="events.E003",
                    )
                )
                continue
            if not callable(func):
                errors.append(
                    checks.Error(
                        f"GOVERNOR_REACTIONS[{pattern!r}] names {path!r}, which is not callable.",
                        id="events.E004",
                    )
                )
    return errors
