"""What the integration's user may not read in a CRM stand-in (`bitrix24`, `amocrm`).

A real CRM applies its user's rights to every API call: the inbound webhook's user (Bitrix24) or
the long-lived token's user (amoCRM) may be kept out of a pipeline (a Bitrix24 deal category, an
amoCRM pipeline) or of single orders (owned by a department it has no right on). As the vendors
answer: the list methods leave such orders out without a word (`crm.stagehistory.list`,
`crm.deal.list`, `GET /api/v4/events`: "the data returned depend on the rights to the entity"),
and reading the order itself is refused (`crm.deal.get`: HTTP 400 `{"error": "",
"error_description": "Access denied"}`; amoCRM `GET /api/v4/leads/<id>`: 403 problem+json).

Control endpoints of both stand-ins (`control`): `GET /_access`, `POST /_access
{"hidden_pipelines": [2], "hidden_orders": [7]}` (the whole set each time; `[]` shows everything
again); and `POST /_contacts/<id>/phone {"phone"}`, a manager correcting a contact's number (no
webhook: both CRMs' order webhooks ignore contact edits; the order's next event reads it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from local.fakes.base import FakeRequest, FakeResponse
from local.fakes.emitting import ControlInputError, json_object, text_field

ACCESS_PATH = "/_access"
_CONTACT_PHONE = re.compile(r"^/_contacts/(?P<id>\d+)/phone$")
_KEYS = ("hidden_pipelines", "hidden_orders")


class ReadAccess:
    """Pipelines and orders hidden from the integration's user; thread-safe on its own."""

    def __init__(self) -> None:
        self._pipelines: frozenset[int] = frozenset()
        self._orders: frozenset[int] = frozenset()
        self._lock = threading.Lock()

    def hide(self, *, pipelines: Iterable[int] = (), orders: Iterable[int] = ()) -> None:
        """Hide these pipelines (a deal's CATEGORY_ID, a lead's pipeline_id) and orders too."""
        with self._lock:
            self._pipelines |= frozenset(pipelines)
            self._orders |= frozenset(orders)

    def show_all(self) -> None:
        with self._lock:
            self._pipelines = self._orders = frozenset()

    def may_read(self, order_id: int, pipeline_id: int) -> bool:
        with self._lock:
            return order_id not in self._orders and pipeline_id not in self._pipelines

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"hidden_pipelines": sorted(self._pipelines), "hidden_orders": sorted(self._orders)}

    def control(self, method: str, document: Mapping[str, Any] | None) -> dict[str, Any]:
        """`GET /_access` (the state) or `POST /_access` (replaces it); ControlInputError else."""
        if method == "POST":
            assert document is not None
            unknown = set(document) - set(_KEYS)
            if unknown:
                raise ControlInputError(f"unknown keys {sorted(unknown)}; known: {', '.join(_KEYS)}")
            pipelines, orders = (_ids(document.get(name, []), name) for name in _KEYS)
            with self._lock:
                self._pipelines, self._orders = pipelines, orders
        return self.state()


def _ids(value: Any, name: str) -> frozenset[int]:
    if not isinstance(value, list) or any(
        isinstance(item, bool) or not isinstance(item, int) or item < 0 for item in value
    ):
        raise ControlInputError(f"{name} must be a list of ids (integers >= 0)")
    return frozenset(value)


def control(fake: Any, request: FakeRequest) -> FakeResponse | None:
    """`/_access` and `/_contacts/<id>/phone` of a CRM stand-in (`fake.access`,
    `fake.set_contact_phone`, `fake.contact`); None for another route."""
    if request.path == ACCESS_PATH and request.method in ("GET", "POST"):
        body = json_object(request) if request.method == "POST" else None
        return FakeResponse(200, fake.access.control(request.method, body))
    match = _CONTACT_PHONE.match(request.path)
    if match is None or request.method != "POST":
        return None
    contact_id = int(match["id"])
    fake.contact(contact_id)  # 404 for a contact that does not exist
    fake.set_contact_phone(contact_id, str(text_field(json_object(request), "phone")))
    return FakeResponse(200, fake.contact(contact_id))
