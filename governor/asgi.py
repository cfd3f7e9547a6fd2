"""ASGI entry point for the console (the gateway is a separate ASGI app in ``gateway/``)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
application = get_asgi_application()
