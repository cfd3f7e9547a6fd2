"""The data plane: an OpenAI-compatible ASGI gateway served apart from the console (see docs/gateway.md)."""
