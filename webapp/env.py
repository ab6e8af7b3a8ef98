"""Typed readers for environment variables; a bad value raises ImproperlyConfigured, naming it."""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_MISSING = object()


def env_str(name: str, default: str | object = _MISSING) -> str:
    value = os.environ.get(name, "")
    if value.strip():
        return value.strip()
    if default is _MISSING:
        raise ImproperlyConfigured(f"set the {name} environment variable")
    assert isinstance(default, str)
    return default


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of 1/0, true/false, yes/no, on/off; got {value!r}"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated values, blanks dropped."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    value = env_str(name, default)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in schemes or not rest:
        raise ImproperlyConfigured(
            f"{name} must be a URL starting with {' or '.join(s + '://' for s in schemes)}, "
            f"got {value!r}"
        )
    return value


def env_json_object(name: str, default: dict[str, Any]) -> dict[str, Any]:
    """A JSON object, e.g. ``{"bucket_name": "kernels"}``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return dict(default)
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, got {value!r}")
    return parsed
