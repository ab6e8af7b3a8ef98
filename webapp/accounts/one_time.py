"""First login with a one-time password: every page but the password change (and log out)
redirects there until the password is changed."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from webapp.accounts.models import OneTimePassword

SESSION_KEY = "one_time_password"
CHANGE_FIRST = "Your password was a one-time password: choose a new one to go on."


def one_time_password_set(*, user: AbstractBaseUser) -> None:
    """Marks the user's current password as one to change at first login."""
    OneTimePassword.objects.update_or_create(user=user, defaults={"password": user.password})


def still_one_time(user: AbstractBaseUser) -> bool:
    """True while the user's password is the one-time one; forgets it once changed."""
    marks = OneTimePassword.objects.filter(user=user)
    if marks.filter(password=user.password).exists():
        return True
    marks.delete()
    return False


def on_login(sender, request: HttpRequest, user: AbstractBaseUser, **kwargs) -> None:
    if still_one_time(user):
        request.session[SESSION_KEY] = True


class ChangeOneTimePasswordMiddleware:
    """After the authentication and message middleware. Only a session that logged in with a
    one-time password pays a query per request, until the password is changed."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.session.get(SESSION_KEY) and not self.allowed(request.path):
            if request.user.is_authenticated and still_one_time(request.user):
                messages.warning(request, CHANGE_FIRST)
                return redirect("password_change")
            request.session.pop(SESSION_KEY, None)
        return self.get_response(request)

    @staticmethod
    def allowed(path: str) -> bool:
        return path in (reverse("password_change"), reverse("logout")) or path.startswith(
            "/static/"
        )
