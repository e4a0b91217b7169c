"""`python -m ops console`: the ops console, a local web page (Starlette behind uvicorn).

Bound to 127.0.0.1 only. Its URL carries a random access token that works once: the first visit
with it gets a session cookie (HttpOnly, SameSite=Strict) and is sent on without the token in the
address, to a path of this site only (`same_site_path`); a second use of the link is refused. A
request is refused (403) when its Host is not the console's own address (DNS rebinding), without
a session, or, for a POST, when its Origin is another site's or its form lacks the session's
CSRF token. Actions are a GET that shows the command's dry run (its confirmation question),
then a POST that runs the same CLI function with --yes; the lines it prints are the page's
answer and the console's audit trail on stdout.
"""

from __future__ import annotations

import hmac
import re
import secrets
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote

from botocore.exceptions import BotoCoreError, ClientError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ops import broadcast, dlq, journal
from ops.broadcast_texts import TEMPLATES_FILE_NAME
from ops.console import data, events, pages
from ops.console.data import Where
from ops.context import Context
from ops.errors import OpsError
from pipeline.broadcast import MAX_TEXT_LENGTH

SESSION_COOKIE = "ops_console_session"
# The confirm form's one-time field (`Console.used_forms`).
ONCE_FIELD = "once"
DEFAULT_PORT = 8765
# Where a redirect may send the browser: an absolute path of this site, one segment after another
# (no `//host`, no backslash that browsers read as a slash, no control character, no scheme).
_SAME_SITE_PATH = re.compile(r"/(?:[A-Za-z0-9._~!$&'()*+,;=:@%-]+(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*)?")
LANDING_PATH = "/events"
# Layers of %-decoding a redirect's path is checked through; one still encoded deeper is refused.
REDIRECT_DECODINGS = 4
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer Chromium sends `Origin: null` on our own forms.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class Console:
    where: Where
    port: int
    # The login link's token: None once it has been used (the link works once).
    token: str | None = field(default_factory=lambda: secrets.token_urlsafe(24))
    # session id -> its CSRF token
    sessions: dict[str, str] = field(default_factory=dict)
    # The confirm forms already used (their `once` field): a form sent again runs nothing.
    used_forms: set[str] = field(default_factory=set)
    audit: Callable[[str], None] = field(default=lambda line: print(line, flush=True))

    @property
    def origins(self) -> tuple[str, ...]:
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def session(self, request: Request) -> str | None:
        session = request.cookies.get(SESSION_COOKIE, "")
        return self.sessions.get(session) if session else None

    def log_in(self, given: str) -> str | None:
        """A new session id for the login link's token, used up by this call; None when it is
        not the token or the link was used already."""
        token, self.token = self.token, None
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            self.token = token  # a wrong guess does not use the link up
            return None
        session = secrets.token_urlsafe(24)
        self.sessions[session] = secrets.token_urlsafe(24)
        return session


def same_site_path(path: str) -> str:
    """`path` when it is a path of this site whatever decoding a browser or proxy applies to it,
    else the landing page: a redirect never leaves the console (`//evil.example`, `/\\evil`,
    `https://...`, `/%2F%2Fevil.example` and deeper encodings)."""
    decoded = path
    for _ in range(REDIRECT_DECODINGS):
        if not _SAME_SITE_PATH.fullmatch(decoded) or decoded.startswith("//"):
            return LANDING_PATH
        if unquote(decoded) == decoded:
            return LANDING_PATH if path == "/" else path
        decoded = unquote(decoded)
    return LANDING_PATH  # still encoded after every layer checked


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _refuse(reason: str) -> Response:
    return Response(
        f"refused: {reason}\n", status_code=403, media_type="text/plain", headers=SECURITY_HEADERS
    )


