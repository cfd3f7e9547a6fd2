"""Billing models by concept: tenancy, keys and limits, prices, budgets and alerts, usage."""

from billing.models.budgets import Budget, BudgetAlert
from billing.models.keys import ApiKey, TenantLimits
from billing.models.money import NANOS_PER_USD
from billing.models.prices import Price, Reprice
from billing.models.rollups import RollupCursor, UsageRollup
from billing.models.tenancy import Membership, Tenant
from billing.models.usage import UsageEvent

__all__ = [
    "NANOS_PER_USD",
    "ApiKey",
    "Budget",
    "BudgetAlert",
    "Membership",
    "Price",
    "Reprice",
    "RollupCursor",
    "Tenant",
    "TenantLimits",
    "UsageEvent",
    "UsageRollup",
]
