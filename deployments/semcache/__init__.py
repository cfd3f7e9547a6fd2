"""A route's semantic cache, console side: its settings (``services``) and what the gateways report
of it (``selectors``). The cache itself is the gateway's (``gateway.semcache``; docs/semantic-cache.md)."""
