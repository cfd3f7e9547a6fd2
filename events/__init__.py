"""The event spine: one outbox every app emits into, one dispatcher that calls the reactions settings
register (ADR 0030). A leaf under ``audit``: it imports nothing of the project."""
