"""Notifications for the whole platform: to a tenant's admins and to the platform's on-call rota, in the
console, by email and on signed webhooks (ADR 0031)."""
