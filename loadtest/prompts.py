"""Prompt text of a requested token length, with shared prefixes, for any tokenizer.

The harness does not know the target's tokenizer, so it builds prompts from short common English
words that are one token in the BPE vocabularies of the models we serve (and one "word" for the
simulated engines). The server's ``usage`` is the count that is reported; this only has to be close.
Each request's private part starts with its index so that unrelated requests never share a
prefix by accident (which would flatter prefix caching).
"""

from __future__ import annotations

import numpy as np

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "you",
    "that",
    "he",
    "was",
    "for",
    "on",
    "are",
    "with",
    "as",
    "his",
    "they",
    "be",
    "at",
    "one",
    "have",
    "this",
    "from",
    "or",
    "had",
    "by",
    "hot",
    "word",
    "but",
    "what",
    "some",
    "we",
    "can",
    "out",
    "other",
    "were",
    "all",
    "there",
    "when",
    "up",
    "use",
    "your",
    "how",
    "said",
    "an",
    "each",
    "she",
    "which",
    "do",
    "their",
    "time",
    "if",
    "will",
    "way",
    "about",
    "many",
    "then",
    "them",
    "write",
    "would",
    "like",
    "so",
    "these",
    "her",
    "long",
    "make",
    "thing",
    "see",
    "him",
    "two",
    "has",
    "look",
    "more",
    "day",
    "could",
    "go",
    "come",
    "did",
    "number",
    "sound",
    "no",
    "most",
    "people",
    "my",
    "over",
    "know",
    "water",
    "than",
    "call",
    "first",
    "who",
    "may",
    "down",
    "side",
    "been",
    "now",
    "find",
    "any",
    "new",
    "work",
    "part",
    "take",
    "get",
    "place",
    "made",
    "live",
    "where",
    "after",
    "back",
    "little",
    "only",
    "round",
    "man",
    "year",
    "came",
    "show",
    "every",
    "good",
    "me",
    "give",
    "our",
    "under",
    "name",
    "very",
    "through",
    "just",
    "form",
    "sentence",
    "great",
    "think",
    "say",
    "help",
    "low",
    "line",
    "differ",
    "turn",
    "cause",
    "much",
]


def _words(rng: np.random.Generator, n: int) -> str:
    if n <= 0:
        return ""
    idx = rng.integers(0, len(_WORDS), size=n)
    return " ".join(_WORDS[i] for i in idx)


def build_prompts(
    *, input_len: np.ndarray, prefix_group: np.ndarray, prefix_len: np.ndarray, seed: int
) -> list[str]:
    """One prompt per request with ``input_len`` words, the first ``prefix_len`` shared by its group."""
    group_text: dict[int, list[str]] = {}
    longest: dict[int, int] = {}
    for g, p in zip(prefix_group.tolist(), prefix_len.tolist(), strict=True):
        if g >= 0:
            longest[g] = max(longest.get(g, 0), p)
    for g, n in longest.items():
        grng = np.random.Generator(np.random.PCG64([seed, 100 + g]))
        group_text[g] = _words(grng, n).split()
    rng = np.random.Generator(np.random.PCG64([seed, 3]))
    prompts = []
    for i, (n, g, p) in enumerate(
        zip(input_len.tolist(), prefix_group.tolist(), prefix_len.tolist(), strict=True)
    ):
        shared = group_text[g][:p] if g >= 0 and p > 0 else []
        rest = max(0, n - len(shared) - 1)
        prompts.append(" ".join([*shared, str(i), _words(rng, rest)]).strip())
    return prompts
