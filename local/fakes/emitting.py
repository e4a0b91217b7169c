"""What the CRM stand-ins that send webhooks to the pipeline share (`bitrix24`, `amocrm`).

- `WebhookDelivery`: the pipeline's answer to one emitted webhook (or why it could not be
  reached), which each stand-in's `Delivery` extends with what the webhook carried;
- `php_form`: a form body encoded the way PHP's `http_build_query` encodes it, which is what
  Bitrix24 and amoCRM send (`data%5BFIELDS%5D%5BID%5D=759`, spaces as `+`); `php_params`, the
  other way: query or form fields (`filter[>ID]=5&select[]=ID`) read into nested objects and
  lists, as PHP's `parse_str` reads them, which is how both CRMs read their API parameters;
- `post_form`: one synchronous POST of such a body, with a short timeout;
- a small `Clock` whose seconds always advance between two changes, so "modified" and "moved"
  times differ between two calls made within the same second, as they would between two edits
  by a person;
- `EmittingFake`, their base: where the webhooks go (`handler_url`), what becomes of them
  (`local.fakes.webhook_faults`: lost or delayed, `/_webhook_faults`), the API credential a
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

from local.fakes.accounts import AccountSwitch
from local.fakes.base import FakeRequest, FakeResponse, FakeService
from local.fakes.rate_limit import VENDOR_LIMITS, LeakyBucket
from local.fakes.webhook_faults import D, WebhookFaults

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
    reached or did not answer, or the webhook was not posted); `body` its answer (JSON when it is
    JSON, else text); `payload` the form body exactly as sent (or as it would have been).
    `fate` says what became of it: `posted` (now), `lost` (never posted: a
    `lose_next_webhooks` fault), `held` (to be posted later: `delay_next_webhooks`; `held_id`
    names it), `released` (a held one, posted since; its answer is in `GET /_webhook_faults`).
    """

    status: int | None
    body: Any
    error: str | None
    event: str
    payload: str = field(default="", kw_only=True)
    fate: str = field(default="posted", kw_only=True)
    held_id: int | None = field(default=None, kw_only=True)

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


def php_params(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """`key=value` fields read as PHP's `parse_str` reads them: `a[b]=1` is `{"a": {"b": "1"}}`,
    `a[]=1&a[]=2` is `{"a": ["1", "2"]}`, `a[0]=1` is `{"a": {"0": "1"}}`; a later field wins."""
    params: dict[str, Any] = {}
    for key, value in pairs:
        head, _, rest = key.partition("[")
        if not head:
            continue
        path = [head]
        while rest:
            inner, closed, rest = rest.partition("]")
            if not closed:
                break  # PHP keeps an unclosed bracket as part of the name; such a name is not used here
            path.append(inner)
            rest = rest[1:] if rest.startswith("[") else ""
        node: Any = params
        for index, part in enumerate(path):
            last = index == len(path) - 1
            child: Any = value if last else ([] if path[index + 1] == "" else {})
            if isinstance(node, list):
                if part != "":
                    break  # `a[]=1&a[x]=2`: a list meets a key; such a mix is not used here
                node.append(child)
                node = child
                continue
            if part == "":
                break  # `a[]` under an object: nothing PHP-like to do with it here
            if last or not isinstance(node.get(part), dict | list):
                node[part] = child
            node = node[part]
    return params


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

    def now(self) -> int:
        """The current second, no earlier than the last tick (without advancing)."""
        with self._lock:
            return max(int(self._now()), self._last)

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
        self.webhook_faults = WebhookFaults(post_form)
        # The whole account refused, or its credential rotated (`local.fakes.accounts`).
        self.account = AccountSwitch(self.account_refusals(), self.rotate_credential)
        self.rate_limit: LeakyBucket | None = None

    def stop(self) -> None:
        super().stop()
        self.webhook_faults.stop()

    def enforce_rate_limit(self, clock: Callable[[], float] = time.monotonic) -> LeakyBucket:
        """Refuse API calls past the vendor's documented rate (`local.fakes.rate_limit`) from now on."""
        self.rate_limit = LeakyBucket(VENDOR_LIMITS[self.name], clock)
        return self.rate_limit

    def throttled(self, request: FakeRequest) -> FakeResponse | None:
        bucket = self.rate_limit
        if bucket is None or bucket.admit():
            return None
        return self.error_response(bucket.limit.status)

    def _send(self, url: str, payload: str, headers: Mapping[str, str], build: Callable[..., D]) -> D:
        """Post one webhook (outside the state lock: the handler may call back while it answers),
        unless a webhook fault loses or holds it; `build` makes the Delivery (see WebhookFaults.send)."""
        return self.webhook_faults.send(url, payload, headers, build)

    def _set_revoked(self, revoked: bool) -> None:
        with self._state_lock:
            self._revoked = revoked

    def control(self, request: FakeRequest) -> FakeResponse:
        try:
            response = (
                self._revocation_control(request)
                or self._webhook_fault_control(request)
                or self.account.control(request)
            )
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

    def account_refusals(self) -> Mapping[str, Callable[[], FakeResponse]]:
        """The vendor's answer to every API call while the account is refused, by cause."""
        raise NotImplementedError

    def rotate_credential(self, value: str) -> None:
        """Accept only `value` as the API credential from now on (a rotated token or code)."""
        raise NotImplementedError

    def _webhook_fault_control(self, request: FakeRequest) -> FakeResponse | None:
        route = (request.method, request.path)
        if route == ("GET", "/_webhook_faults"):
            return FakeResponse(200, self.webhook_faults.state())
        if route == ("POST", "/_webhook_faults"):
            return FakeResponse(200, self.webhook_faults.add(request.json()))
        if route == ("DELETE", "/_webhook_faults"):
            return FakeResponse(200, self.webhook_faults.clear())
        if route == ("POST", "/_webhook_faults/flush"):
            return FakeResponse(200, {"released": self.webhook_faults.flush()})
        return None

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
