"""A small least-recently-used cache keyed by mask slices.

Context-parallel strategies call the lse primitives with the same crops every step, so what a
kernel derives from a crop's slices (a flashplan `ExecPlan`, a Flex `BlockMask`) is worth
keeping; slices arrive as arrays or lists, so the key is their int64 bytes.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


class SlicesCache(Generic[T]):
    """The values of the last `size` distinct (slices, extra key), least recently used dropped."""

    def __init__(self, size: int = 64):
        self.size = size
        self._items: OrderedDict[tuple, T] = OrderedDict()

    def get(self, slices, extra: tuple[Hashable, ...], make: Callable[[np.ndarray], T]) -> T:
        """The cached value, or `make(slices as an (n, 5) int64 array)` stored first."""
        arr = np.ascontiguousarray(np.asarray(slices, dtype=np.int64).reshape(-1, 5))
        key = (arr.tobytes(), *extra)
        value = self._items.get(key)
        if value is None:
            value = self._items[key] = make(arr)
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return value
