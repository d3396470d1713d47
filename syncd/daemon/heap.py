"""Garbage-collector settings for a long-running syncd process.

A crawl allocates container objects by the hundred thousand per second (every record is a
dict, every page a list of them), nearly all of them short-lived. With CPython's default
thresholds the young generation is collected after every 700 allocations, and every few
seconds a full collection walks every object the process holds. The event loop stops
meanwhile, and API requests with it: 20 syncs on SQLite put the API's p99 at ~50 ms, with
stalls of 120 ms. With :func:`tune_collector` it was ~7 ms (``bench/api_latency.py``, see the
README).

``syncd run`` calls it once the daemon has started. A program that embeds :class:`~syncd.Daemon`
decides for itself: the settings are the whole process's.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

#: Allocations (minus deallocations) between two collections of the young generation.
YOUNG_THRESHOLD = 50_000


def tune_collector(young: int = YOUNG_THRESHOLD) -> None:
    """Freeze the objects alive now (modules, configuration, the daemon's components: nearly
    all of them live as long as the process; the few replaced later, as on a reload, stay
    in memory) so that no collection walks them again, and collect the young generation
    every ``young`` allocations. The older generations keep their
    thresholds, relative to the young one's collections."""
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
