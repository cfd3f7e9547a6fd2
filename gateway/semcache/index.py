"""One worker's view of the cache: a vector index per scope (usearch's HNSW) and what each entry
has learned (its observations' log-likelihood, ``gateway.semcache.policy``).

A scope is everything an answer depends on besides the prompt (``gateway.semcache.scope``): entries
of different scopes are in different indexes, so a lookup can only ever find its own tenant's, key
scope's, route's, model version's, system prompt's, knowledge base's and sampling parameters' entries.

usearch (Unum) keeps the graph; vectors are stored quantised to int8 (cosine error about 0.003 on
unit vectors, 4x less memory, and inserts about 10x faster than float32 on the machines measured:
docs/decisions/0042). Entries expire: an expired one is never returned and is removed when met.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from usearch.index import Index

from gateway.semcache.policy import observation


@dataclass(slots=True)
class Entry:
    """A cached prompt as the index knows it; its answer is in Redis (``gateway.semcache.store``)."""

    key: int
    expires_at: float
    ll: np.ndarray | None = None  # log-likelihood over the policy's grid; None: no observation yet
    n: int = 0  # observations
    wrong: int = 0  # of which the model's answer differed

    def observe(self, s: float, correct: bool) -> None:
        o = observation(s, correct).astype(np.float32)  # 1 KiB an observed entry: float32 is plenty
        self.ll = o if self.ll is None else self.ll + o
        self.n += 1
        self.wrong += 0 if correct else 1


class ScopeIndex:
    """The entries of one scope."""

    __slots__ = ("dims", "index", "entries")

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.index = Index(
            ndim=dims, metric="cos", dtype="i8", connectivity=12, expansion_add=40, expansion_search=32
        )
        self.entries: dict[int, Entry] = {}

    def add(self, key: int, vec: np.ndarray, expires_at: float) -> Entry:
        if key in self.entries:
            return self.entries[key]
        self.index.add(key, vec)
        e = self.entries[key] = Entry(key, expires_at)
        return e

    def remove(self, key: int) -> None:
        if self.entries.pop(key, None) is not None:
            self.index.remove(key)

    def nearest(self, vec: np.ndarray, now: float | None = None) -> tuple[Entry, float] | None:
        """The closest live entry and its cosine similarity, or None."""
        if not self.entries:
            return None
        now = time.time() if now is None else now
        for _ in range(3):
            m = self.index.search(vec, 1)
            if len(m) == 0:
                return None
            e = self.entries.get(int(m.keys[0]))
            if e is None:
                return None
            if e.expires_at > now:
                return e, 1.0 - float(m.distances[0])
            self.remove(e.key)  # expired: gone from the index, look again
        return None

    def __len__(self) -> int:
        return len(self.entries)


class LocalIndex:
    """Every scope this worker has seen, by scope id."""

    def __init__(self) -> None:
        self.scopes: dict[str, ScopeIndex] = {}
        self.by_key: dict[int, tuple[str, Entry]] = {}

    def add(self, scope: str, key: int, vec: np.ndarray, expires_at: float) -> Entry:
        si = self.scopes.get(scope)
        if si is None or si.dims != len(vec):
            si = self.scopes[scope] = ScopeIndex(len(vec))
        e = si.add(key, vec, expires_at)
        self.by_key[key] = (scope, e)
        return e

    def nearest(self, scope: str, vec: np.ndarray) -> tuple[Entry, float] | None:
        si = self.scopes.get(scope)
        if si is None or si.dims != len(vec):
            return None
        return si.nearest(vec)

    def entry(self, key: int) -> Entry | None:
        got = self.by_key.get(key)
        return None if got is None else got[1]

    def purge(self, now: float | None = None) -> list[int]:
        """Drop expired entries (and empty scopes); the keys that went."""
        now = time.time() if now is None else now
        gone = [k for k, (_, e) in self.by_key.items() if e.expires_at <= now]
        for k in gone:
            scope, _ = self.by_key.pop(k)
            si = self.scopes.get(scope)
            if si is not None:
                si.remove(k)
                if not si.entries:
                    del self.scopes[scope]
        return gone

    def drop(self, key: int) -> None:
        """Forget one entry (its answer expired in Redis before its time here)."""
        got = self.by_key.pop(key, None)
        if got is not None:
            si = self.scopes.get(got[0])
            if si is not None:
                si.remove(key)

    def __len__(self) -> int:
        return len(self.by_key)
