"""The project's lockgate App: the workers run it (``lockgate worker
django_tasks_project.jobs:app``), and ``TASKS``' ``OPTIONS["APP"]`` names it.

The tests give it a namespace of their own (``LOCKGATE_TEST_NAMESPACE``) and their Redis
(``LOCKGATE_REDIS_URL``).
"""

from __future__ import annotations

import os

from lockgate import App
from lockgate.django import register

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "django-tasks-project"))
# The runner of Django tasks, for each queue of TASKS' lockgate entries ("default",
# "emails"): what a worker of this App needs to run them.
register(app)

# The same runners on an App with the durable outbox (TASKS' "outboxed" entry in the tests):
# enqueue() in an atomic block writes the job as a row of that transaction.
OUTBOX_DSN = "host=127.0.0.1 dbname=test user=postgres"
outboxed = App(namespace=f"{app.namespace}-outbox", outbox=OUTBOX_DSN)
register(outboxed)
