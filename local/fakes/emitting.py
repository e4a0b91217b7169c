"""What the CRM stand-ins that send webhooks to the pipeline share (`bitrix24`, `amocrm`).

- `WebhookDelivery`: the pipeline's answer to one emitted webhook (or why it could not be
  reached), which each stand-in's `Delivery` extends with what the webhook carried;
- `php_form`: a form body encoded the way PHP's `http_build_query` encodes it, which is what
  Bitrix24 and amoCRM send (`data%5BFIELDS%5D%5BID%5D=759`, spaces as `+`);
- `post_form`: one synchronous POST of such a body, with a short timeout;
- a small `Clock` whose seconds always advance between two changes, so "modified" and "moved"
  times differ between two calls made within the same second, as they would between two edits
  by a person;
- `EmittingFake`, their base: where the webhooks go (`handler_url`), the API credential a
  control endpoint revokes and restores, and the control endpoints' answers to what they raise
  (400, 404, 409);
- the checks the control endpoints make of their JSON bodies (`ControlInputError` -> 400).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from local.fakes.base import FakeRequest, FakeResponse, FakeService

EMIT_TIMEOUT_SECONDS = 5.0
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
MAX_ANSWER_BYTES = 1024 * 1024


class NoHandlerError(RuntimeError):
    """The stand-in was asked to emit a webhook before it was told where to send it."""


class ControlInputError(ValueError):
    """A control endpoint's body this stand-in cannot follow; the message says what is wrong."""


@dataclass(frozen=True)
class WebhookDelivery:
    """One emitted webhook and the pipeline's answer to it (each stand-in adds what it carried).

    `status` is the HTTP status the handler answered (None, with `error`, when it could not be
    reached or did not answer); `body` its answer (JSON when it is JSON, else text); `payload`
    the form body exactly as sent.
    """

    status: int | None
    body: Any
    error: str | None
    event: str
    payload: str = field(default="", kw_only=True)

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the control endpoints' answers."""
        return {
            item.name: list(value) if isinstance(value, tuple) else value
            for item in fields(self)
            for value in [getattr(self, item.name)]
        }


def php_quote(value: str) -> str:
    """PHP's `urlencode`: everything but letters, digits and `-_.` percent-encoded, spaces as `+`."""
    return urllib.parse.quote_plus(value, safe="").replace("~", "%7E")


def php_form(pairs: Iterable[tuple[str, object]]) -> str:
    """`key=value&...` in the given order, as `http_build_query` writes a nested PHP array."""
    return "&".join(f"{php_quote(key)}={php_quote(_scalar(value))}" for key, value in pairs)


