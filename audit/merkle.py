"""Merkle tree hashing of RFC 9162 (Certificate Transparency v2, as RFC 6962): leaf and node hashes,
the tree head, inclusion and consistency proofs and their verification (sections 2.1.1 to 2.1.4).

- leaf hash ``SHA-256(0x00 || leaf)``, node hash ``SHA-256(0x01 || left || right)``;
- the tree of n > 1 leaves splits at k, the largest power of two smaller than n.

Hashes are 32-byte ``bytes``. ``Frontier`` computes tree heads of a growing list of leaf hashes in
O(log n) memory (the verifier's streaming walk); ``Tree`` keeps every level for proofs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof that does not verify (or is malformed)."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes, straight from the recursive definition (RFC 9162 2.1.1)."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(root_of(hashes[:k]), root_of(hashes[k:]))


class Frontier:
    """The roots of the perfect subtrees covering the leaves so far (a compact range from 0)."""

    __slots__ = ("size", "_stack")

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[bytes] = []

    def append(self, h: bytes) -> None:
        stack = self._stack
        size = self.size
        while size & 1:
            h = node_hash(stack.pop(), h)
            size >>= 1
        stack.append(h)
        self.size += 1

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        stack = self._stack
        r = stack[-1]
        for h in reversed(stack[:-1]):
            r = node_hash(h, r)
        return r


class Tree:
    """Every level of the tree over ``hashes``: tree heads, inclusion and consistency proofs.

    An RFC 9162 tree is the left-balanced tree in which a level's odd last node moves up unchanged.
    """

    def __init__(self, hashes: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(hashes)]
        while len(self.levels[-1]) > 1:
            below = self.levels[-1]
            above = [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
            if len(below) % 2:
                above.append(below[-1])
            self.levels.append(above)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def root(self) -> bytes:
        return self.levels[-1][0] if self.size else EMPTY_ROOT

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH of leaves [start, end): a perfect subtree of a level, or recursion at the split."""
        n = end - start
        if n == 1:
            return self.levels[0][start]
        level = n.bit_length() - 1
        if n == 1 << level and start % n == 0:
            return self.levels[level][start >> level]
        k = _split(n)
        return node_hash(self._subtree(start, start + k), self._subtree(start + k, end))

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) of RFC 9162 2.1.3.1, leaf side first."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ValueError(f"no leaf {index} in a tree of {size}")
        path: list[bytes] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                path.append(self._subtree(start + k, end))
                end = start + k
            else:
                path.append(self._subtree(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """PROOF(old, D[0:new]) of RFC 9162 2.1.4.1."""
        new = self.size if new is None else new
        if not 0 < old <= new <= self.size:
            raise ValueError(f"no consistency proof from {old} to {new}")
        return self._subproof(old, 0, new, True)

    def _subproof(self, m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [self._subtree(start, end)]
        k = _split(n)
        if m <= k:
            return self._subproof(m, start, start + k, whole) + [self._subtree(start + k, end)]
        return self._subproof(m - k, start + k, end, False) + [self._subtree(start, start + k)]


def verify_inclusion(*, index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> None:
    """RFC 9162 2.1.3.2; raises ``ProofError`` unless ``leaf`` is leaf ``index`` of the tree ``root``."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} outside a tree of {size}")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise ProofError("inclusion proof longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof shorter than the tree is deep")
    if r != root:
        raise ProofError("inclusion proof leads to another root")


def verify_consistency(
    *, old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 2.1.4.2; raises ``ProofError`` unless tree ``new_root`` extends tree ``old_root``."""
    if old == new:
        if proof or old_root != new_root:
            raise ProofError("trees of the same size differ")
        return
    if not 0 < old < new:
        raise ProofError(f"no consistency from {old} to {new}")
    path = list(proof)
    if old & (old - 1) == 0:  # old is a power of two: its root is the first node
        path.insert(0, old_root)
    if not path:
        raise ProofError("empty consistency proof")
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof too short")
    if fr != old_root or sr != new_root:
        raise ProofError("consistency proof leads to other roots")
