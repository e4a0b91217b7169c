"""A tiny JSON-over-HTTPS client on `urllib.request`, mapping failures to the worker's error classes.

Standard library only: the shared layer ships no HTTP wheels. Each call has a timeout, redirects
are never followed (a redirect would re-send the body, and maybe an auth header, elsewhere), and
every failure becomes one of:

- `TransientError`: connection failures, timeouts, HTTP 408, 429 and 5xx. A 429 (or 503) carries
  the remote's wait from the `Retry-After` header or Telegram's `parameters.retry_after`.
- `AccountRefused` (cause "unauthorized"): HTTP 401, the credential refused for every call.
- `PermanentError`: any other non-2xx status, or a URL that cannot work. A client that knows
  what the remote's refusal means raises `RemoteRefused` (a PermanentError with a `kind`), or
  `AccountRefused` when the refusal is of the whole account (a revoked token, unpaid, blocked).

Reasons name the service ("telegram sendMessage"), never the URL, and every secret the client
was given (a bot token in Telegram URLs, a webhook code, an auth header) is replaced by `***`:
reasons end up in logs and in DLQ message attributes. Exceptions are raised `from None` because
a chained urllib exception carries the full URL.
"""

from __future__ import annotations

import http.client
import json
import math
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import UNAUTHORIZED, AccountRefused, PermanentError, RemoteRefused, TransientError

DEFAULT_TIMEOUT_SECONDS = 10.0
# A JSON API answer is small; anything bigger is not parsed (and not kept in memory).
MAX_RESPONSE_BYTES = 1_048_576
REDACTED = "***"
USER_AGENT = "telegram-crm-event-pipeline"
_TRANSIENT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class JsonResponse:
    """A response of any status. `body` is the parsed JSON, or None when empty, too big or not JSON."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Turn every 3xx into an HTTPError instead of following it."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS client context, made once: making one loads the CA store (about 20 ms of
    CPU), which a connection made without a context (`http.client.HTTPSConnection`'s default)
    pays again each time. Not at import: a function that never calls out (the webhook imports
    this through the registry) need not pay it."""
    context = ssl.create_default_context()
    # As `http.client` sets up the context it makes for a connection without one (HTTP/1.1).
    context.set_alpn_protocols(["http/1.1"])
    if context.post_handshake_auth is not None:
        context.post_handshake_auth = True
    return context


@cache
def _opener() -> urllib.request.OpenerDirector:
    """Built by `prepare` or at the first request, with the shared TLS context."""
    return urllib.request.build_opener(_NoRedirects, urllib.request.HTTPSHandler(context=tls_context()))


def prepare() -> None:
    """At the init of a function whose first invocation calls out: build the TLS context and the
    opener then, at the init's full vCPU rather than the invocation's share of one
    (`pipeline.aws.prepare`)."""
    _opener()


def url_secrets(url: str) -> tuple[str, ...]:
    """What to redact of a configured URL: itself, and its path segments and query that may carry a code.

    A remote error message may quote the webhook code alone (`/rest/1/<code>/`), not the URL.
    """
    parts = urlsplit(url)
    pieces = [segment for segment in parts.path.split("/") if len(segment) >= 8]
    return (url, url.rstrip("/"), *pieces, *([parts.query] if parts.query else []))


def retry_after_seconds(response: JsonResponse) -> float | None:
    """The wait the remote asked for: `Retry-After` (seconds or HTTP date), else Telegram's body field."""
    header = response.headers.get("retry-after")
    if header:
        header = header.strip()
        if header.isdigit():
            return float(header)
        try:
            when = parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            return max(0.0, math.ceil(when.timestamp() - time.time()))
    body = response.body
    if isinstance(body, Mapping):
        parameters = body.get("parameters")
        if isinstance(parameters, Mapping):
            value = parameters.get("retry_after")
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return float(value)
    return None


