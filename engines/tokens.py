"""Token accounting and synthetic text of the simulated engines (no real tokenizer).

A text is ``ceil(len(text) / 4)`` tokens (at least 1), the usual ~4 characters per token of English
BPE vocabularies. Chat prompts count each message's text plus 4 tokens of role/template overhead,
plus 2 for the assistant priming. Output text is a deterministic sequence of English words, one word
per token.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PRIMING = 2

WORDS = (  # noqa: SIM905 (a sentence reads better than a 256-item literal)
    "the of and to in is that it for was on are as with his they at be this from have or by one had not "
    "but what all were when we there can an your which their said if do will each about how up out them "
    "then she many some so these would other into has more her two like him see time could no make than "
    "first been its who now people my made over did down only way find use may water long little very "
    "after words called just where most know get through back much go good new write our me man too any "
    "day same right look think also around another came come work three word must because does part even "
    "place well such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own under read "
    "last never us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house world going want school important until form food keep "
    "children feet land side without boy once animals life enough took sometimes four head above kind began "
    "almost live page got earth need far hand high year mother light parts country father let night"
).split(" ")
_NWORDS = len(WORDS)
_MASK64 = (1 << 64) - 1


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``, at least 1: the documented stand-in for a tokenizer."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def synthetic_tokens(seed: int, n: int) -> list[str]:
    """``n`` deterministic word tokens (" word") from a 64-bit LCG seeded by ``seed``."""
    x = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E5) & _MASK64
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & _MASK64
        out.append(" " + WORDS[(x >> 33) % _NWORDS])
    return out


def prefix_hashes(text: str, block_size: int, n_blocks: int) -> list[int]:
    """Chained hashes of the prompt's full KV blocks (block_size * 4 characters each)."""
    step = block_size * CHARS_PER_TOKEN
    hashes = []
    h = 0x12345
    for i in range(n_blocks):
        h = hash((h, text[i * step : (i + 1) * step]))
        hashes.append(h)
    return hashes
