"""Tenants (teams or business units billed for what they use) and users' roles in them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class Tenant(models.Model):
    """A team or business unit that consumes models through the gateway and is billed for it."""

    name = models.CharField(max_length=128, unique=True)
    slug = models.SlugField(max_length=64, unique=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("billing:tenant_detail", args=[self.slug])


class Membership(models.Model):
    """A user's role inside one tenant: ``admin`` manages the tenant's keys, ``member`` reads."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Tenant admin"
        MEMBER = "member", "Member"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="unique_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"
