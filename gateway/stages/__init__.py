"""The stages of a completion request, in order (``gateway/pipeline.py`` runs them):

authenticate → parse → [before_route hooks] → route → admit → [before_forward hooks] → forward →
settle → [after_response hooks]

Each stage reads and fills the request's ``RequestContext`` and either returns ``None`` (go on) or a
``Reply`` that ends the request. Until ``admit`` succeeds nothing is held; from then on the request
settles whatever happens (``settle.guard``). Why stages and hooks rather than middleware:
docs/decisions/0025-a-gateway-pipeline-of-stages-and-hooks.md.
"""
