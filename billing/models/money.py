"""Money in usage and budgets is integer nano-dollars: a price of $X per million tokens is
X*1000 nano-dollars per token, so the gateway's Redis counters, the spool and PostgreSQL agree to
the last unit without floating point."""

NANOS_PER_USD = 1_000_000_000
