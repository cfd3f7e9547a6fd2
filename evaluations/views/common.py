"""Helpers the evaluations pages share."""

from __future__ import annotations

PAGE_SIZE = 25


def query_without_page(request) -> str:
    """The page's query string without ``page`` (for the paginator's links)."""
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()
