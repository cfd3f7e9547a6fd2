"""Prompt text of an exact token length for the served model, with shared prefixes exact in tokens.

A prompt is a sequence of short common English words. With a token counter (``loadtest.tokens``)
the builder first keeps the words that are one token for this tokenizer both at the start of a text
and after a space (BPE tokenizers split on spaces first, so such words add exactly one token each),
learns the count's fixed overhead (BOS and the like), builds every prompt to the requested count,
then checks each one with the counter and adds or drops words at its end until the count is exact
(a last-word swap settles tokenizers whose counts jump by more than one, such as the simulated
engine's characters / 4). Counters that only approximate (usage calibration, words) skip the check.

Layout of request ``i``: ``[group prefix words][index marker words][random words]``. The prefix is
``prefix_len`` tokens counted from the start, special tokens included, so two requests of a group
share exactly that many tokens. The marker spells ``i`` in base-``len(words)`` word digits, so
unrelated requests never share a prefix by accident (which would flatter prefix caching).
"""

from __future__ import annotations

import numpy as np

from .tokens import TokenCounter

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


class PromptLengthError(ValueError):
    """A requested prompt cannot be built (longer than the model's context, or shorter than its overhead)."""


class _Vocab:
    """The words usable with this counter and the count's overhead."""

    def __init__(self, counter: TokenCounter) -> None:
        words = list(_WORDS)
        if counter.exact:
            bare = counter.count_many(words)
            spaced = counter.count_many([f"{w} {w}" for w in words])
            single = [w for w, b, s2 in zip(words, bare, spaced, strict=True) if s2 - b == 1]
            if len(single) >= 16:
                words = single
                self.overhead = min(b for w, b in zip(_WORDS, bare, strict=True) if w in set(single)) - 1
            else:  # a tokenizer without one-token words (characters / 4): the check loop does the work
                self.overhead = max(0, counter.count("the") - 1)
        else:
            self.overhead = max(0, counter.count("the") - 1)
        self.words = words

    def take(self, rng: np.random.Generator, n: int) -> list[str]:
        if n <= 0:
            return []
        return [self.words[i] for i in rng.integers(0, len(self.words), size=n)]

    def marker(self, i: int) -> list[str]:
        k = len(self.words)
        digits = [self.words[i % k]]
        i //= k
        while i:
            digits.append(self.words[i % k])
            i //= k
        return digits


def build_prompts(
    *,
    input_len: np.ndarray,
    prefix_group: np.ndarray,
    prefix_len: np.ndarray,
    seed: int,
    counter: TokenCounter | None = None,
) -> list[str]:
    """One prompt per request with ``input_len`` tokens, the first ``prefix_len`` shared by its group."""
    counter = counter or TokenCounter()
    # Learning the vocabulary costs two counts per candidate word (HTTP calls for /tokenize): once
    # per counter, not once per stage.
    vocab = counter._prompt_vocab
    if vocab is None:
        vocab = _Vocab(counter)
        counter._prompt_vocab = vocab
    limit = counter.max_model_len
    lens = input_len.tolist()
    if limit is not None and lens and max(lens) >= limit:
        raise PromptLengthError(
            f"requested input length {max(lens)} tokens does not fit the model's context of {limit} tokens"
        )
    over = vocab.overhead
    group_words: dict[int, list[str]] = {}
    longest: dict[int, int] = {}
    for g, p in zip(prefix_group.tolist(), prefix_len.tolist(), strict=True):
        if g >= 0:
            longest[g] = max(longest.get(g, 0), p)
    for g, n in longest.items():
        grng = np.random.Generator(np.random.PCG64([seed, 100 + g]))
        group_words[g] = vocab.take(grng, n - over)
    rng = np.random.Generator(np.random.PCG64([seed, 3]))
    parts: list[tuple[list[str], list[str]]] = []  # (fixed head: prefix + marker, adjustable tail)
    for i, (n, g, p) in enumerate(zip(lens, prefix_group.tolist(), prefix_len.tolist(), strict=True)):
        shared = group_words[g][: max(0, p - over)] if g >= 0 and p > 0 else []
        head = [*shared, *vocab.marker(i)]
        tail = vocab.take(rng, n - over - len(head))
        parts.append((head, tail))
    prompts = [" ".join(h + t) for h, t in parts]
    if counter.exact:
        prompts = _settle(prompts, parts, lens, counter, vocab, rng)
    return prompts


# Prompts checked one by one before the builder trusts its word arithmetic for the rest: when these
# all came out exact at the first try, the counter is additive over the chosen words.
CHECK_FIRST = 200


def _settle(prompts, parts, lens, counter: TokenCounter, vocab: _Vocab, rng) -> list[str]:
    """Check prompts' counts and adjust their tails until exact (bounded work per prompt)."""
    first = counter.count_many(prompts[:CHECK_FIRST])
    if all(c == w for c, w in zip(first, lens, strict=False)):
        if len(prompts) <= CHECK_FIRST:
            return prompts
        # Cheap counters still check everything; a server endpoint trusts the arithmetic now.
        rest = (
            counter.count_many(prompts[CHECK_FIRST:]) if counter.source == "tokenizer" else lens[CHECK_FIRST:]
        )
    else:
        rest = counter.count_many(prompts[CHECK_FIRST:])
    counts = first + list(rest)
    for i, (c, want) in enumerate(zip(counts, lens, strict=True)):
        if c == want:
            continue
        head, tail = parts[i]
        for _ in range(8):
            d = want - c
            if d == 0:
                break
            if d > 0:
                tail = tail + vocab.take(rng, d)
            else:
                drop = min(-d, len(tail))
                if drop == 0:
                    break  # only the prefix and marker are left: the request is as short as it gets
                tail = tail[: len(tail) - drop]
            c = counter.count(" ".join(head + tail))
        if c != want and tail:
            # Counts that jump by more than one token per word: try other last words.
            for w in vocab.words[:40]:
                trial = tail[:-1] + [w]
                ct = counter.count(" ".join(head + trial))
                if ct == want:
                    tail, c = trial, ct
                    break
        prompts[i] = " ".join(head + tail)
    return prompts
