"""The dashboard's Starlette app: routes, the access and CSRF checks, rendering.

Routes (relative to where the app is served or mounted):

- ``GET /`` the overview: per queue and level the counts, throughput and wait times,
  paused queues, live workers; ``GET /dead`` and ``GET /dead/{id}`` dead letters;
  ``GET /delayed`` delayed jobs; ``GET /jobs?id=ID`` a job, ``GET /running`` the running
  jobs, ``GET /queues/{queue}/{level}`` a queue's waiting jobs (see
  :mod:`lockgate.dashboard.jobs`);
  ``GET /flows/{id}`` a flow's state and jobs, ``GET /flows?id=ID`` the way there;
  ``GET /tasks`` the per-task table, ``GET /tasks/{name}`` a task's recent ends (see
  :mod:`lockgate.dashboard.tasks`).
- ``POST /do/{action}`` every change (replay, purge, pause, resume, cancel; see
  :mod:`lockgate.dashboard.actions`): it answers with a confirmation page first, and acts
  only on the confirmation's own POST.
- ``GET /login``, ``POST /login``, ``GET /logout`` (with a token); ``GET /static/{name}``.

See :mod:`lockgate.dashboard.security` for the rules these checks follow, and
:mod:`lockgate.dashboard.throttle` for how many wrong tokens a client may try.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lockgate.api.app import App
from lockgate.core.logs import get_logger
from lockgate.dashboard import jobs, tasks, views
from lockgate.dashboard.actions import ACTIONS, Refused
from lockgate.dashboard.security import (
    LOGIN_MAX_AGE,
    bearer,
    csrf_token,
    csrf_valid,
    derive_key,
    local_request,
    login_cookie,
    login_valid,
    new_secret,
    new_session,
    session_valid,
    token_matches,
)
from lockgate.dashboard.throttle import LoginThrottle, client_key
from lockgate.errors import ConfigError, LockgateError
from lockgate.ops import deadletter, flows
from lockgate.ops.delayed import delayed_jobs

log = get_logger(__name__)
Handler = Callable[[Request], Awaitable[Response]]

LOGIN_COOKIE = "lockgate_dashboard_login"
CSRF_COOKIE = "lockgate_dashboard_csrf"
FLASH_COOKIE = "lockgate_dashboard_flash"
REFRESH_SECONDS = 5  # the live parts of a page are fetched again this often
DEAD_PAGE = 200  # dead letters listed on the dead-letter page, oldest first
DELAYED_PAGE = 200
STATIC = {"dashboard.css": "text/css", "live.js": "text/javascript"}
OPTIONAL_FIELDS = ("level",)
MAX_ID = 256  # a job id or dead letter id longer than this is nobody's
# Sent with every response: no framing (the confirm buttons cannot be clickjacked), no
# script or style from elsewhere, no referrer, nothing cached.
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class _SecurityHeaders:
    """ASGI middleware adding :data:`HEADERS` to every response that does not set them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _ago(moment: float | datetime | None, now: float | None = None) -> str:
    if moment is None:
        return "-"
    stamp = moment.timestamp() if isinstance(moment, datetime) else moment
    return views.duration(max(0.0, (now or time.time()) - stamp)) + " ago"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("lockgate.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(when=views.when, duration=views.duration, ago=_ago, rate=views.rate)
    return env


class Dashboard:
    """The dashboard of one App; :meth:`asgi` is what :func:`create_app` returns."""

    def __init__(self, app: App, token: str | None, read_only: bool) -> None:
        self.app = app
        self.token = token or None
        self.read_only = read_only
        # With a token, made from it and the namespace's secret in Redis (_load_key).
        self.key: bytes | None = derive_key(None) if self.token is None else None
        self._key_lock = asyncio.Lock()
        self.throttle = LoginThrottle()
        self.templates = Jinja2Templates(env=_environment())
        self._static: dict[str, bytes] = {}

    def asgi(self) -> Starlette:
        """The Starlette app serving the dashboard."""
        page = self._page
        routes = [
            Route("/", page(self.overview), name="overview"),
            Route("/dead", page(self.dead), name="dead"),
            Route("/dead/{entry_id:path}", page(self.letter), name="letter"),
            Route("/delayed", page(self.delayed), name="delayed"),
            Route("/tasks", page(partial(tasks.table, self)), name="tasks"),
            Route("/tasks/{name:path}", page(partial(tasks.task, self)), name="task"),
            Route("/jobs", page(partial(jobs.job, self)), name="job"),
            Route("/running", page(partial(jobs.running, self)), name="running"),
            Route("/queues/{queue}/{level}", page(partial(jobs.waiting, self)), name="queue"),
            Route("/flows", page(self.flow_lookup), name="flows"),
            Route("/flows/{flow_id:path}", page(self.flow), name="flow"),
            Route("/do/{action}", page(self.act), methods=["POST"], name="act"),
            Route("/login", self.login_form, name="login"),
            Route("/login", self.login, methods=["POST"], name="login_post"),
            Route("/logout", self.logout, name="logout"),
            Route("/static/{name}", self.static, name="static"),
        ]

        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            await self.app.aclose()  # the async client of the server's loop

        return Starlette(
            routes=routes,
            exception_handlers={LockgateError: self.failed},
            lifespan=lifespan,
            middleware=[Middleware(_SecurityHeaders)],
        )

    # access

    async def _load_key(self) -> bytes:
        """The MAC key (see :func:`~lockgate.dashboard.security.derive_key`), read from
        Redis once.

        Raises:
            LockgateError: Redis could not be reached (a 503 page, as for any page).
        """
        if self.key is None:
            async with self._key_lock:
                if self.key is None:
                    secret_key = self.app.store.keys.dashboard_secret()
                    # Sync, as the pages' reads: a mounted dashboard's lifespan never
                    # runs, so an async client of the server's loop would never be closed.
                    store = self.app.store
                    secret = await run_in_threadpool(store.shared_secret, secret_key, new_secret())
                    self.key = derive_key(self.token, secret)
        return self.key

    async def _refusal(self, request: Request) -> Response | None:
        """None when ``request`` may see the dashboard, else the answer it gets."""
        if self.token is None:
            client = request.client.host if request.client is not None else None
            if local_request(request.headers.get("host"), client):
                return None
            return self._login_page(request, 401)
        key = await self._load_key()
        if login_valid(key, request.cookies.get(LOGIN_COOKIE), time.time()):
            return None
        given = bearer(request.headers.get("authorization"))
        if given is None:
            return self._login_page(request, 401)
        return self._token_refusal(request, given)

    def _token_refusal(self, request: Request, given: str | None) -> Response | None:
        """None when ``given`` is the token; else a 401, or a 429 while the client has
        tried too many wrong ones (then not even the right one is checked)."""
        assert self.token is not None
        held = self._held_back(request)
        if held is not None:
            return held
        if token_matches(self.token, given):
            return None
        client = _client(request)
        self.throttle.failed(client, time.monotonic())
        log.warning("dashboard: a wrong token from %s", client)
        return self._login_page(request, 401, "wrong token")

    def _held_back(self, request: Request) -> Response | None:
        """A 429 while the client may not try a token (see lockgate.dashboard.throttle)."""
        client = _client(request)
        wait = self.throttle.wait(client, time.monotonic())
        if wait <= 0:
            return None
        seconds = math.ceil(wait)
        message = f"too many wrong tokens from {client}: try again in {seconds} s"
        response = self._problem(request, 429, message)
        response.headers["retry-after"] = str(seconds)
        return response

    def _page(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            refused = await self._refusal(request)
            return refused if refused is not None else await handler(request)

        return guarded

    @staticmethod
    def _base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _cookie(self, request: Request, response: Response, name: str, value: str,
                max_age: int | None = None) -> None:  # fmt: skip
        response.set_cookie(
            name, value, max_age=max_age, path=self._base(request) or "/",
            secure=request.url.scheme == "https", httponly=True, samesite="strict",
        )  # fmt: skip

    def _render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        session = request.cookies.get(CSRF_COOKIE)
        fresh = session is None or not session_valid(session)
        if session is None or fresh:
            session = new_session()
        flash = request.cookies.get(FLASH_COOKIE)
        context = {
            "base": self._base(request),
            "read_only": self.read_only,
            "auth": self.token is not None,
            "csrf": csrf_token(self.key, session) if self.key is not None else "",
            "namespace": self.app.namespace,
            "backend": self.app.backend,
            "refresh": REFRESH_SECONDS,
            "flash": unquote(flash) if flash else "",
            "page": name.removesuffix(".html"),
            **context,
        }
        response = self.templates.TemplateResponse(request, name, context, status_code=status)
        if fresh:
            self._cookie(request, response, CSRF_COOKIE, session)
        if flash:
            response.delete_cookie(FLASH_COOKIE, path=self._base(request) or "/")
        return response

    def _problem(self, request: Request, status: int, message: str) -> Response:
        return self._render(request, "problem.html", {"status": status, "message": message},
                            status)  # fmt: skip

    def _login_page(self, request: Request, status: int, error: str = "") -> Response:
        response = self._render(request, "login.html", {"error": error}, status)
        if status == 401:
            response.headers["www-authenticate"] = 'Bearer realm="lockgate dashboard"'
        return response

    async def failed(self, request: Request, error: Exception) -> Response:
        """A lockgate error (Redis unreachable, ...): one line on a 503 page."""
        log.warning("dashboard: %s %s failed: %s", request.method, request.url.path, error)
        return self._problem(request, 503, f"{type(error).__name__}: {error}")

    # pages

    async def overview(self, request: Request) -> Response:
        """Per queue and level: counts, throughput, wait times; paused queues; workers."""
        return self._render(request, "overview.html", {"view": await views.overview(self.app)})

    async def dead(self, request: Request) -> Response:
        """The oldest dead letters, with replay and purge."""
        letters = await run_in_threadpool(deadletter.list_dead, self.app, DEAD_PAGE)
        total = await run_in_threadpool(deadletter.count_dead, self.app)
        tasks = sorted(Counter(letter.task for letter in letters).items())
        return self._render(
            request, "dead.html", {"letters": letters, "total": total, "tasks": tasks}
        )

    async def letter(self, request: Request) -> Response:
        """One dead letter, traceback and stored job included."""
        entry_id = str(request.path_params["entry_id"])[:MAX_ID]
        letter = await run_in_threadpool(deadletter.show_dead, self.app, entry_id)
        if letter is None:
            return self._problem(request, 404, f"no dead letter with id {entry_id!r}")
        return self._render(request, "letter.html", {"letter": letter})

    async def delayed(self, request: Request) -> Response:
        """The delayed jobs due soonest."""
        found = await delayed_jobs(self.app, DELAYED_PAGE, await jobs.queues_now(self.app))
        return self._render(request, "delayed.html", {"jobs": found, "limit": DELAYED_PAGE})

    async def flow_lookup(self, request: Request) -> Response:
        """The flow lookup form; ``?id=`` goes to that flow's page."""
        flow_id = request.query_params.get("id", "").strip()[:MAX_ID]
        if flow_id:
            page = f"{self._base(request)}/flows/{quote(flow_id, safe='')}"
            return RedirectResponse(page, status_code=303)
        return self._render(request, "flow.html", {"flow_id": "", "view": None})

    async def flow(self, request: Request) -> Response:
        """A flow: its state and its jobs, each dead one with its dead letter."""
        flow_id = str(request.path_params["flow_id"])[:MAX_ID]
        if not flow_id:
            return RedirectResponse(f"{self._base(request)}/flows", status_code=303)
        view = await run_in_threadpool(flows.flow_view, self.app, flow_id)
        status = 404 if view.info.state == "unknown" else 200
        return self._render(request, "flow.html", {"flow_id": flow_id, "view": view}, status)

    # actions

    async def act(self, request: Request) -> Response:
        """``POST /do/{action}``: read-only and CSRF checks, confirmation, then the action."""
        if self.read_only:
            return self._problem(request, 403, "the dashboard is read-only")
        async with request.form(max_files=0, max_fields=16, max_part_size=4096) as form:
            values = {k: v for k, v in form.items() if isinstance(v, str)}
        key = await self._load_key()
        if not csrf_valid(key, request.cookies.get(CSRF_COOKIE), values.get("csrf")):
            return self._problem(request, 403, "missing or stale form token: reload the page")
        name = str(request.path_params["action"])
        action = ACTIONS.get(name)
        if action is None:
            return self._problem(request, 404, f"no action {name!r}")
        missing = [field for field in action.fields if not values.get(field)]
        if missing:
            return self._problem(request, 400, f"missing {', '.join(missing)}")
        back = self._back(request, action.back, values)
        try:
            if values.get("confirm") != "yes":
                kept = {f: values[f] for f in (*action.fields, *OPTIONAL_FIELDS) if values.get(f)}
                question = await action.describe(self.app, values)
                context = {"action": name, "question": question, "fields": kept, "back": back}
                return self._render(request, "confirm.html", context)
            message = await action.run(self.app, values)
        except (Refused, ConfigError) as e:  # a queue, level or letter that is not there
            return self._problem(request, 400, str(e))
        log.info("dashboard: %s", message)
        response = RedirectResponse(back, status_code=303)
        self._cookie(request, response, FLASH_COOKIE, quote(message), max_age=60)
        return response

    def _back(self, request: Request, page: str, values: dict[str, str]) -> str:
        base = self._base(request)
        if page == "job":
            return f"{base}/jobs?id={quote(values.get('job_id', ''))}"
        return f"{base}/dead" if page == "dead" else f"{base}/"

    # login

    async def login_form(self, request: Request) -> Response:
        """The login form (a token is set), else the overview."""
        refused = None if self.token is None else await self._refusal(request)
        if refused is None:
            return RedirectResponse(f"{self._base(request)}/", status_code=303)
        return refused if refused.status_code == 429 else self._login_page(request, 200)

    async def login(self, request: Request) -> Response:
        """Check the token of the login form; on success set the login cookie."""
        async with request.form(max_files=0, max_fields=4, max_part_size=4096) as form:
            given, sent_csrf = form.get("token"), form.get("csrf")
        key = await self._load_key()
        # Held back before the CSRF check too: its answer must not depend on a guess.
        held = None if self.token is None else self._held_back(request)
        if held is not None:
            return held
        if not csrf_valid(key, request.cookies.get(CSRF_COOKIE), _str(sent_csrf)):
            return self._problem(request, 403, "missing or stale form token: reload the page")
        if self.token is None:
            return RedirectResponse(f"{self._base(request)}/", status_code=303)
        refused = self._token_refusal(request, _str(given))
        if refused is not None:
            return refused
        response = RedirectResponse(f"{self._base(request)}/", status_code=303)
        value = login_cookie(key, time.time())
        self._cookie(request, response, LOGIN_COOKIE, value, max_age=LOGIN_MAX_AGE)
        return response

    async def logout(self, request: Request) -> Response:
        """Forget the login cookie."""
        response = RedirectResponse(f"{self._base(request)}/login", status_code=303)
        response.delete_cookie(LOGIN_COOKIE, path=self._base(request) or "/")
        return response

    async def static(self, request: Request) -> Response:
        """The stylesheet and the live-refresh script (no secrets: served to anyone)."""
        name = str(request.path_params["name"])
        if name not in STATIC:
            return PlainTextResponse("not found", status_code=404)
        if name not in self._static:
            files = resources.files("lockgate.dashboard") / "static" / name
            self._static[name] = files.read_bytes()
        headers = {"cache-control": "max-age=300"}
        return Response(self._static[name], media_type=STATIC[name], headers=headers)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _client(request: Request) -> str:
    """Whom the request counts as for the wrong-token limit."""
    return client_key(request.client.host) if request.client else "?"


def create_app(app: App, *, token: str | None = None, read_only: bool = False) -> Starlette:
    """The dashboard of ``app`` as an ASGI app, to serve or mount.

    Mount it in FastAPI or Starlette (``api.mount("/jobs", create_app(app, token=...))``)
    or in any ASGI server. With a ``token``, every page needs it: as an ``Authorization:
    Bearer`` header, or once in the login form, which sets a cookie. Every change is a
    POST with a CSRF token and a confirmation step.

    Args:
        app: the App whose queues, workers and dead letters it shows.
        token: the access token; None: no login (serve it on 127.0.0.1 only).
        read_only: show no buttons and refuse every POST but the login form (403).

    Returns:
        The Starlette app.
    """
    return Dashboard(app, token, read_only).asgi()
