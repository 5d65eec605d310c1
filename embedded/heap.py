"""How often a process that runs a stage on embedded AWS collects reference cycles.

Such a process (a test worker, ``make local``, the demo and the load run) holds a large, long-lived
heap: botocore's service models, moto's backends and the functions' modules, and in a test worker
a stage's jsii proxies, about 800,000 objects in all. It also allocates fast: every call goes
through botocore and moto. With Python's default thresholds the collector traversed that whole heap
as often as every 85,000 allocations, about half a second each time: a sixth to a quarter of
a test worker's CPU. Collecting the young generation less often, and the whole heap only after a
hundred collections of the middle one, spends less than half of that (docs/performance.md). Cycles
are still collected, only later; a worker's peak memory stayed the same.
"""

from __future__ import annotations

import gc
from typing import Final

#: Young generation after 10,000 net allocations (Python's default: 700), the middle one after 20
#: of those (default 10), the whole heap after 100 of the middle one (default 10).
THRESHOLDS: Final = (10_000, 20, 100)


def collect_less_often() -> None:
    """Set :data:`THRESHOLDS` for this process."""
    gc.set_threshold(*THRESHOLDS)
