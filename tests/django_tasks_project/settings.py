"""Settings of the test project: no apps, no models; lockgate's backend for ``TASKS``.

The database is the one the example project uses (tests/integration/test_django_example.py):
whichever of the two test modules sets Django up first, the other finds the same
connections.
"""

from __future__ import annotations

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "test",
        "HOST": "127.0.0.1",
        "PORT": 5432,
        "USER": "postgres",
    }
}

APP = "django_tasks_project.jobs:app"
TASKS = {
    "default": {
        "BACKEND": "lockgate.django.LockgateBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"APP": APP},
    },
    # The same App, with enqueue() inside an atomic block sent at once.
    "direct": {
        "BACKEND": "lockgate.django.LockgateBackend",
        "OPTIONS": {"APP": APP, "OUTBOX": False},
    },
}
