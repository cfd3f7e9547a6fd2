"""Billing: tenants and memberships, API keys, prices, budgets, usage and cost."""
