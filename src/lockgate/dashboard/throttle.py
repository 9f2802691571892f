"""How many wrong access tokens a client may try (pure: the caller gives the time).

A client (an IP address as the server sees it; for IPv6, its /64) that sent
:data:`ATTEMPTS` wrong tokens within :data:`WINDOW` seconds is refused every token, right
or wrong, until the oldest of them is that old: refusing only wrong ones would tell it
when it guessed right. Refused tries are not counted, so a guesser who tries again as
soon as it may keeps its address held back. A browser already logged in is not asked
for a token, so it is never held back.

The counts live in the process: a dashboard served by several processes lets each one
count its own. Clients that share an address (a NAT, a proxy that does not pass the
client's address on) share the count: while a guesser there keeps trying, their logins
(not their sessions) are held back too. OWASP's authentication cheat sheet asks for
such a limit on any login
(https://cheatsheetseries.owasp.org/cheatsheets/Authentication_Cheat_Sheet.html).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict, deque

ATTEMPTS = 10
WINDOW = 60.0
# The most clients remembered; the one whose last failure is oldest is forgotten first.
MAX_CLIENTS = 10_000


def client_key(address: str) -> str:
    """Whom a client address counts as: itself, or for IPv6 its /64 network (as a rule
    one subscriber's: each of its addresses must not count as a fresh client)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


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
