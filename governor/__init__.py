"""Governor project package: settings, URLs, ASGI/WSGI entry points and the launcher.

``python -m governor run`` and ``python -m governor test`` are the README's two commands; the
launcher (``governor.__main__``) uses only the standard library until the virtualenv exists.
"""
