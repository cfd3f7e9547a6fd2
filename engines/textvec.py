"""A light text encoder for CPU hosts: hashed words, word pairs and character n-grams, no model.

What the simulated engines answer ``/v1/embeddings`` with, and the default encoder of a semantic
cache on a host without a GPU (docs/semantic-cache.md). It is labelled as what it is: a lexical
encoder. Texts that share words and spellings come out close, which is what paraphrases of one
question mostly do; it knows no synonyms, and a one-word change ("Austria" for "Australia") stays
close, which is what the cache's per-entry thresholds are there to learn (docs/decisions/0042).

The vector is the feature-hashing trick (Weinberger et al. 2009): each feature adds a signed weight
to one of ``dims`` buckets chosen by a stable hash (CRC-32, the same in every process, unlike
``hash``), then the vector is scaled to unit length, so a dot product is a cosine similarity.
"""

from __future__ import annotations

import functools
import math
import re
import zlib

import numpy as np

NAME = "light hashed n-gram encoder (lexical, CPU, no model)"
DEFAULT_DIMS = 256
_SPLIT = re.compile(r"[^0-9a-z]+")
# Words that carry little of a question's meaning (function words, and the boilerplate of requests:
# "explain", "please", "in simple terms") weigh less than the rest and bring no spelling features:
# without corpus statistics, this short list stands in for an inverse document frequency.
_STOP_WORDS = (
    "a an the of to in on for and or is are was be it its this that what whats which how do does did can "
    "could would should please me my i im you your we our with by from at as into about tell give show "
    "explain explanation describe understand know need want like help quick question hey hi hello so ok "
    "thanks thank thx cheers one more simple plain terms english overview summary short write brief briefly "
    "beginner gist step steps break down walk through through got lost teacher mentioned just also some "
    "there here will well good morning asap line quiz homework i'd let us"
)
_STOP = frozenset(_STOP_WORDS.split())
_WORD_W, _STOP_W, _PAIR_W, _GRAM_W = 1.0, 0.15, 0.6, 0.35


def _bucket(feature: str, dims: int) -> tuple[int, float]:
    h = zlib.crc32(feature.encode())
    return h % dims, (1.0 if (h >> 31) & 1 else -1.0)


@functools.lru_cache(maxsize=65536)
def _word_features(word: str, dims: int) -> tuple[tuple[int, float], ...]:
    """A word's own feature and its character 3- and 4-grams (spelling: plurals, typos, inflections)."""
    b, sign = _bucket("w:" + word, dims)
    if word in _STOP:
        return ((b, sign * _STOP_W),)
    out = [(b, sign * _WORD_W)]
    padded = f" {word} "
    grams = [padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1)]
    if grams:
        w = _GRAM_W / math.sqrt(len(grams))
        for g in grams:
            b, sign = _bucket("c:" + g, dims)
            out.append((b, sign * w))
    return tuple(out)


def encode(text: str, dims: int = DEFAULT_DIMS) -> np.ndarray:
    """The unit vector (float32) of ``text``; an empty text is the zero vector."""
    vec = np.zeros(dims, dtype=np.float32)
    words = [w for w in _SPLIT.split(text.lower()) if w]
    idx: list[int] = []
    val: list[float] = []
    for w in words:
        for b, v in _word_features(w, dims):
            idx.append(b)
            val.append(v)
    for a, b2 in zip(words, words[1:], strict=False):
        if a in _STOP and b2 in _STOP:
            continue
        b, sign = _bucket(f"p:{a} {b2}", dims)
        idx.append(b)
        val.append(sign * _PAIR_W)
    if idx:
        np.add.at(vec, np.asarray(idx), np.asarray(val, dtype=np.float32))
        norm = float(np.linalg.norm(vec))
        if norm > 0:
            vec /= norm
    return vec
