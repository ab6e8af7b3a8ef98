"""Fixed-window counters for rate limits (launches per user, failed logins per user and per IP).

Counters live in the default cache (Redis at REDIS_URL outside the tests, so every gunicorn worker
shares them). When that cache fails (Redis down or frozen: every call would wait for its socket
timeout, then raise) the counting goes on in this process's memory for FALLBACK_SECONDS before the
shared cache is tried again: the limits still hold, per web process, and no request fails because
the broker is unwell.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.core.cache import cache
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache

log = logging.getLogger(__name__)

FALLBACK_SECONDS = 30.0  # after a failure of the shared cache, count locally this long

_local = LocMemCache("gemmforge-ratelimit-fallback", {"OPTIONS": {"MAX_ENTRIES": 100_000}})
_shared_down_until = 0.0
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Window:
    """``limit`` events per ``seconds`` for one key of a scope (a user id, a user name, an IP)."""

    scope: str
    key: str
    limit: int
    seconds: int

    def cache_key(self, now: float) -> str:
        return f"ratelimit:{self.scope}:{self.key}:{int(now // self.seconds)}"

    def wait(self, now: float) -> int:
        """Seconds until this window ends (at least 1)."""
        slot = int(now // self.seconds)
        return max(1, int((slot + 1) * self.seconds - now) + 1)


def _store() -> BaseCache:
    return _local if time.monotonic() < _shared_down_until else cache


def _shared_failed(exc: Exception) -> None:
    global _shared_down_until
    with _lock:
        _shared_down_until = time.monotonic() + FALLBACK_SECONDS
    log.warning(
        "rate limits: the shared cache failed (%s: %s); counting in this process for %.0f s",
        type(exc).__name__,
        exc,
        FALLBACK_SECONDS,
    )


def _incr(store: BaseCache, key: str, timeout: int, delta: int) -> int:
    store.add(key, 0, timeout=timeout)
    try:
        return store.incr(key, delta)
    except ValueError:  # expired between add and incr
        store.add(key, max(delta, 0), timeout=timeout)
        return max(delta, 0)


def _count(window: Window, delta: int, now: float) -> int:
    """Adds ``delta`` to the window's counter; returns the new count."""
    key, timeout = window.cache_key(now), window.seconds + 1
    store = _store()
    try:
        return _incr(store, key, timeout, delta)
    except Exception as exc:  # redis.exceptions.* (connection refused, timeout), anything else
        if store is _local:
            raise
        _shared_failed(exc)
        return _incr(_local, key, timeout, delta)


def _peek(window: Window, now: float) -> int:
    key = window.cache_key(now)
    store = _store()
    try:
        return int(store.get(key, 0) or 0)
    except Exception as exc:
        if store is _local:
            raise
        _shared_failed(exc)
        return int(_local.get(key, 0) or 0)


def take(window: Window) -> int:
    """Counts one event if the window has room: 0 when counted, else the seconds to wait (and
    nothing is counted, so refused attempts do not push the limit out)."""
    now = time.time()
    if _count(window, 1, now) <= window.limit:
        return 0
    _count(window, -1, now)
    return window.wait(now)


def hit(window: Window) -> None:
    """Counts one event whatever the count (failed logins: each counts)."""
    _count(window, 1, time.time())


def over(window: Window) -> int:
    """0 while the window has room for one more event, else the seconds to wait."""
    now = time.time()
    return window.wait(now) if _peek(window, now) >= window.limit else 0


def reset_fallback() -> None:
    """Forget the local counters and try the shared cache again (tests)."""
    global _shared_down_until
    with _lock:
        _shared_down_until = 0.0
    _local.clear()
