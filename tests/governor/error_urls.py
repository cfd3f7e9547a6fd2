"""The console's URLs plus one view that fails, to see what a tenant gets from a 500."""

from django.urls import path

from governor.urls import urlpatterns as console_urlpatterns


def _fails(request):
    raise RuntimeError("secret-internal-detail: connection to 10.0.0.5 refused")


urlpatterns = [*console_urlpatterns, path("test-fails/", _fails)]
