"""Text rules every app shares: bidirectional control characters, and how long free text may be.

Explicit bidi controls (embeddings, overrides, isolates and the direction marks) let a string
display in another order than it is stored: a tenant named ``"\\u202eAcme"`` renders reversed, and
one named like another can be made to look like it. Names never need them (right-to-left scripts
display correctly without them), so input with them is refused and every HTML page strips them
on the way out, which also covers rows stored before the check (see ``core.middleware``).
"""

from __future__ import annotations

import unicodedata

# ALM, LRM, RLM, LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_STRIP = dict.fromkeys(map(ord, BIDI_CONTROLS))

# Free text a person writes (reasons, notes): long enough for a paragraph, short enough that one
# request cannot bloat the audit trail or the pages that show it.
REASON_MAX_CHARS = 2000


def bidi_controls_in(text: str) -> list[str]:
    """The Unicode names of the bidi control characters in ``text`` (each once, in order)."""
    seen: list[str] = []
    for ch in text or "":
        if ch in BIDI_CONTROLS:
            name = f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".strip()
            if name not in seen:
                seen.append(name)
    return seen


def strip_bidi_controls(text: str) -> str:
    return (text or "").translate(_STRIP)


def bidi_error(text: str) -> str | None:
    """A user-facing error when ``text`` holds bidi controls, else None."""
    found = bidi_controls_in(text)
    if not found:
        return None
    return (
        f"Remove the invisible direction-control characters ({', '.join(found)}): "
        "they make a name display in another order than it is written."
    )
