"""A hash table of 64-bit integer keys and their values, looked up and filled a whole array at a time.

The hashing embedder remembers the signed bucket of every word pair it has seen. A Python
``dict`` keyed by the pair costs a boxed integer, a hash and a probe per pair, one pair at
a time: most of a batch's time. This table keeps keys and values in numpy arrays (open
addressing, linear probing, Fibonacci hashing) and answers every key of a batch with a few
array operations per probe step. A key's slot is also a small, dense id for it, stable
until the table grows.
"""

from __future__ import annotations

import numpy as np

_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: spreads consecutive keys


class KeyTable:
    """``uint64`` keys to ``int64`` values; at most half full, so probe runs stay short."""

    def __init__(self, bits: int = 12) -> None:
        self._allocate(bits)

    def _allocate(self, bits: int) -> None:
        self._bits = bits
        self._mask = (1 << bits) - 1
        self.keys = np.zeros(1 << bits, dtype=np.uint64)
        self.values = np.zeros(1 << bits, dtype=np.int64)
        self._used = np.zeros(1 << bits, dtype=bool)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return ((keys * _FIBONACCI) >> np.uint64(64 - self._bits)).astype(np.int64)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The slot of each key (``self.values[slot]`` is its value), -1 for a key not in the table."""
        keys = keys.astype(np.uint64, copy=False)
        out = np.full(keys.size, -1, dtype=np.int64)
        todo = np.arange(keys.size)
        slot = self._home(keys)
        while todo.size:
            used = self._used[slot]
            hit = used & (self.keys[slot] == keys[todo])
            out[todo[hit]] = slot[hit]
            # A used slot holding another key: probe the next one. A free slot: the key is absent.
            go_on = used & ~hit
            todo, slot = todo[go_on], (slot[go_on] + 1) & self._mask
        return out

    def add(self, keys: np.ndarray, values: np.ndarray) -> bool:
        """Insert ``keys`` (distinct, none in the table yet) with their ``values``; True when the
        table grew to hold them (it stays at most half full), which moves every slot found before."""
        keys = keys.astype(np.uint64, copy=False)
        grows = 2 * (self.size + keys.size) > self.keys.size
        if grows:
            bits = self._bits
            while 2 * (self.size + keys.size) > (1 << bits):
                bits += 1
            used = self._used
            old_keys, old_values = self.keys[used], self.values[used]
            self._allocate(bits)
            self._place(old_keys, old_values)
        self._place(keys, values)
        return grows

    def _place(self, keys: np.ndarray, values: np.ndarray) -> None:
        todo = np.arange(keys.size)
        slot = self._home(keys)
        while todo.size:
            free = np.flatnonzero(~self._used[slot])
            # Several keys may want one free slot: the first takes it, the others probe on.
            _, first = np.unique(slot[free], return_index=True)
            won = free[first]
            taken = slot[won]
            self._used[taken] = True
            self.keys[taken] = keys[todo[won]]
            self.values[taken] = values[todo[won]]
            left = np.ones(todo.size, dtype=bool)
            left[won] = False
            todo, slot = todo[left], (slot[left] + 1) & self._mask
        self.size += keys.size
