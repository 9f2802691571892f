"""The dashboard's access rules, as pure functions (no I/O, no web framework).

- Binding: on a loopback address the dashboard may run without a token; on any other
  address it refuses to start without one (:func:`bind_refusal`).
- Access token: with a token set, a request must carry it, as ``Authorization: Bearer
  TOKEN`` (scripts) or as the login cookie the login form sets (browsers). The cookie holds
  no token: it is ``ISSUED.MAC`` (the MAC keyed by :func:`derive_key`), valid for
  :data:`LOGIN_MAX_AGE` seconds. The token never goes in a URL, so it never reaches an
  access log; :func:`scrub` still removes a ``token=`` that someone typed into one.
- CSRF: every POST carries a token that is the HMAC of the browser's random CSRF cookie
  under the dashboard's key. A page of another site can neither read that cookie nor
  compute the MAC, so it cannot forge the form.

Comparisons of secrets are constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets

# Seconds the login cookie stays valid after the login form was sent.
LOGIN_MAX_AGE = 12 * 3600
# The namespace's dashboard secret (see derive_key).
SECRET_BYTES = 32
# A CSRF cookie is 32 bytes of randomness, base64url (43 characters).
SESSION_BYTES = 32
_SESSION = re.compile(r"^[A-Za-z0-9_-]{43}$")
_TOKEN_IN_QUERY = re.compile(r"(?i)((?:^|[?&;])[^=&;\s]*token=)[^&;\s\"]*")


def derive_key(token: str | None, secret: bytes = b"") -> bytes:
    """The key of the dashboard's MACs (login cookie, CSRF tokens).

    With a token: derived from it and from ``secret``, random bytes the namespace keeps
    in Redis, so every process serving the same token accepts each other's cookies and
    forms, and nobody who only sees a page can test guesses of the token against its
    CSRF token (a key of the token alone let a 4-digit token fall offline from one
    anonymous login page). Without a token: a random key of this process.
    """
    if token is None:
        return secrets.token_bytes(32)
    return hmac.new(secret, b"lockgate-dashboard-key\x00" + token.encode(), hashlib.sha256).digest()


def new_secret() -> bytes:
    """Random bytes for :func:`derive_key`'s ``secret``."""
    return secrets.token_bytes(SECRET_BYTES)


def _mac(key: bytes, purpose: str, value: str) -> str:
    message = f"{purpose}\x00{value}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def token_matches(expected: str, given: str | None) -> bool:
    """Whether ``given`` is the access token (constant-time)."""
    if given is None:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header value, else None."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def login_cookie(key: bytes, now: float) -> str:
    """The login cookie's value for a login at Unix time ``now``: ``ISSUED.MAC``."""
    issued = str(int(now))
    return f"{issued}.{_mac(key, 'login', issued)}"


def login_valid(key: bytes, value: str | None, now: float, max_age: float = LOGIN_MAX_AGE) -> bool:
    """Whether a login cookie's value was made with ``key`` and is younger than ``max_age``."""
    if not value:
        return False
    issued, _, mac = value.partition(".")
    if not issued.isdigit() or not hmac.compare_digest(mac, _mac(key, "login", issued)):
        return False
    return 0 <= now - int(issued) <= max_age


def new_session() -> str:
    """A fresh random value for a browser's CSRF cookie."""
    return secrets.token_urlsafe(SESSION_BYTES)


def session_valid(session: str | None) -> bool:
    """Whether a CSRF cookie's value has the shape :func:`new_session` gives."""
    return session is not None and _SESSION.match(session) is not None


def csrf_token(key: bytes, session: str) -> str:
    """The CSRF token of the forms shown to the browser whose CSRF cookie is ``session``."""
    return _mac(key, "csrf", session)


def csrf_valid(key: bytes, session: str | None, given: str | None) -> bool:
    """Whether a form's CSRF token ``given`` fits the browser's CSRF cookie (constant-time)."""
    if session is None or not session_valid(session) or not given:
        return False
    return hmac.compare_digest(given.encode(), csrf_token(key, session).encode())


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (127.0.0.0/8, ::1, ``localhost``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_of(header: str | None) -> str:
    """The host name of an HTTP ``Host`` header (its port, if any, dropped)."""
    value = (header or "").strip()
    if value.startswith("["):  # [::1]:8700
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def local_request(host_header: str | None, client: str | None) -> bool:
    """Whether a request came from this machine and named it: the only requests a
    dashboard without a token serves. A page elsewhere that the operator opens cannot
    reach it through DNS rebinding (its Host names another site), and a dashboard
    mounted in a public app without a token serves no one from outside."""
    return is_loopback(host_of(host_header)) and client is not None and is_loopback(client)


def bind_refusal(host: str, token: str | None) -> str | None:
    """Why the dashboard must not start on ``host``, or None when it may.

    Returns:
        One line for a non-loopback ``host`` without a token; None otherwise.
    """
    if token or is_loopback(host):
        return None
    return (
        f"refusing to serve the dashboard on {host} without a token: "
        "pass --token or set $LOCKGATE_DASHBOARD_TOKEN (or bind to 127.0.0.1)"
    )


def scrub(text: str) -> str:
    """``text`` with the value of every ``...token=`` query parameter replaced by ``***``."""
    return _TOKEN_IN_QUERY.sub(r"\1***", text)
