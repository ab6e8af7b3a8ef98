"""Per-user rate limits on state-changing requests, counted in Django's cache.

A fixed window: each user gets ``limit`` POSTs per ``window`` seconds to a view; the next one is
answered 429 with Retry-After. Counters live in the default cache (Redis at REDIS_URL outside the
tests, so every gunicorn worker shares them). Anonymous requests pass through untouched: the view's
own ``login_required`` sends them to the login page, and they cannot change anything.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)


def _limit_setting(name: str) -> int:
    return int(getattr(settings, name))


def count_and_check(*, scope: str, user_id: int, limit: int, window: int) -> int:
    """Counts one request; returns 0 if it is allowed, else the seconds until the window ends."""
    now = time.time()
    slot = int(now // window)
    key = f"ratelimit:{scope}:{user_id}:{slot}"
    cache.add(key, 0, timeout=window + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window + 1)
        count = 1
    if count <= limit:
        return 0
    return max(1, int((slot + 1) * window - now) + 1)


def post_rate_limit(
    scope: str, *, limit_setting: str, window_setting: str
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Limits a logged-in user's POSTs to a view to settings.<limit_setting> per <window_setting> s.

    Settings are read on each request, so tests and deployments can change them.
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            user = getattr(request, "user", None)
            if request.method == "POST" and user is not None and user.is_authenticated:
                limit = _limit_setting(limit_setting)
                window = _limit_setting(window_setting)
                wait = count_and_check(scope=scope, user_id=user.pk, limit=limit, window=window)
                if wait:
                    log.warning(
                        "rate limit: user %s over %d %s per %d s", user.pk, limit, scope, window
                    )
                    response = HttpResponse(
                        f"Too many requests: at most {limit} per {window} s. "
                        f"Try again in {wait} s.\n",
                        status=429,
                        content_type="text/plain; charset=utf-8",
                    )
                    response["Retry-After"] = str(wait)
                    return response
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# Launching a campaign queues GPU work: a few per minute per user is plenty for a person.
launch_rate_limit = post_rate_limit(
    "launch", limit_setting="LAUNCH_RATE_LIMIT", window_setting="LAUNCH_RATE_WINDOW_SECONDS"
)
