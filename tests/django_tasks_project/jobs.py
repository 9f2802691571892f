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
