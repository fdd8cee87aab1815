"""Seconds per activity, accumulated by a context manager and reported at the end of a process's life."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timing(dict):
    """activity -> seconds. `with timing.add("train"): ...` adds the block's wall time to "train". A dict, so it
    pickles (serial snapshots) and travels in the final "timing" report as it is."""

    @contextmanager
    def add(self, activity: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self[activity] = self.get(activity, 0.0) + time.perf_counter() - start
