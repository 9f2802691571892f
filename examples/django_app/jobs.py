"""The lockgate App of the project and its task.

A worker imports this module: ``DJANGO_SETTINGS_MODULE=examples.django_app.settings
lockgate worker examples.django_app.jobs:app``.
"""

from __future__ import annotations

import django
from django.conf import settings
from django.db import close_old_connections, connection, transaction

from lockgate import App
from lockgate.postgres import claim

app = App(namespace=settings.LOCKGATE_NAMESPACE)


@app.on_startup
def setup_django() -> None:
    django.setup()  # a worker process is not started by manage.py


@app.task(priority="critical")
def charge(order_id: str, amount: int) -> None:
    """Charge an order once, however many payments or job runs ask for it: the claim and
    the charge commit together, or not at all."""
    try:
        with transaction.atomic():
            if claim(connection, f"charge:{order_id}", table=settings.CLAIMS_TABLE):
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"INSERT INTO {settings.CHARGES_TABLE} (order_id, amount) VALUES (%s, %s)",
                        [order_id, amount],
                    )
    finally:
        # A worker thread is not a request: close its connection as Django does after one.
        close_old_connections()
