"""Settings of the example project: one module, no apps, no models (raw SQL tables)."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "examples.django_app.urls"
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when installed, else psycopg2
        "NAME": "test",
        "HOST": "127.0.0.1",
        "PORT": 5432,
        "USER": "postgres",
    }
}

# The example's own settings. The tests set their own namespace and tables.
LOCKGATE_NAMESPACE = os.environ.get("LOCKGATE_TEST_NAMESPACE", "example-django")
PAYMENTS_TABLE = "example_django_payments"
CHARGES_TABLE = "example_django_charges"
CLAIMS_TABLE = "lockgate_claims"
PAYMENT_LIMIT = 10_000  # a larger payment is refused after its charge was enqueued
