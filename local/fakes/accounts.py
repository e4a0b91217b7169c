"""The account switch the vendor stand-ins share: refuse the whole account, rotate the credential.

A real account can stop working for everyone at once (amoCRM's 402 when the subscription ends,
a Bitrix24 portal on a plan without REST, a revoked bot token, an SMS gateway out of balance);
a test or the chaos campaign rehearses that, over HTTP or in process:

    POST /_account/block {"cause": "<cause>"}    every API call gets the vendor's answer for it
    POST /_account/unblock                       calls are answered again
    POST /_credential/rotate {"value": "<new>"}  only the new token / webhook code is accepted

Each stand-in names its causes and their answers (`refusals`: the vendor's documented status and
body) and how it rotates its credential; `GET /_account/switch` shows the state. A control body
it cannot follow is 400 with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from local.fakes.base import FakeRequest, FakeResponse


class AccountSwitch:
    """One stand-in's account state: `refusal()` is the answer to give every API call, or None."""

    def __init__(
        self, refusals: Mapping[str, Callable[[], FakeResponse]], rotate: Callable[[str], None]
    ) -> None:
        self.refusals = dict(refusals)
        self._rotate = rotate
        self._lock = threading.Lock()
        self.cause: str | None = None

    def block(self, cause: str) -> None:
        if cause not in self.refusals:
            raise ValueError(f"cause must be one of {sorted(self.refusals)}")
        with self._lock:
            self.cause = cause

    def unblock(self) -> None:
        with self._lock:
            self.cause = None

    def rotate(self, value: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("value must be the new credential, a non-empty string")
        with self._lock:
            self._rotate(value)

    def refusal(self) -> FakeResponse | None:
        with self._lock:
            cause = self.cause
        return None if cause is None else self.refusals[cause]()

    def state(self) -> dict[str, Any]:
        return {"blocked": self.cause, "causes": sorted(self.refusals)}

    def control(self, request: FakeRequest) -> FakeResponse | None:
        """The answer to one of the switch's routes, or None for another route."""
        route = (request.method, request.path)
        try:
            if route == ("GET", "/_account/switch"):
                return FakeResponse(200, self.state())
            if route == ("POST", "/_account/block"):
                self.block(_field(request, "cause"))
                return FakeResponse(200, self.state())
            if route == ("POST", "/_account/unblock"):
                self.unblock()
                return FakeResponse(200, self.state())
            if route == ("POST", "/_credential/rotate"):
                self.rotate(_field(request, "value"))
                return FakeResponse(200, {"rotated": True})
        except ValueError as error:
            return FakeResponse(400, {"error": str(error)})
        return None


def _field(request: FakeRequest, name: str) -> Any:
    try:
        document = request.json()
    except ValueError:
        raise ValueError("the body must be a JSON object") from None
    if not isinstance(document, dict) or name not in document:
        raise ValueError(f'the body must be a JSON object with "{name}"')
    return document[name]
