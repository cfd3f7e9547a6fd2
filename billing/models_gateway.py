"""Gateway-facing billing models: API keys, prices, budgets and usage events (issue 5)."""
