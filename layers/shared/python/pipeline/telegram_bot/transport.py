"""The bot's Bot API transport: python-telegram-bot's `BaseRequest` over urllib3.

PTB's own `HTTPXRequest` sends with httpx's async client, which loads httpcore, h11 and anyio's
asyncio backend (about 31 ms of the bot's cold path, 0.23x of `import boto3`: docs/perf.md) and
reads the CA store into a TLS context of its own. urllib3 is in the process already (botocore
sends every AWS call with it), and so is the process's TLS context (`pipeline.http.tls_context`).
A call runs in the event loop's default executor, a thread (with the caller's context), so a
handler's concurrent calls still overlap; the pool keeps its connections to the Bot API open
across updates, as httpx's did.

As `HTTPXRequest` does: no retries (a resend is the journal's decision,
`pipeline.telegram_bot.calls`), no redirects, the same default timeouts and their resolution (a
call with files gets `media_write_timeout` for its write), the parameters form-encoded, or
multipart with the files; a full pool waits `pool_timeout`, then `TimedOut` and nothing sent; a
timeout is `TimedOut`, any other transport failure `NetworkError`. One difference: urllib3 bounds
connecting and sending the body by one socket timeout, the larger of the connect and write timeouts.
It uses what urllib3 1.26 and 2.x both have: Lambda's runtime brings botocore's, either line (the
tests of tests/unit/consumers/test_bot_transport.py pass with 1.26.20 as with the pinned 2.x).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import urllib3
from telegram._utils.defaultvalue import DefaultValue  # what PTB passes for a timeout left unset
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData
from urllib3.exceptions import EmptyPoolError, HTTPError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from pipeline.http import tls_context

if TYPE_CHECKING:
    from telegram._utils.types import ODVInput

# What `HTTPXRequest` defaults to (python-telegram-bot 22).
READ_TIMEOUT_SECONDS = 5.0
WRITE_TIMEOUT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 5.0
POOL_TIMEOUT_SECONDS = 1.0
MEDIA_WRITE_TIMEOUT_SECONDS = 20.0
CONNECTION_POOL_SIZE = 256
POOL_FULL = (
    "Pool timeout: All connections in the connection pool are occupied. Request was *not* sent "
    "to Telegram. Consider adjusting the connection pool size or the pool timeout."
)

ResponseHook = Callable[[Mapping[str, str]], None]


class PooledRequest(BaseRequest):
    """A `BaseRequest` sending each call through one urllib3 pool (module docstring).

    `on_response` sees each answer's headers before it is returned (the local runtime's crash
    hooks, `pipeline.telegram_bot.calls.crash_hook`)."""

    def __init__(
        self,
        connection_pool_size: int = CONNECTION_POOL_SIZE,
        read_timeout: float | None = READ_TIMEOUT_SECONDS,
        write_timeout: float | None = WRITE_TIMEOUT_SECONDS,
        connect_timeout: float | None = CONNECT_TIMEOUT_SECONDS,
        pool_timeout: float | None = POOL_TIMEOUT_SECONDS,
        media_write_timeout: float | None = MEDIA_WRITE_TIMEOUT_SECONDS,
        on_response: ResponseHook | None = None,
    ) -> None:
        self._timeouts = {
            "read": read_timeout,
            "write": write_timeout,
            "connect": connect_timeout,
            "pool": pool_timeout,
        }
        self._media_write_timeout = media_write_timeout
        self._on_response = on_response
        # block=True: a full pool waits for a connection instead of opening one more, as httpx's limit.
        self._pool = urllib3.PoolManager(
            num_pools=1, maxsize=connection_pool_size, block=True, ssl_context=tls_context()
        )

    @property
    def read_timeout(self) -> float | None:
        return self._timeouts["read"]

    async def initialize(self) -> None:
        """Nothing to open: the pool connects at the first call."""

    async def shutdown(self) -> None:
        self._pool.clear()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        files = request_data.multipart_data if request_data is not None else {}
        write = self._given(write_timeout, "write")
        if files and isinstance(write_timeout, DefaultValue):
            write = self._media_write_timeout
        read, connect = self._given(read_timeout, "read"), self._given(connect_timeout, "connect")
        body, content_type = _encoded(request_data, files)
        headers = {"User-Agent": self.USER_AGENT}
        if content_type is not None:
            headers["Content-Type"] = content_type
        timeout = urllib3.Timeout(connect=_larger(connect, write), read=read)
        # In the loop's default executor, with the caller's context (the journal's step).
        return await asyncio.to_thread(
            self._send, method, url, body, headers, timeout, self._given(pool_timeout, "pool")
        )

    def _given(self, value: ODVInput[float], name: str) -> float | None:
        """The call's timeout, or this request's default when the call left it to the default."""
        if isinstance(value, DefaultValue):
            return self._timeouts[name]
        return value

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
        pool_timeout: float | None,
    ) -> tuple[int, bytes]:
        try:
            response = self._pool.urlopen(
                method,
                url,
                body=body,
                headers=headers,
                retries=False,
                redirect=False,
                timeout=timeout,
                pool_timeout=pool_timeout,
                preload_content=True,
            )
        except EmptyPoolError as error:
            raise TimedOut(POOL_FULL) from error
        except NewConnectionError as error:  # a ConnectTimeoutError to urllib3, a ConnectError to httpx
            raise NetworkError(f"urllib3.{type(error).__name__}: {error}") from error
        except Urllib3Timeout as error:
            raise TimedOut from error
        except HTTPError as error:
            # The class name first: some of urllib3's errors have an empty message.
            raise NetworkError(f"urllib3.{type(error).__name__}: {error}") from error
        if self._on_response is not None:
            self._on_response(response.headers)
        return response.status, response.data


def _larger(first: float | None, second: float | None) -> float | None:
    if first is None or second is None:
        return None  # no bound on one of them: no bound on the socket
    return max(first, second)


def _encoded(request_data: RequestData | None, files: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    """The body and its content type, as httpx encoded `data=json_parameters, files=multipart_data`."""
    if request_data is None:
        return None, None
    if not files:
        return request_data.url_encoded_parameters().encode(), "application/x-www-form-urlencoded"
    fields: list[tuple[str, Any]] = list(request_data.json_parameters.items())
    for name, (filename, content, mimetype) in files.items():
        data = content.read() if hasattr(content, "read") else content
        fields.append((name, (filename, data, mimetype)))
    body, content_type = urllib3.encode_multipart_formdata(fields)
    return body, content_type
