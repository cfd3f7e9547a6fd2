"""Billing reads by concept: tenancy, keys, prices, budgets, usage."""
