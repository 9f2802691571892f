"""Issue 8, must-have 2: a configuration error stops ``lockgate worker`` with one line.

A server that wants a password the worker does not give, a wrong password, an ACL user
without the rights lockgate needs, or a command lockgate needs disabled on the server
(unknown command): nothing a retry can fix, so the worker exits with code 2
and one ``error:`` line on stderr, without a traceback and without printing the password.
The worker runs as the real command, in a subprocess, on ``tests/integration/cli_app.py``.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from faults.support import PrivateRedis, env_without_lockgate

CLI_APP_DIR = Path(__file__).parent.parent / "integration"
SECRET = "s3cret-Pa55"
# Loose: a worker that treats the error as transient and retries forever hits this.
EXIT_TIMEOUT = 30.0
# The real command, logging warnings and up (an INFO start line is not an error line).
LOCKGATE = [sys.executable, "-m", "lockgate", "--log-level", "WARNING"]


def run_worker(url: str) -> subprocess.CompletedProcess[str]:
    """Run ``lockgate worker cli_app:app --url URL`` until it exits.

    Raises:
        subprocess.TimeoutExpired: it did not exit (it is killed first).
    """
    return subprocess.run(
        [*LOCKGATE, "worker", "cli_app:app", "--url", url],
        cwd=CLI_APP_DIR,
        env=env_without_lockgate({"LOCKGATE_TEST_NAMESPACE": uuid.uuid4().hex}),
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )


def server_and_url(start: Callable[..., PrivateRedis], case: str) -> tuple[PrivateRedis, str]:
    if case == "no password":
        server = start(requirepass=SECRET)
        return server, server.url
    if case == "wrong password":
        server = start(requirepass=SECRET)
        # Contains SECRET, so the check that no password is printed covers it too.
        return server, f"redis://:wrong-{SECRET}@127.0.0.1:{server.port}/0"
    if case == "command disabled":
        # As managed services do with some commands: lockgate's scripts cannot run.
        server = start(rename_command=("FCALL", ""))
        return server, server.url
    # An ACL user that may connect and PING but not run scripts or touch streams.
    server = start()
    server.client.acl_setuser(
        "limited",
        enabled=True,
        passwords=[f"+{SECRET}"],
        keys=["*"],
        channels=["*"],
        commands=["+@connection"],
    )
    return server, f"redis://limited:{SECRET}@127.0.0.1:{server.port}/0"


@pytest.mark.parametrize(
    "case", ["no password", "wrong password", "no permissions", "command disabled"]
)
def test_worker_with_a_configuration_error_exits_2_with_one_line(
    private_redis: Callable[..., PrivateRedis], case: str
) -> None:
    _, url = server_and_url(private_redis, case)
    done = run_worker(url)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert SECRET not in output, output
    assert done.returncode == 2, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
