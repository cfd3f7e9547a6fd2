"""The semantic cache: answers a request with the answer to a close enough earlier one, on routes an
admin turned it on for, within a target error rate (docs/semantic-cache.md, docs/decisions/0042).

``hook.SemanticCache`` plugs into the request path (``gateway/hooks.py``); ``policy`` decides when an
entry may be served; ``index`` is one worker's vector index; ``store`` shares the entries through
Redis; ``request`` says what a request's scope and text are; ``answers`` reads and rebuilds answers.
"""
