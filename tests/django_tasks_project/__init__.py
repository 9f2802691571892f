"""A Django project whose ``@task`` functions run on lockgate workers
(tests/integration/test_django_tasks.py): Django 6's ``django.tasks``, or the
``django-tasks`` backport on Django 4.2-5.2, whichever is installed."""
