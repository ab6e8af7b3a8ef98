"""Django settings, read from environment variables (see docs/configuration.md)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from webapp.env import env_bool, env_int, env_json_object, env_list, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    """SECRET_KEY, else the file bin/run writes (var/secret_key), else a dev key when DEBUG."""
    if key := env_str("SECRET_KEY", ""):
        return key
    key_file = Path(env_str("SECRET_KEY_FILE", str(VAR_DIR / "secret_key")))
    if key_file.is_file() and (key := key_file.read_text().strip()):
        return key
    if DEBUG:
        return "django-insecure-gemmforge-development-only"
    raise ImproperlyConfigured(
        f"set SECRET_KEY, or write one to {key_file} (./bin/run does), or set DEBUG=1"
    )


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "webapp.campaigns",
    "webapp.workers",
    "webapp.accounts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.security.ContentSecurityPolicyMiddleware",
    "webapp.security.ApiJsonErrorsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "webapp.accounts.one_time.ChangeOneTimePasswordMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database(url: str) -> dict:
    try:
        config = dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
    except Exception as exc:  # dj-database-url raises ValueError and its own UnknownSchemeError
        raise ImproperlyConfigured(f"DATABASE_URL is not usable ({exc}): {url!r}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Web server and Celery worker share the file: wait for locks, write-ahead log.
        config["CONN_MAX_AGE"] = 0
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


_SQLITE_URL = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASE_URL = env_url(
    "DATABASE_URL", _SQLITE_URL, schemes=("sqlite", "postgres", "postgresql", "pgsql")
)
if DATABASE_URL == _SQLITE_URL:
    VAR_DIR.mkdir(exist_ok=True)
DATABASES = {"default": _database(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "dashboard"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# The artifact store (webapp/campaigns/artifact_store.py): compile workers publish each library
# they build, GPU workers fetch what their compile cache lacks. A folder by default; any Django
# storage backend by ARTIFACTS_STORAGE (its dotted path) and ARTIFACTS_STORAGE_OPTIONS (JSON).
GEMMFORGE_ARTIFACT_STORE = env_bool("GEMMFORGE_ARTIFACT_STORE", True)
ARTIFACTS_STORAGE = env_str("ARTIFACTS_STORAGE", "django.core.files.storage.FileSystemStorage")
_ARTIFACTS_OPTIONS = env_json_object("ARTIFACTS_STORAGE_OPTIONS", {})
if ARTIFACTS_STORAGE == "django.core.files.storage.FileSystemStorage":
    _ARTIFACTS_OPTIONS.setdefault("location", env_str("ARTIFACTS_ROOT", str(VAR_DIR / "artifacts")))
STORAGES["artifacts"] = {"BACKEND": ARTIFACTS_STORAGE, "OPTIONS": _ARTIFACTS_OPTIONS}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
}

# --- Celery (read by webapp/celery.py through the CELERY_ namespace) -----------------------------
REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss", "unix"))


def _default_namespace(database: dict) -> str:
    """The install is its database: the broker's messages name its work items. A SQLite file
    (one checkout) or a PostgreSQL database name, which every machine of one install shares
    whatever host name or password it reaches it by."""
    identity = f"{database['ENGINE']}:{database['NAME']}"
    return "gf-" + hashlib.sha256(identity.encode()).hexdigest()[:10]


# Every Redis key of this install (queues, unacknowledged messages, broadcasts, results, cache)
# starts with "<GEMMFORGE_NAMESPACE>:", so that two installs sharing one Redis never take each
# other's work. Machines of one install must agree on it (bin/run prints it).
GEMMFORGE_NAMESPACE = env_str("GEMMFORGE_NAMESPACE", "") or _default_namespace(DATABASES["default"])
if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", GEMMFORGE_NAMESPACE):
    raise ImproperlyConfigured(
        "GEMMFORGE_NAMESPACE must be 1 to 64 letters, digits, '_', '.' or '-', "
        f"got {GEMMFORGE_NAMESPACE!r}"
    )
_KEY_PREFIX = f"{GEMMFORGE_NAMESPACE}:"
# A frozen or unreachable Redis answers no call: give up after this long (the web process's
# cache calls, the broker connection's socket operations) rather than hang a request.
REDIS_SOCKET_TIMEOUT_SECONDS = env_int("REDIS_SOCKET_TIMEOUT_SECONDS", 2, minimum=1)
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
# The longest task (a benchmark sweep) must finish inside the hard limit; the soft limit lets it
# record a failure first. Redis re-delivers unacknowledged tasks after visibility_timeout, so it
# must be longer than the hard limit or a long task would run twice.
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 25 * 60, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 30 * 60, minimum=1)
if CELERY_TASK_SOFT_TIME_LIMIT >= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured("CELERY_TASK_SOFT_TIME_LIMIT must be below CELERY_TASK_TIME_LIMIT")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 2 * CELERY_TASK_TIME_LIMIT,
    "global_keyprefix": _KEY_PREFIX,
    "socket_connect_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": _KEY_PREFIX}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # Django's LOGGING wins
CELERY_TASK_DEFAULT_QUEUE = "default"
# compile: CPU work (nvcc); gpu.<arch>: one process per GPU; default: bookkeeping.
CELERY_TASK_QUEUES = [Queue(name) for name in ("default", "compile", "gpu.sm90", "gpu.sm80")]

# --- Cache: rate-limit counters (webapp/ratelimit.py), shared by every web worker -----------------
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": GEMMFORGE_NAMESPACE,
        "OPTIONS": {
            "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
            "socket_connect_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
        },
    }
}
# Accepted launches per user per window; one more re-renders the form with 429.
LAUNCH_RATE_LIMIT = env_int("LAUNCH_RATE_LIMIT", 5, minimum=1)
LAUNCH_RATE_WINDOW_SECONDS = env_int("LAUNCH_RATE_WINDOW_SECONDS", 60, minimum=1)
# A launch estimated above this many GPU hours needs its confirmation box ticked; a user's
# unfinished campaigns may owe at most LAUNCH_GPU_QUOTA_HOURS of estimated GPU time together.
LAUNCH_CONFIRM_GPU_HOURS = env_int("LAUNCH_CONFIRM_GPU_HOURS", 24, minimum=0)
LAUNCH_GPU_QUOTA_HOURS = env_int("LAUNCH_GPU_QUOTA_HOURS", 14 * 24, minimum=0)
# Failed logins (the site's and the admin's) per user name and per client IP per window; past
# either, logins from there are refused (429) until the window ends, the right password too.
LOGIN_FAILURES_PER_USER = env_int("LOGIN_FAILURES_PER_USER", 10, minimum=1)
LOGIN_FAILURES_PER_IP = env_int("LOGIN_FAILURES_PER_IP", 50, minimum=1)
LOGIN_FAILURE_WINDOW_SECONDS = env_int("LOGIN_FAILURE_WINDOW_SECONDS", 15 * 60, minimum=1)

# --- Worker heartbeats ---------------------------------------------------------------------------
WORKER_HEARTBEAT_SECONDS = env_int("WORKER_HEARTBEAT_SECONDS", 10, minimum=1)
# A worker counts as connected when its last heartbeat is this recent.
WORKER_ONLINE_SECONDS = env_int("WORKER_ONLINE_SECONDS", 3 * WORKER_HEARTBEAT_SECONDS, minimum=1)

# --- Distributed campaign work (webapp/campaigns/work.py, runner.py) -----------------------------
# Where GPU steps run: "local" (this machine's GPU, in a child process) or "replay:<path>" (recorded
# H200 measurements, e.g. bench/results/2026-12-02-h200-families/families-run1.json: no GPU used;
# for the fault tests and demos on machines without one).
GEMMFORGE_EXECUTOR = env_str("GEMMFORGE_EXECUTOR", "local")
if GEMMFORGE_EXECUTOR != "local" and not (
    GEMMFORGE_EXECUTOR.startswith("replay:") and GEMMFORGE_EXECUTOR[len("replay:") :]
):
    raise ImproperlyConfigured(
        f"GEMMFORGE_EXECUTOR must be 'local' or 'replay:<path>', not {GEMMFORGE_EXECUTOR!r}"
    )
GEMMFORGE_BATCH_SIZE = env_int("GEMMFORGE_BATCH_SIZE", 8, minimum=1)  # candidates per round
GEMMFORGE_GPU_DEVICE = env_str("GEMMFORGE_GPU_DEVICE", "0")  # CUDA_VISIBLE_DEVICES of GPU steps
# The local GPU step: verifications at once (each a child process that spends seconds starting
# while the GPU idles; default: the whole batch) and the cap on its device-protocol timing run
# (seconds).
GEMMFORGE_VERIFY_JOBS = env_int("GEMMFORGE_VERIFY_JOBS", GEMMFORGE_BATCH_SIZE, minimum=1)
GEMMFORGE_DEVICE_SECONDS = env_int("GEMMFORGE_DEVICE_SECONDS", 20, minimum=1)
# Start each GPU step's child while the step before it runs (``engine.execution.gpu_step
# --standby``): its imports and its verifications' fork server are ready when its batch comes.
GEMMFORGE_GPU_STANDBY = env_bool("GEMMFORGE_GPU_STANDBY", True)
WORK_LEASE_SECONDS = env_int("WORK_LEASE_SECONDS", 120, minimum=1)  # extended every third of it
WORK_MAX_ATTEMPTS = env_int("WORK_MAX_ATTEMPTS", 3, minimum=1)
# How often a running step checks that it still holds its item and that its campaign was not
# cancelled; when not, it kills its children (nvcc, the GPU step's child) and records nothing.
WORK_STOP_POLL_SECONDS = env_int("WORK_STOP_POLL_SECONDS", 1, minimum=1)
WORK_RETRY_DELAY_SECONDS = env_int("WORK_RETRY_DELAY_SECONDS", 5, minimum=0)
WORK_REQUEUE_SECONDS = env_int("WORK_REQUEUE_SECONDS", 30, minimum=1)  # the periodic job's period
# A queued item whose task message is older than this is sent again (a broker that lost it).
# Workers also ask for this each time they (re)connect to the broker (webapp/celery.py), which
# covers a Redis restart at once; this is the backstop. A message that waits its turn in a long
# queue is sent once more per period: a duplicate is harmless (the claim is conditional).
WORK_STALE_QUEUED_SECONDS = env_int("WORK_STALE_QUEUED_SECONDS", 180, minimum=1)
COMPILE_STEP_TIMEOUT = env_int("COMPILE_STEP_TIMEOUT", 900, minimum=1)
GPU_STEP_TIMEOUT = env_int("GPU_STEP_TIMEOUT", 1200, minimum=1)
if max(COMPILE_STEP_TIMEOUT, GPU_STEP_TIMEOUT) >= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured(
        "COMPILE_STEP_TIMEOUT and GPU_STEP_TIMEOUT must be below CELERY_TASK_SOFT_TIME_LIMIT"
    )
# Fault injection, for the fault tests and demos only: a command each compile step runs (e.g.
# "sleep 60", timed out after COMPILE_STEP_TIMEOUT); a step kind ("compile" or "gpu") that raises
# every time; a file the replay executor appends each executed candidate to; replay GPU seconds.
GEMMFORGE_COMPILE_HOOK = env_str("GEMMFORGE_COMPILE_HOOK", "")
GEMMFORGE_CRASH_STEP = env_str("GEMMFORGE_CRASH_STEP", "")
GEMMFORGE_EXECUTION_LOG = env_str("GEMMFORGE_EXECUTION_LOG", "")
GEMMFORGE_REPLAY_DELAY_MS = env_int("GEMMFORGE_REPLAY_DELAY_MS", 0, minimum=0)
CELERY_BEAT_SCHEDULE = {
    "work-requeue": {
        "task": "webapp.campaigns.tasks.work_requeue",
        "schedule": float(WORK_REQUEUE_SECONDS),
        "options": {"queue": "default", "expires": float(WORK_REQUEUE_SECONDS)},
    },
}
