"""Production settings (DJANGO_SETTINGS_MODULE=webapp.settings_production): settings.py, hardened.

Secrets come from the environment only: SECRET_KEY must be set (no key file, no development key),
and the database and broker passwords are in DATABASE_URL and REDIS_URL. DEBUG is always off.
The site is assumed to be served over HTTPS (directly or behind a proxy that sets
X-Forwarded-Proto; set SECURE_PROXY_SSL_HEADER=1 then). `manage.py check --deploy` is clean
with these settings (tests/webapp/test_security.py runs it).
"""

import os

from django.core.exceptions import ImproperlyConfigured

if not os.environ.get("SECRET_KEY", "").strip():
    raise ImproperlyConfigured(
        "set the SECRET_KEY environment variable (production reads secrets from the environment "
        "only), e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
if os.environ.get("DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}:
    raise ImproperlyConfigured("DEBUG must be off with webapp.settings_production")

from webapp.env import env_bool, env_int
from webapp.settings import *  # noqa: F403
from webapp.settings import SECRET_KEY

if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure"):
    raise ImproperlyConfigured(
        "SECRET_KEY must be at least 50 characters with at least 5 different ones"
    )

DEBUG = False

# HTTPS everywhere: redirect plain HTTP, HSTS, cookies only over HTTPS.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = True
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