def _scalar(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def post_form(
    url: str, payload: str, headers: Mapping[str, str], timeout: float | None = None
) -> tuple[int | None, Any, str | None]:
    """POST a form body; returns (status, answer, error). Never raises for the handler's failures.

    `timeout` defaults to `EMIT_TIMEOUT_SECONDS`: a handler that hangs costs the caller that long.
    """
    request = urllib.request.Request(  # noqa: S310 - the handler URL the runtime or a test configured
        url,
        data=payload.encode(),
        method="POST",
        headers={"Content-Type": FORM_CONTENT_TYPE, **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout or EMIT_TIMEOUT_SECONDS) as response:  # noqa: S310 - as above
            return response.status, _answer(response.read(MAX_ANSWER_BYTES)), None
    except urllib.error.HTTPError as error:
        with error:
            return error.code, _answer(error.read(MAX_ANSWER_BYTES)), None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return None, None, f"could not deliver to {url}: {reason}"


def _answer(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


class Clock:
    """Whole seconds from `now`, each call later than the one before (thread-safe)."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._last = 0
        self._lock = threading.Lock()

    def tick(self) -> int:
        with self._lock:
            self._last = max(int(self._now()), self._last + 1)
            return self._last


class EmittingFake(FakeService):
    """A stand-in that posts webhooks to `handler_url` and has control endpoints of its own.

    `_state_lock` guards what a subclass keeps (its records, the handler, the revocation);
    `_clock` dates its changes. While the API credential is revoked (`_revoked`) the subclass
    refuses its API calls; `POST /_<credential>/revoke` and `POST /_<credential>/restore` switch
    that and answer `{"<credential>_revoked": ...}`.

    Subclasses implement `_control()`: the answer to one of their own control routes, or None
    for a route they do not have (then `FakeService.control` answers it). What `_control` raises
    is the caller's fault, answered as JSON `{"error": ...}`: a `ValueError` (and so a
    `ControlInputError`) is 400, a `KeyError` 404 (something the path names does not exist), a
    `LookupError` (nothing to resend) or a `NoHandlerError` 409.
    """

    # The API credential, as the revocation routes name it ("token": `/_token/revoke`).
    credential: ClassVar[str]
    # What the stand-in's webhooks are called, in the error for a missing handler.
    webhooks: ClassVar[str] = "webhooks"

    def __init__(self, host: str, port: int, *, handler_url: str | None, clock: Callable[[], float]) -> None:
        super().__init__(host, port)
        self.handler_url = handler_url
        self._clock = Clock(clock)
        self._state_lock = threading.Lock()
        self._revoked = False

    def _set_revoked(self, revoked: bool) -> None:
        with self._state_lock:
            self._revoked = revoked

    def control(self, request: FakeRequest) -> FakeResponse:
        try:
            response = self._revocation_control(request)
            if response is None:
                response = self._control(request)
        except ValueError as error:
            return bad_request(str(error))
        except KeyError as error:
            return not_found(str(error.args[0]) if error.args else "not found")
        except (LookupError, NoHandlerError) as error:
            return FakeResponse(409, {"error": str(error)})
        return response if response is not None else super().control(request)

    def _control(self, request: FakeRequest) -> FakeResponse | None:
        raise NotImplementedError

    def _revocation_control(self, request: FakeRequest) -> FakeResponse | None:
        if request.method != "POST" or request.path not in (
            f"/_{self.credential}/revoke",
            f"/_{self.credential}/restore",
        ):
            return None
        self._set_revoked(request.path.endswith("revoke"))
        return FakeResponse(200, {f"{self.credential}_revoked": self._revoked})

    def _handler(self) -> str:
        """The handler's URL; NoHandlerError before `configure_handler` has named one."""
        url = self.handler_url
        if not url:
            raise NoHandlerError(
                f"the {self.name} fake has no handler for its {self.webhooks}: call configure_handler(url)"
            )
        return url


def check_contact(name: object, phone: object) -> None:
    """A new contact's name and optional phone (ValueError when either is not a non-empty string)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a contact needs a name")
    if phone is not None and (not isinstance(phone, str) or not phone.strip()):
        raise ValueError("phone must be a non-empty string or None")


# -- control endpoint input -----------------------------------------------------------------------
def json_object(request: FakeRequest) -> dict[str, Any]:
    document = request.json()
    if not isinstance(document, dict):
        raise ControlInputError("expected a JSON object body")
    return document


def text_field(document: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = document.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ControlInputError(f"{key} must be a non-empty string")
    return value


def id_field(document: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    """A positive id, given as a JSON number or a string of digits."""
    value = document.get(key)
    if value is None and not required:
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ControlInputError(f"{key} must be a positive integer")
    return value


def existing(lookup: Callable[[int], object], entity_id: int) -> None:
    """An id a control body names must exist: a KeyError is the body's fault (400), not the path's."""
    try:
        lookup(entity_id)
    except KeyError as error:
        raise ControlInputError(str(error.args[0])) from None


def control_contact(
    document: Mapping[str, Any],
    lookup: Callable[[int], object],
    create: Callable[[Mapping[str, Any]], int],
) -> int | None:
    """The contact a control body names: `contact_id` (which `lookup` must find) or a new one
    `create` makes from the `contact` object; None when it names neither."""
    contact_id = id_field(document, "contact_id", required=False)
    if contact_id is not None:
        existing(lookup, contact_id)
        return contact_id
    if "contact" not in document:
        return None
    contact = document["contact"]
    if not isinstance(contact, dict):
        raise ControlInputError('contact must be an object such as {"name": "Ann", "phone": "+7..."}')
    return create(contact)


def bad_request(message: str) -> FakeResponse:
    return FakeResponse(400, {"error": message})


def not_found(message: str) -> FakeResponse:
    return FakeResponse(404, {"error": message})
