"""How many wrong access tokens a client may try (pure: the caller gives the time).

A client (an IP address, as the server sees it) that sent :data:`ATTEMPTS` wrong tokens
within :data:`WINDOW` seconds is refused every token, right or wrong, until the oldest of
them is that old: refusing only wrong ones would tell it when it guessed right. A
browser already logged in is not asked for a token, so it is never held back.

The counts live in the process: a dashboard served by several processes lets each one
count its own. Behind a reverse proxy every client has the proxy's address, so a
guesser holds back everyone's logins (not their sessions) for at most a window.
OWASP's authentication cheat sheet asks for such a limit on any login
(https://cheatsheetseries.owasp.org/cheatsheets/Authentication_Cheat_Sheet.html).
"""

from __future__ import annotations

from collections import OrderedDict, deque

ATTEMPTS = 10
WINDOW = 60.0
# The most clients remembered; the one whose last failure is oldest is forgotten first.
MAX_CLIENTS = 10_000


class LoginThrottle:
    """Wrong-token counts per client over a sliding window."""

    def __init__(
        self, attempts: int = ATTEMPTS, window: float = WINDOW, max_clients: int = MAX_CLIENTS
    ) -> None:
        self.attempts = attempts
        self.window = window
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, client: str, now: float) -> float:
        """Seconds before ``client`` may try a token again; 0 when it may now."""
        failures = self._failures.get(client)
        if failures is None:
            return 0.0
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return 0.0
        if len(failures) < self.attempts:
            return 0.0
        return failures[0] + self.window - now

    def failed(self, client: str, now: float) -> None:
        """Count a wrong token from ``client``."""
        failures = self._failures.pop(client, None)
        if failures is None:
            failures = deque(maxlen=self.attempts)
        failures.append(now)
        self._failures[client] = failures  # last: the most recently failed
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
