"""Streaming ASGI response bodies from plain callbacks (Django-free; shared by engines and gateway)."""

from asgistream.pusher import BodyPusher, TaskPusher, fast_path_available, uvicorn_cycle

__all__ = ["BodyPusher", "TaskPusher", "fast_path_available", "uvicorn_cycle"]
