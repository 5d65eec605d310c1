"""API Gateway's throttles on the embedded stage: token buckets read from the templates, on the stage's clock.

API Gateway throttles with token buckets: a bucket holds up to ``burst`` requests and refills at
``rate`` per second; a request that finds it empty is answered 429 and never reaches the
integration. A REST stage's ``MethodSettings`` set the bucket of each method (a ``*`` / ``/*``
entry is the default every method gets its own copy of); a WebSocket stage's ``RouteSettings``
set each route's, ``DefaultRouteSettings`` the others'. Above every stage sits the account's
regional bucket (10,000 requests per second, burst 5,000: API Gateway developer guide,
"Throttle requests to your REST APIs for better throughput", account-level throttling).
Usage plans throttle per API key; the stage issues no keys, so they are not emulated.

Buckets refill on the stage's clock, so a run that freezes the clock (``Clock.frozen()``) sends a
burst no refill can hide: exactly ``burst`` requests pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: The account's regional limit over all APIs (requests per second, burst).
ACCOUNT_RATE: Final = 10_000.0
ACCOUNT_BURST: Final = 5_000


@dataclass
class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second of ``clock``; starts full."""

    rate: float
    burst: int
    clock: Callable[[], float]
    tokens: float = field(init=False)
    updated: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)
        self.updated = self.clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        """One request: True when a token was there (and is now spent)."""
        with self._lock:
            now = self.clock()
            self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.updated) * self.rate)
            self.updated = now
            if self.tokens < 1.0:
                return False
            self.tokens -= 1.0
            return True


@dataclass(frozen=True)
class Limit:
    rate: float
    burst: int


@dataclass
class Throttle:
    """The buckets of one API stage: one per method or route, and the account's above them."""

    limits: Mapping[str, Limit]  # key ("GET /sessions", "sendMessage") -> its limit
    default: Limit | None
    clock: Callable[[], float]
    account: TokenBucket
    buckets: dict[str, TokenBucket] = field(default_factory=dict)
    #: requests answered 429, by key
    refused: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def admit(self, key: str) -> bool:
        """Whether a request of ``key`` gets through (False: answer 429)."""
        limit = self.limits.get(key, self.default)
        with self._lock:
            bucket = self.buckets.get(key)
            if bucket is None and limit is not None:
                bucket = self.buckets[key] = TokenBucket(limit.rate, limit.burst, self.clock)
        if (bucket is None or bucket.take()) and self.account.take():
            return True
        with self._lock:
            self.refused[key] = self.refused.get(key, 0) + 1
        return False


def account_bucket(clock: Callable[[], float]) -> TokenBucket:
    return TokenBucket(ACCOUNT_RATE, ACCOUNT_BURST, clock)


def _limit(settings: Mapping[str, Any], rate_key: str, burst_key: str) -> Limit | None:
    if rate_key not in settings and burst_key not in settings:
        return None
    return Limit(float(settings.get(rate_key, ACCOUNT_RATE)), int(settings.get(burst_key, ACCOUNT_BURST)))


def rest_throttle(stage: Mapping[str, Any], clock: Callable[[], float], account: TokenBucket) -> Throttle:
    """A REST stage's throttle from its ``MethodSettings`` (keys ``"<METHOD> <resource path>"``)."""
    limits: dict[str, Limit] = {}
    default = None
    for setting in stage.get("MethodSettings") or []:
        limit = _limit(setting, "ThrottlingRateLimit", "ThrottlingBurstLimit")
        if limit is None:
            continue
        method, path = str(setting.get("HttpMethod", "*")), str(setting.get("ResourcePath", "/*"))
        if method == "*" and path == "/*":
            default = limit
        else:
            limits[f"{method} {path.replace('~1', '/')}"] = limit
    return Throttle(limits, default, clock, account)


def websocket_throttle(stage: Mapping[str, Any], clock: Callable[[], float], account: TokenBucket) -> Throttle:
    """A WebSocket stage's throttle from its ``RouteSettings`` and ``DefaultRouteSettings`` (keys: route keys)."""
    limits: dict[str, Limit] = {}
    for route, setting in (stage.get("RouteSettings") or {}).items():
        limit = _limit(setting, "ThrottlingRateLimit", "ThrottlingBurstLimit")
        if limit is not None:
            limits[str(route)] = limit
    default = _limit(stage.get("DefaultRouteSettings") or {}, "ThrottlingRateLimit", "ThrottlingBurstLimit")
    return Throttle(limits, default, clock, account)