class JsonHttpClient:
    """POST or PATCH JSON to (or GET JSON from) one remote service; `service` names it in every error reason.

    `secrets` are the strings that must never appear in a reason (tokens, auth headers, secret
    URL parts); they are redacted from anything the client builds, including remote messages.
    """

    def __init__(
        self,
        service: str,
        *,
        secrets: Iterable[str] = (),
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.service = service
        self.timeout = timeout
        # Longest first, so a secret containing another is redacted whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    # -- errors ---------------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def transient(self, reason: str, retry_after: float | None = None) -> TransientError:
        return TransientError(self.redact(f"{self.service}: {reason}"), retry_after)

    def permanent(self, reason: str) -> PermanentError:
        return PermanentError(self.redact(f"{self.service}: {reason}"))

    def refused(self, reason: str, kind: str) -> RemoteRefused:
        """A definite refusal of `kind` (see `RemoteRefused`), redacted like `permanent`."""
        return RemoteRefused(self.redact(f"{self.service}: {reason}"), kind)

    def account_refused(self, reason: str, cause: str) -> AccountRefused:
        """The remote refused the whole account (see `AccountRefused`), redacted like `permanent`."""
        return AccountRefused(self.redact(f"{self.service}: {reason}"), cause)

    def check(self, response: JsonResponse, detail: str | None = None) -> JsonResponse:
        """Return a 2xx response; raise the classified error for any other status.

        `detail` is the remote's own explanation (e.g. Telegram's `description`), kept short.
        """
        if response.ok:
            return response
        reason = f"HTTP {response.status}" + (f" {detail[:300]}" if detail else "")
        if response.status in _TRANSIENT_STATUSES or response.status >= 500:
            raise self.transient(reason, retry_after_seconds(response))
        if response.status == 401:
            # The credential, for every call alike: the caller's secret is re-read once
            # (`pipeline.secrets.with_refreshed_secret`), else the worker pauses the record.
            raise self.account_refused(reason, UNAUTHORIZED)
        raise self.permanent(reason)

    # -- requests -------------------------------------------------------------------------------
    def post(self, url: str, payload: Any, headers: Mapping[str, str] | None = None) -> JsonResponse:
        """POST `payload` as JSON and return the response whatever its status.

        Raises TransientError when no response arrived (refused, reset, timed out) and
        PermanentError for a URL that is not http(s).
        """
        return self._json("POST", url, payload, headers)

    def patch(self, url: str, payload: Any, headers: Mapping[str, str] | None = None) -> JsonResponse:
        """PATCH `payload` as JSON (a partial update of what `url` names); as `post` otherwise."""
        return self._json("PATCH", url, payload, headers)

    def _json(self, method: str, url: str, payload: Any, headers: Mapping[str, str] | None) -> JsonResponse:
        self._check_scheme(url)
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        return self._send(method, url, body, {"Content-Type": "application/json", **(headers or {})})

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> JsonResponse:
        """GET `url` (no body) and return the response whatever its status; failures as for `post`."""
        self._check_scheme(url)
        return self._send("GET", url, None, headers or {})

    def _check_scheme(self, url: str) -> None:
        if not url.lower().startswith(("https://", "http://")):
            raise self.permanent("URL must start with https:// (or http:// for a local fake)")

    def _send(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]) -> JsonResponse:
        """One request, redirects refused, answered with any status; TransientError if no answer."""
        request = urllib.request.Request(  # noqa: S310 - scheme checked by _json/get
            url,
            data=body,
            method=method,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT, **headers},
        )
        try:
            with _opener().open(request, timeout=self.timeout) as response:
                return _read(response.status, response.headers, response)
        except urllib.error.HTTPError as error:
            # A non-2xx answer is still an answer: the caller classifies it.
            with error:
                return _read(error.code, error.headers, error)
        except urllib.error.URLError as error:
            cause = error.reason
            name = type(cause).__name__ if isinstance(cause, BaseException) else "URLError"
            raise self.transient(f"connection failed ({name}: {cause})") from None
        except TimeoutError:
            raise self.transient(f"no answer within {self.timeout:g}s") from None
        except (OSError, http.client.HTTPException) as error:
            raise self.transient(f"connection failed ({type(error).__name__}: {error})") from None
        except ValueError as error:  # e.g. an unparsable host or port in a configured URL
            raise self.permanent(f"invalid URL ({type(error).__name__})") from None


def _read(status: int, headers: Any, stream: Any) -> JsonResponse:
    raw = stream.read(MAX_RESPONSE_BYTES + 1) if stream is not None else b""
    body: Any = None
    if raw and len(raw) <= MAX_RESPONSE_BYTES:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    header_map = {str(k).lower(): str(v) for k, v in (headers.items() if headers is not None else [])}
    return JsonResponse(status=status, body=body, headers=header_map)
