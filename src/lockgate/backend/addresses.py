"""Where Redis is: a lockgate Redis URL read into the deployment it names (pure, no I/O).

Forms taken (every one by ``App(redis_url=...)``, ``$LOCKGATE_REDIS_URL`` and ``--url``):

- ``redis://[user:pass@]host[:port][/db][?options]``, ``rediss://`` (TLS), ``unix:///path``:
  one server; whether it is a node of a Redis Cluster is found at the first connection.
- ``redis://host1:7000,host2:7001[?options]``: several seed nodes of one Redis Cluster.
- ``redis+sentinel://[user:pass@]host:26379[,host:port...]/SERVICE[/db][?options]``,
  ``rediss+sentinel://``: the primary that the Sentinels name ``SERVICE``; the user-info is
  the data nodes' (``sentinel_password=`` and ``sentinel_username=`` are the Sentinels').

:func:`masked` hides a URL's secrets wherever one is printed.

Query options (``ssl_ca_certs=``, ``ssl_certfile=``, ``ssl_keyfile=``, ...) apply to every
node. Each node's own URL (:meth:`Address.node_url`) is a plain single-server URL, which
the client library reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, unquote_plus, urlencode

from lockgate.errors import ConfigError

Kind = Literal["server", "seeds", "sentinel", "unix"]
DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")
# Query parameters whose value is a secret: password, ssl_password, token, api_key, ...
SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|credential|auth|(^|_)key$", re.IGNORECASE)


@dataclass(frozen=True)
class Address:
    """A parsed lockgate Redis URL.

    Attributes:
        kind: one server (maybe a cluster node), cluster seeds, Sentinels, or a socket.
        tls: whether connections use TLS (``rediss``).
        hosts: ``(host, port)`` of each server, seed or Sentinel; empty for a socket.
        path: the socket path (``unix``).
        username: the data nodes' ACL user, if any.
        password: the data nodes' password, if any.
        db: the database number, None when the URL names none.
        service: the Sentinel service name (``sentinel`` only).
        options: the query options other than the Sentinels' own.
        sentinel_options: ``sentinel_password`` / ``sentinel_username``, if given.
    """

    kind: Kind
    tls: bool
    hosts: tuple[tuple[str, int], ...]
    path: str = ""
    username: str | None = None
    password: str | None = None
    db: int | None = None
    service: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    sentinel_options: tuple[tuple[str, str], ...] = ()

    def node_url(self, host: str, port: int, *, db: bool = True) -> str:
        """A single-server URL for one node, with this address's credentials and options.

        Args:
            db: keep the database number (a cluster node takes none).
        """
        scheme = "rediss" if self.tls else "redis"
        userinfo = ""
        if self.username is not None or self.password is not None:
            userinfo = quote(self.username or "", safe="")
            if self.password is not None:
                userinfo += ":" + quote(self.password, safe="")
            userinfo += "@"
        netloc = f"[{host}]" if ":" in host else host
        path = f"/{self.db}" if db and self.db is not None else ""
        query = f"?{urlencode(self.options)}" if self.options else ""
        return f"{scheme}://{userinfo}{netloc}:{port}{path}{query}"


def parse_address(url: str) -> Address:
    """Read ``url`` into an :class:`Address`.

    Raises:
        ConfigError: the URL is not one of the forms above (the message names what is
            wrong, never the password).
    """
    scheme, separator, rest = url.partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in ("redis", "rediss", "redis+sentinel", "rediss+sentinel",
                                       "unix"):  # fmt: skip
        raise ConfigError(
            f"a Redis URL starts with redis://, rediss://, redis+sentinel:// or unix://, "
            f"got {scheme + separator if separator else 'no scheme'}"
        )
    rest, _, _fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    options, sentinel_options = _options(query)
    if scheme == "unix":
        return Address("unix", False, (), path=unquote(rest), options=options)
    authority, _, path = rest.partition("/")
    userinfo, at, hostlist = authority.rpartition("@")
    username, password = _credentials(userinfo) if at else (None, None)
    sentinel = scheme.endswith("+sentinel")
    hosts = _hosts(hostlist, DEFAULT_SENTINEL_PORT if sentinel else DEFAULT_PORT)
    segments = [unquote(s) for s in path.split("/") if s]
    service = None
    if sentinel:
        if not segments:
            raise ConfigError(
                "a Sentinel URL names its service: redis+sentinel://host:26379/SERVICE[/db]"
            )
        service, segments = segments[0], segments[1:]
    elif sentinel_options:
        raise ConfigError("sentinel_password and sentinel_username are for redis+sentinel:// URLs")
    if len(segments) > 1:
        shape = "/SERVICE[/db]" if sentinel else "/db"
        raise ConfigError(f"the URL's path is {shape}, got /{path}")
    kind: Kind = "sentinel" if sentinel else "seeds" if len(hosts) > 1 else "server"
    return Address(
        kind,
        tls=scheme.startswith("rediss"),
        hosts=hosts,
        username=username,
        password=password,
        db=_db(segments[0]) if segments else None,
        service=service,
        options=options,
        sentinel_options=sentinel_options,
    )


def _options(query: str) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    pairs = parse_qsl(query, keep_blank_values=True)
    own = tuple((k, v) for k, v in pairs if k not in SENTINEL_OPTIONS)
    sentinels = tuple((k, v) for k, v in pairs if k in SENTINEL_OPTIONS)
    return own, sentinels


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    # A lone user-info (redis://name@host) is a user name, as redis-py reads it.
    user, colon, password = userinfo.partition(":")
    return unquote(user) or None, unquote(password) if colon else None


def _hosts(hostlist: str, default_port: int) -> tuple[tuple[str, int], ...]:
    if not hostlist:
        return (("localhost", default_port),)
    hosts: list[tuple[str, int]] = []
    for item in hostlist.split(","):
        item = item.strip()
        if not item:
            raise ConfigError("an empty host in the URL's host list")
        hosts.append(_host_port(item, default_port))
    return tuple(hosts)


def _host_port(item: str, default_port: int) -> tuple[str, int]:
    if item.startswith("["):  # [::1]:7000
        host, _, tail = item[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, colon, port_text = item.rpartition(":")
        if not colon:
            host, port_text = item, ""
    if not port_text:
        return unquote(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"invalid port {port_text!r} for host {host!r}")
    return unquote(host), int(port_text)


def _db(segment: str) -> int:
    if not segment.isdigit():
        raise ConfigError(f"the database number must be a whole number, got {segment!r}")
    return int(segment)


def masked(url: str) -> str:
    """The URL with its secrets replaced by ``***``, for messages and logs.

    Masked: the password of the user-info (``redis://user:pw@host``) and the value of each
    query parameter whose name says secret (``?password=``, ``ssl_password=``, ``token=``,
    ...). Everything else is kept as written. Never raises, even on a malformed URL.
    """
    scheme, separator, rest = url.partition("://")
    if separator:
        # The user-info ends at the last "@" before the path, as urllib reads it; a
        # password with an unescaped "?" or "#" is masked too (urllib would cut it short).
        authority, slash, path = rest.partition("/")
        userinfo, at, host = authority.rpartition("@")
        if at and ":" in userinfo:
            user = userinfo.partition(":")[0]
            url = f"{scheme}://{user}:***@{host}{slash}{path}"
    head, question, query = url.partition("?")
    if not question:
        return url
    query, hash_, fragment = query.partition("#")
    query = "&".join(_masked_parameter(parameter) for parameter in query.split("&"))
    return f"{head}?{query}{hash_}{fragment}"


def _masked_parameter(parameter: str) -> str:
    name, equals, _ = parameter.partition("=")
    if equals and SECRET_PARAMETER.search(unquote_plus(name)):
        return f"{name}=***"
    return parameter
