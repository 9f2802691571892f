"""A web dashboard for a lockgate App (the ``dashboard`` extra).

``create_app(app, token=..., read_only=...)`` returns an ASGI app to serve
(``lockgate dashboard MODULE:APP``) or to mount in FastAPI, Starlette or Django (ASGI).
Without the extra, importing this package raises
[MissingExtra][lockgate.MissingExtra] naming it.
"""

from lockgate.errors import MissingExtra

try:
    import jinja2  # noqa: F401
    import python_multipart  # noqa: F401
    import starlette  # noqa: F401
except ImportError as e:  # a core install: these come with the dashboard extra
    raise MissingExtra("lockgate.dashboard", "dashboard", e.name or "starlette") from e

from lockgate.dashboard.web import create_app

__all__ = ["create_app"]
