"""Billing writes by concept (tenancy, keys and limits, prices, budgets) and the gateway config section."""
