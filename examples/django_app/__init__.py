"""A minimal Django project that enqueues in the view's transaction (``enqueue_on_commit``).

- ``settings.py``: everything Django needs, in one module (PostgreSQL ``test`` on
  127.0.0.1).
- ``jobs.py``: the lockgate App and its ``charge`` task, which claims the order in
  ``transaction.atomic()`` with ``lockgate.postgres.claim(connection, key)``.
- ``views.py``: ``POST /orders/<id>/pay`` records a payment and enqueues its charge with
  ``charge.enqueue_on_commit(connection, ...)``; a payment refused after that rolls back,
  and no job is left behind.
- ``schema.py``: the tables (in a real project, a migration).

Run it all in one process: ``python -m examples.django_app``. Or serve it and run a worker::

    export DJANGO_SETTINGS_MODULE=examples.django_app.settings
    python -m django runserver
    lockgate worker examples.django_app.jobs:app
"""
