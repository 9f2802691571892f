"""Django's tasks framework on lockgate workers: ``TASKS = {"default": {"BACKEND":
"lockgate.django.LockgateBackend", "OPTIONS": {"APP": "module:app"}}}`` (docs/django.md).

The documented path of :mod:`lockgate.contrib.django_tasks`, which holds the backend, over
:mod:`lockgate.integrations.django_tasks`, which runs the tasks. Importing it needs
Django's tasks framework: ``django.tasks`` (Django 6) or the ``django-tasks`` backport
(``pip install 'lockgate[django]'``).
"""

from lockgate.contrib.django_tasks import LockgateBackend, register, setup_django

__all__ = ["LockgateBackend", "register", "setup_django"]
