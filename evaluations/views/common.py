"""Helpers the evaluations pages share."""

from __future__ import annotations

from django.http import HttpResponsePermanentRedirect
from django.views.generic import RedirectView

PAGE_SIZE = 25


def query_without_page(request) -> str:
    """The page's query string without ``page`` (for the paginator's links)."""
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


class Moved(RedirectView):
    """A page that moved for good: 308 with the query string, so a bookmark, a shared link and a
    form posted from a page loaded before the move all reach the new address (the method and body
    are kept)."""

    query_string = True

    def get(self, request, *args, **kwargs):
        url = self.get_redirect_url(*args, **kwargs)
        return HttpResponsePermanentRedirect(url, preserve_request=True)
