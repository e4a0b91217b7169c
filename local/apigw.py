"""API Gateway HTTP API, played locally in front of the webhook function.

`http_api_event()` turns an HTTP request into the payload format 2.0 event API Gateway sends a
Lambda proxy integration; `http_response()` turns the function's result back into an HTTP
answer by the same rules (a result without `statusCode` is a 200 JSON body; a failed invocation
is 500, a timed-out one 503). `python -m local.apigw` serves the routes on loopback from the
webhook function's own process, whose environment is the function's Lambda environment.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Any

from local.http_handler import AnyMethodHandler
from local.lambda_host import (
    ACCOUNT_ID,
    EXIT_STOPPED,
    EXIT_TIMED_OUT,
    FunctionHost,
    StatusChannel,
    Stopper,
    exit_now,
    quiet_interrupts,
)
from pipeline.crm.forms import MAX_BODY_BYTES

EXIT_CANNOT_LISTEN = 2
# The routes every deployment's HTTP API has; the runtime passes the deployment's own
# (`infra.environment.webhook_routes`, what the stack creates) with `--route`.
ROUTES: tuple[str, ...] = ("POST /telegram/webhook", "POST /crm/events", "POST /crm/events/{token}")
API_ID = "local"
STAGE = "$default"
# API Gateway limits: 10 MB payload (the bound the webhook's form readers apply too), 30 s
# integration timeout.
MAX_PAYLOAD_BYTES = MAX_BODY_BYTES
INTEGRATION_TIMEOUT_SECONDS = 30.0
# Content types API Gateway passes as text; any other body arrives base64-encoded.
_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/xml",
    "application/x-www-form-urlencoded",
    "+json",
    "+xml",
)


def match_route(method: str, path: str, routes: Iterable[str] = ROUTES) -> str | None:
    """The route key `method path` matches, as API Gateway matches it: exact routes first, then
    routes with `{name}` segments (one non-empty segment each)."""
    matched = route_match(method, path, routes)
    return matched[0] if matched else None


def route_match(method: str, path: str, routes: Iterable[str] = ROUTES) -> tuple[str, dict[str, str]] | None:
    """The route key and its path parameters (URL-decoded, as API Gateway gives them), or None."""
    routes = tuple(routes)
    route_key = f"{method.upper()} {path}"
    if route_key in routes:
        return route_key, {}
    segments = path.split("/")
    for route in routes:
        route_method, _, template = route.partition(" ")
        parts = template.split("/")
        if route_method != method.upper() or len(parts) != len(segments):
            continue
        parameters: dict[str, str] = {}
        for part, segment in zip(parts, segments, strict=True):
            if part.startswith("{") and part.endswith("}") and segment:
                parameters[part[1:-1]] = urllib.parse.unquote(segment)
            elif part != segment:
                break
        else:
            if parameters:
                return route, parameters
    return None


def _is_text(content_type: str | None) -> bool:
    return bool(content_type) and any(marker in content_type.lower() for marker in _TEXT_TYPES)  # type: ignore[union-attr]


def http_api_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    route_key: str,
    path_parameters: dict[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    domain_name: str = "127.0.0.1",
    protocol: str = "HTTP/1.1",
    request_id: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The payload format 2.0 event for one request (headers lowercased, repeats comma-joined)."""
    now = time.time() if now is None else now
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        merged[lowered] = f"{merged[lowered]},{value}" if lowered in merged else value
    merged.setdefault("x-forwarded-for", source_ip)
    merged.setdefault("x-forwarded-proto", "http")
    merged.setdefault("x-amzn-trace-id", f"Root=1-{int(now):08x}-{uuid.uuid4().hex[:24]}")
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": merged,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": API_ID,
            "domainName": domain_name,
            "domainPrefix": domain_name.split(".", 1)[0],
            "http": {
                "method": method.upper(),
                "path": raw_path,
                "protocol": protocol,
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": request_id or _request_id(),
            "routeKey": route_key,
            "stage": STAGE,
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if raw_query:
        query: dict[str, str] = {}
        for name, value in urllib.parse.parse_qsl(raw_query, keep_blank_values=True):
            query[name] = f"{query[name]},{value}" if name in query else value
        event["queryStringParameters"] = query
    if body:
        text = _decode_text(body) if _is_text(merged.get("content-type")) else None
        if text is None:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
    return event


def _decode_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _request_id() -> str:
    # API Gateway request ids look like "JKJaXmPLvHcESHA=": 14 base64 characters.
    return base64.b64encode(uuid.uuid4().bytes[:10]).decode()


def json_response(status: int, document: Any) -> tuple[int, dict[str, str], bytes]:
    return status, {"content-type": "application/json"}, json.dumps(document).encode()


def http_response(result: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body API Gateway answers for a function's result (format 2.0 rules)."""
    if not isinstance(result, dict) or "statusCode" not in result:
        return json_response(200, result)
    try:
        status = int(result["statusCode"])
    except (TypeError, ValueError):
        return json_response(500, {"message": "Internal Server Error"})
    headers = {str(name).lower(): str(value) for name, value in (result.get("headers") or {}).items()}
    body = result.get("body")
    if body is None:
        payload = b""
    elif result.get("isBase64Encoded"):
        payload = base64.b64decode(str(body))
    else:
        payload = (body if isinstance(body, str) else json.dumps(body)).encode()
    cookies = result.get("cookies") or []
    if cookies:
        headers["set-cookie"] = ", ".join(str(cookie) for cookie in cookies)
    return status, headers, payload


class ApiServer(ThreadingHTTPServer):
    """The HTTP API in front of one function host; requests run one at a time like one environment."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        host: FunctionHost,
        status: StatusChannel,
        stopper: Stopper,
        routes: tuple[str, ...] = ROUTES,
    ) -> None:
        super().__init__(address, _ApiHandler)
        self.routes = routes
        self.function = host
        self.status = status
        self.stopper = stopper
        self._load_lock = threading.Lock()
        self._state: tuple[str, str | None] | None = None

    def try_load(self) -> bool:
        """(Re)load the handler: a missing or failing one is retried per request, as Lambda retries init."""
        with self._load_lock:
            if self.function.handler is not None:
                return True
            state = self.function.load()
            if state != self._state:
                self.status.send("state", state=state[0], detail=state[1])
                self._state = state
            return state[0] == "ready"


class _ApiHandler(AnyMethodHandler):
    server: ApiServer
    server_version = "LocalApiGateway/1.0"
    protocol_version = "HTTP/1.1"
    error_content_type = "application/json"
    error_message_format = '{"message":"%(message)s"}'

    # The matched route key ("-" before or without a match), logged instead of the request line:
    # a path may carry the CRM token (`POST /crm/events/{token}`), as in the stack's access log.
    route_key = "-"

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.address_string()} {format % args}", file=sys.stderr, flush=True)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = code.value if isinstance(code, HTTPStatus) else code
        self.log_message('"%s" %s %s', self.route_key, str(status), str(size))

    def _serve(self) -> None:
        self.route_key = "-"
        parsed = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_PAYLOAD_BYTES:
            self._answer(*json_response(413, {"message": "Request Entity Too Large"}))
            self.close_connection = True
            return
        body = self.rfile.read(length) if length > 0 else b""
        matched = route_match(self.command, parsed.path, self.server.routes)
        if matched is None:
            self._answer(*json_response(404, {"message": "Not Found"}))
            return
        route_key, path_parameters = matched
        self.route_key = route_key
        event = http_api_event(
            method=self.command,
            raw_path=parsed.path,
            raw_query=parsed.query,
            headers=self.headers.items(),
            body=body,
            route_key=route_key,
            path_parameters=path_parameters,
            source_ip=self.client_address[0],
            domain_name=self.headers.get("Host", "127.0.0.1").split(":", 1)[0],
            protocol=self.request_version,
        )
        function = self.server.function
        if function.handler is None and not self.server.try_load():
            # Lambda answers an invocation whose init failed with an error: API Gateway says 500.
            self._answer(*json_response(500, {"message": "Internal Server Error"}))
            return
        self.server.status.send("busy", records=1)
        invocation = function.invoke(event)
        if invocation.timed_out:
            answer = json_response(503, {"message": "Service Unavailable"})
        elif invocation.error is not None:
            answer = json_response(500, {"message": "Internal Server Error"})
        else:
            answer = http_response(invocation.result)
        status, headers, payload = answer
        headers["apigw-requestid"] = event["requestContext"]["requestId"]
        self._answer(status, headers, payload)
        self.server.status.send(
            "invocation",
            records=1,
            failed=0 if invocation.ok and status < 500 else 1,
            outcomes=None,
            status=status,
            error=invocation.error,
            timed_out=invocation.timed_out,
            duration_ms=invocation.duration_ms,
            **invocation.work(),
        )
        if invocation.timed_out:
            # The environment is discarded; the parent starts a fresh one on the same port.
            exit_now(EXIT_TIMED_OUT)

    def _answer(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name not in ("content-length", "connection", "date"):
                self.send_header(name, value)
        self.send_header("Date", formatdate(usegmt=True))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.apigw")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--handler", default="webhook.app.lambda_handler")
    parser.add_argument("--function-name", default="webhook")
    parser.add_argument("--timeout", type=float, default=10)
    parser.add_argument("--memory", type=int, default=256)
    parser.add_argument("--status-fd", type=int)
    parser.add_argument(
        "--route", action="append", dest="routes", help="a route key `POST /path` (default: ROUTES)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stopper = Stopper()
    status = StatusChannel(args.status_fd)
    host = FunctionHost(
        args.handler,
        args.function_name,
        min(args.timeout, INTEGRATION_TIMEOUT_SECONDS),
        args.memory,
        status=status,
    )
    try:
        server = ApiServer((args.host, args.port), host, status, stopper, tuple(args.routes or ROUTES))
    except OSError as error:
        status.send(
            "state", state="init error", detail=f"cannot listen on {args.host}:{args.port}: {error.strerror}"
        )
        return EXIT_CANNOT_LISTEN
    server.try_load()
    server.timeout = 0.2
    status.send("listening", port=server.server_address[1])
    while not stopper.stopping:
        server.handle_request()
    server.server_close()
    return EXIT_STOPPED


if __name__ == "__main__":
    with quiet_interrupts():
        exit_now(main())
