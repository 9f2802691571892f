"""Run the example in one process: ``python -m examples.django_app``.

Django's test client sends two payments to the view (one paid, one refused after its
charge was enqueued), then a worker runs until nothing is left. Order A1 is charged once
(on every run: the claim in PostgreSQL remembers it); the refused order B2 left neither a
payment row nor a job.
"""

from __future__ import annotations

import asyncio
import os


def main(redis_url: str | None = None) -> tuple[int, int]:
    """Pay A1, have B2 refused, run a worker; return (charges of A1, rows of B2)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connections
    from django.test import Client

    from examples.django_app.jobs import app
    from examples.django_app.schema import count, create_tables
    from lockgate import Worker, WorkerConfig
    from lockgate.embedded import redis_url_or_embedded

    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        create_tables()
        client = Client()
        paid = client.post("/orders/A1/pay", {"amount": 100})
        print(f"A1: {paid.status_code} {paid.json()}")
        refused = client.post("/orders/B2/pay", {"amount": 50_000})
        print(f"B2: {refused.status_code} {refused.json()}")
        asyncio.run(Worker(app, WorkerConfig(concurrency=2)).run(burst=True))
        charged = count(settings.CHARGES_TABLE, "A1")
        left = count(settings.PAYMENTS_TABLE, "B2") + count(settings.CHARGES_TABLE, "B2")
        app.close()
        connections.close_all()
    print(f"order A1: {charged} charge(s); refused order B2: {left} row(s)")
    return charged, left


if __name__ == "__main__":
    main()
