"""The console's own state: only what ``seed_demo`` remembers about the objects it created."""

from django.db import models


class DemoSeedRecord(models.Model):
    """One demo object ``seed_demo`` created (``gpu_type:H100 SXM``, ``deployment:llama-…``).

    ``seed_demo`` creates an object only when no record of it exists, so an object an admin deleted
    stays deleted across restarts, and one they edited keeps their edit; ``seed_demo --reset``
    restores the demo on purpose.
    """

    key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key
