"""Login throttling, the Content-Security-Policy header and JSON errors for the JSON API.

Failed logins are counted per user name and per client IP (webapp.ratelimit); once either is
over its limit, logins from there are refused with 429 until the window ends, the right password
included, so that guessing stops paying. The site's login and the admin's share the counters.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from http import HTTPStatus

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse

from webapp import ratelimit

THROTTLED = "_login_throttled"  # set on the request when a login was refused for the limit


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR: bin/run binds gunicorn to loopback with no proxy in front; behind one,
    the proxy's address (configure the proxy to limit logins as well)."""
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def login_windows(request: HttpRequest, username: str) -> list[ratelimit.Window]:
    seconds = settings.LOGIN_FAILURE_WINDOW_SECONDS
    return [
        ratelimit.Window(
            "login-user", username.casefold()[:150], settings.LOGIN_FAILURES_PER_USER, seconds
        ),
        ratelimit.Window("login-ip", client_ip(request), settings.LOGIN_FAILURES_PER_IP, seconds),
    ]


class ThrottledLogin:
    """Mixin for an AuthenticationForm: refuses while the user name or the IP is over its limit
    of failed logins, and counts each failure."""

    request: HttpRequest | None
    user_cache: object

    def clean(self):  # type: ignore[no-untyped-def]
        username = str(self.cleaned_data.get("username") or "")  # type: ignore[attr-defined]
        windows = login_windows(self.request, username) if self.request is not None else []
        wait = max((ratelimit.over(w) for w in windows), default=0)
        if wait:
            setattr(self.request, THROTTLED, wait)
            raise forms.ValidationError(
                f"Too many failed logins for this user or from this address: try again in "
                f"{wait} s.",
                code="throttled",
            )
        try:
            return super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            if self.user_cache is None:  # wrong user name or password (not: inactive, no staff)
                for window in windows:
                    ratelimit.hit(window)
            raise


class ThrottledAuthenticationForm(ThrottledLogin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLogin, AdminAuthenticationForm):
    pass


def answer_429_when_throttled(
    view: Callable[..., HttpResponse],
) -> Callable[..., HttpResponse]:
    """The login page, re-rendered with its message, answers 429 (with Retry-After) when the
    form refused the login for the limit."""

    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        wait = getattr(request, THROTTLED, 0)
        if wait:
            response.status_code = HTTPStatus.TOO_MANY_REQUESTS
            response["Retry-After"] = str(wait)
        return response

    return wrapped


# -- Content-Security-Policy ---------------------------------------------------------------------
def content_security_policy(nonce: str) -> str:
    """Scripts and styles from our own origin only (Chart.js is a static file); an inline
    <style> (the candidate page's Pygments colours) needs the request's nonce."""
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            f"style-src 'self' 'nonce-{nonce}'",
            "img-src 'self' data:",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    """Sets ``request.csp_nonce`` (templates: ``<style nonce="{{ request.csp_nonce }}">``) and
    the Content-Security-Policy header on every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        nonce = secrets.token_urlsafe(16)
        request.csp_nonce = nonce  # type: ignore[attr-defined]
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", content_security_policy(nonce))
        return response


# -- the JSON API answers errors in JSON ----------------------------------------------------------
API_PREFIX = "/api/"


class ApiJsonErrorsMiddleware:
    """Under /api/, an error answer (an unknown id or URL, a wrong method, a server error) is
    ``{"error": "<reason>", "status": <code>}`` instead of an HTML page; answers that are JSON
    already (a 400 with the form's errors) pass unchanged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(API_PREFIX) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        answer = JsonResponse({"error": reason.lower() or "error", "status": status}, status=status)
        for header in ("Allow", "Retry-After"):
            if header in response:
                answer[header] = response[header]
        return answer
