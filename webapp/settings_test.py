"""Settings for the test suite: the real settings, a fixed key, fast hashing, eager Celery."""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-not-a-secret")

from webapp.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # tests of the store point it at a folder of their own (tests/webapp/test_artifact_store.py)
    "artifacts": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
}
STATIC_ROOT = None  # WhiteNoise serves from the finders; nothing is collected in tests
WHITENOISE_USE_FINDERS = True
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
# Rate-limit counters in this process's memory; tests clear it (tests/webapp/conftest.py).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Each GPU step's child started fresh, as the tests of the step's child expect; the standby path
# has its own tests (tests/webapp/test_gpu_standby.py) and the fault tests run it (real settings).
GEMMFORGE_GPU_STANDBY = False