def guard(console: Console, app: Any) -> Any:
    """ASGI middleware: Host, token or session, Origin and CSRF token (module docstring)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = Request(scope, receive)
        host = request.headers.get("host", "")
        if f"http://{host}" not in console.origins:
            await _refuse("wrong Host")(scope, receive, send)
            return
        token = request.query_params.get("token")
        if token is not None:
            session = console.log_in(token)
            if session is None:
                await _refuse("wrong or used token: restart the console for a new link")(scope, receive, send)
                return
            response = RedirectResponse(same_site_path(request.url.path), 303)
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        csrf = console.session(request)
        if csrf is None:
            await _refuse("no session: open the URL the console printed")(scope, receive, send)
            return
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin is not None and origin not in console.origins:
                await _refuse("cross-site request")(scope, receive, send)
                return
            form = parse_qs((await request.body()).decode("utf-8", "replace"))
            given = (form.get("csrf") or [""])[0]
            if not hmac.compare_digest(given.encode(), csrf.encode()):
                await _refuse("missing or wrong CSRF token")(scope, receive, send)
                return
            scope["ops_form"] = {k: v[0] for k, v in form.items()}
            body_sent = False

            async def replay() -> dict[str, Any]:
                nonlocal body_sent
                if body_sent:
                    return {"type": "http.disconnect"}
                body_sent = True
                return {"type": "http.request", "body": b"", "more_body": False}

            await app(scope, replay, send)
            return
        await app(scope, receive, send)

    return guarded


def _failure(error: Exception) -> str | None:
    """The one-line message of an error an operator can cause or fix (as the CLI says it)."""
    if isinstance(error, OpsError | ClientError | BotoCoreError):
        return " ".join(str(error).split())
    return None


def build_app(console: Console) -> Any:
    where = console.where

    def view(title: str, active: str, template: str, make: Callable[[], dict[str, Any]]) -> Response:
        """The page `template` with what `make` reads; a failure an operator can fix is the page's
        error line (502)."""
        try:
            context = make()
        except Exception as error:
            message = _failure(error)
            if message is None:
                raise
            return _html(pages.render("error.html", title, where.label, active, message=message), 502)
        return _html(pages.render(template, title, where.label, active, **context))

    def events_page(request: Request) -> Response:
        q = request.query_params
        filters = events.Filters(
            q.get("source", ""), q.get("type", ""), q.get("chat", ""), q.get("order", "")
        )
        return view(
            "Events",
            "/events",
            "events.html",
            lambda: {"paths": data.event_paths(where, filters), "filters": filters},
        )

    def consumers_page(request: Request) -> Response:
        return view("Consumers", "/consumers", "consumers.html", lambda: {"rows": data.consumer_rows(where)})

    def dlqs_page(request: Request) -> Response:
        def read() -> dict[str, Any]:
            stack = where.stack()
            rows = dlq.dlq_rows(stack)
            peeked = {
                r["consumer"]: dlq.peek_messages(stack, r["consumer"], limit=dlq.SQS_BATCH * 5)[1]
                for r in rows
                if r["dlq_depth"] or r["in_flight"]
            }
            return {"rows": rows, "peeked": peeked}

        return view("Dead-letter queues", "/dlqs", "dlqs.html", read)

    def sms_page(request: Request) -> Response:
        order, phone = request.query_params.get("order", ""), request.query_params.get("phone", "")

        def read() -> dict[str, Any]:
            found = data.find_sms(where, order, phone) if order or phone else None
            return {"unknown": data.unknown_sms(where), "found": found, "order": order, "phone": phone}

        return view("SMS journal", "/sms", "sms.html", read)

    def bot_page(request: Request) -> Response:
        chat = request.query_params.get("chat", "")
        return view(
            "Bot conversations",
            "/bot",
            "bot.html",
            lambda: {"chat": chat, "view": data.bot_conversation(where, chat) if chat else None},
        )

    def alarms_page(request: Request) -> Response:
        return view(
            "Alarms", "/alarms", "alarms.html", lambda: {"rows": data.alarm_rows(where), "local": where.local}
        )

    def broadcasts_page(request: Request) -> Response:
        def read() -> dict[str, Any]:
            rows = broadcast.recent(where.context())
            for row in rows:
                created = row.get("created_at")
                row["created"] = (
                    datetime.fromtimestamp(int(created), UTC).isoformat(timespec="seconds")
                    if created
                    else None
                )
            return {
                "rows": rows,
                "max_text": MAX_TEXT_LENGTH,
                "templates_file": TEMPLATES_FILE_NAME,
            }

        return view("Broadcasts", "/broadcasts", "broadcasts.html", read)

    def csrf_of(request: Request) -> str:
        return console.session(request) or ""

    # -- actions: the CLI's functions, a dry run first (the question), then --yes -----------------
    def redrive_options(values: dict[str, str]) -> dict[str, Any]:
        return {
            "consumer": values.get("consumer", ""),
            "message_id": values.get("message_id") or None,
            "timeout": 60.0,
        }

    def resolve_options(values: dict[str, str]) -> dict[str, Any]:
        decision = values.get("decision", "")
        if decision not in pages.DECISIONS:
            raise OpsError(f"no decision {decision!r}: one of {', '.join(pages.DECISIONS)}")
        return {
            "key": values.get("key", ""),
            "accepted": decision == "accepted",
            "not_sent": decision == "not-sent",
            "abandon": decision == "abandon",
        }

    def create_options(values: dict[str, str]) -> dict[str, Any]:
        return {name: values.get(name) or None for name in ("text", "template", "language", "tag", "at")}

    def broadcast_options(values: dict[str, str]) -> dict[str, Any]:
        return {"id": values.get("id", "")}

    actions: dict[str, tuple[Callable[[Context], Any], Callable[[dict[str, str]], dict[str, Any]], str]] = {
        "redrive": (dlq.redrive, redrive_options, "/dlqs"),
        "resolve": (journal.resolve, resolve_options, "/sms"),
        "broadcast-create": (broadcast.create, create_options, "/broadcasts"),
        "broadcast-pause": (broadcast.pause, broadcast_options, "/broadcasts"),
        "broadcast-resume": (broadcast.resume, broadcast_options, "/broadcasts"),
        "broadcast-cancel": (broadcast.cancel, broadcast_options, "/broadcasts"),
    }

    def confirm_page(request: Request) -> Response:
        name = request.path_params["action"]
        if name not in actions:
            return _html("no such action", 404)
        command, options, back = actions[name]
        values = dict(request.query_params)

        def read() -> dict[str, Any]:
            ctx = where.context(**options(values), dry_run=True, yes=False)
            command(ctx)
            return {
                "question": data.output(ctx),
                "path": f"/actions/{name}",
                "csrf": csrf_of(request),
                # A confirmation runs once: a reload or a double click sends nothing twice.
                "fields": {**values, ONCE_FIELD: secrets.token_urlsafe(16)},
                "back": back,
            }

        return view(f"Confirm: {name}", back, "confirm.html", read)

    def action(request: Request) -> Response:
        name = request.path_params["action"]
        if name not in actions:
            return _html("no such action", 404)
        command, options, back = actions[name]
        form = request.scope["ops_form"]
        values = {k: v for k, v in form.items() if k not in ("csrf", "go", ONCE_FIELD)}
        lines: list[str] = []
        error = None
        once = form.get(ONCE_FIELD)
        if once and once in console.used_forms:
            error = "this confirmation was sent before (a reload or a second click): nothing done again"
        else:
            if once:
                console.used_forms.add(once)
            try:
                ctx = where.context(**options(values), dry_run=False, yes=True)
                try:
                    command(ctx)
                finally:
                    lines = data.output(ctx)
            except Exception as failure:
                error = _failure(failure)
                if error is None:
                    raise
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        for line in lines or ["(no output)"]:
            console.audit(f"{stamp} console {name} {data.masked(values)}: {data.masked(line)}")
        if error:
            console.audit(f"{stamp} console {name} {data.masked(values)}: error: {data.masked(error)}")
        title = f"{name}: {'refused' if error else 'done'}"
        return _html(
            pages.render("result.html", title, where.label, back, lines=lines, error=error, back=back)
        )

    def home(request: Request) -> Response:
        return RedirectResponse("/events", 303)

    routes = [
        Route("/", home),
        Route("/events", events_page),
        Route("/consumers", consumers_page),
        Route("/dlqs", dlqs_page),
        Route("/sms", sms_page),
        Route("/bot", bot_page),
        Route("/broadcasts", broadcasts_page),
        Route("/alarms", alarms_page),
        Route("/confirm/{action}", confirm_page),
        Route("/actions/{action}", action, methods=["POST"]),
    ]
    return guard(console, Starlette(routes=routes))


# -- serving ---------------------------------------------------------------------------------------
def listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 only (port 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as error:
        sock.close()
        raise OpsError(
            f"cannot listen on 127.0.0.1:{port} ({error.strerror}): pass --port N (0: any)"
        ) from error
    sock.listen(64)
    return sock


def run(ctx: Context) -> None:
    """The `console` command: serve until Ctrl-C."""
    import uvicorn

    where = Where(bool(ctx.option("local")), ctx.local_file(), ctx.stack_name())
    where.stack()  # a missing stack or state file is said now, not on the first page
    sock = listen(int(ctx.option("port")))
    console = Console(where, sock.getsockname()[1])
    ctx.line(f"ops console for {where.label}: {console.url}")
    ctx.line("bound to 127.0.0.1 only; the token in the URL is the access key (Ctrl-C stops it)")
    sys.stdout.flush()
    server = uvicorn.Server(uvicorn.Config(build_app(console), log_level="warning", lifespan="off"))
    server.run(sockets=[sock])
