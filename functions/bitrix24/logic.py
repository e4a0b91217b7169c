"""A Bitrix24 deal event becomes the deal's transitions, read from the portal's stage history.

Bitrix24's outgoing webhook names the deal and nothing else (`data[FIELDS][ID]`), fires
ONCRMDEALUPDATE on every edit of any field, and its `ts` is when the event left the portal's
queue, not when the deal moved. So an event (or the catch-up sweep's "look at deal N") is only a
cue: the deal's stage history (`crm.stagehistory.list`, filtered by OWNER_ID) says what moved and
when, each record one transition with the portal's own id (`pipeline.crm.sync` publishes those
not handled yet). The deal (`crm.deal.get`) gives its contact, the contact (`crm.contact.get`)
the phone; all through the portal's inbound webhook URL (the `bitrix24_api` secret).

Failures: see `pipeline.crm.sources` (ignored, misconfigured); the portal's transient errors
(QUERY_LIMIT_EXCEEDED, 5xx, no answer) retry with the consumer's backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from pipeline.crm.bitrix24 import HISTORY_PAGE, Bitrix24Rest, Contact, StageHistoryRecord
from pipeline.crm.limits import BITRIX24_REQUESTS_PER_SECOND
from pipeline.crm.look import LOOK_PAYLOADS
from pipeline.crm.sources import OrderHidden, misconfigured, refused
from pipeline.crm.sweep import Page, latest_changes
from pipeline.crm.sync import HistoryRecord, OrderCard, sync_order
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, RemoteRefused
from pipeline.secrets import secret_json, with_refreshed_secret

SOURCE = "bitrix24"
API_SECRET = "bitrix24_api"  # noqa: S105 - the registry name of the secret, not a value
SETTING = "bitrix24_stages"
# What to check when the portal refuses the inbound webhook's credential.
UNAUTHORIZED_HINT = "check the inbound webhook in the bitrix24_api secret (revoked? crm scope?)"
# The right a deal's "Access denied" (crm.deal.get, HTTP 400, no error code) says is missing.
HIDDEN_RIGHT = (
    "the inbound webhook's user may not read deal {deal_id}: grant it Read on deals of the deal's "
    "pipeline (CRM > Settings > Access permissions, its role; 'All' or the owner's department)"
)
# A deal's history longer than this many pages is not a shop's order: refuse rather than loop.
MAX_HISTORY_PAGES = 20


def deal_id_of(payload: Mapping[str, Any]) -> int:
    """`data.FIELDS.ID` of the event the webhook (or the sweep) published."""
    try:
        return int(payload["data"]["FIELDS"]["ID"])
    except (KeyError, TypeError, ValueError):
        raise PermanentError("bitrix24 event has no data[FIELDS][ID]") from None


def history_ref(record: StageHistoryRecord) -> str:
    return f"{SOURCE}:stagehistory:{record.id}"


def as_history(record: StageHistoryRecord) -> HistoryRecord:
    return HistoryRecord(history_ref(record), record.created_time, record.category_id, record.stage_id)


def portal() -> Bitrix24Rest:
    url = secret_json(API_SECRET).get("url")
    if not isinstance(url, str) or not url.strip():
        misconfigured(
            "api_secret",
            "the bitrix24_api secret has no url: put the portal's inbound webhook URL "
            '(https://<portal>/rest/<user>/<code>/) in it as {"url": "..."}',
        )
    return Bitrix24Rest(url.strip())


class Bitrix24Source:
    """`pipeline.crm.sync.CrmSource` for a Bitrix24 portal."""

    name = SOURCE
    setting = SETTING
    noun = "deal"
    unauthorized_hint = UNAUTHORIZED_HINT
    requests_per_second = BITRIX24_REQUESTS_PER_SECOND

    def __init__(self, rest: Bitrix24Rest) -> None:
        self.rest = rest

    def _refused(self, error: RemoteRefused, what: str) -> NoReturn:
        refused(error, what, UNAUTHORIZED_HINT)

    def history(self, order_id: int) -> list[HistoryRecord]:
        records: list[StageHistoryRecord] = []
        start: int | None = 0
        for _ in range(MAX_HISTORY_PAGES):
            try:
                page, start = self.rest.stage_history({"OWNER_ID": order_id}, start=start or 0)
            except RemoteRefused as error:
                self._refused(error, f"bitrix24 deal {order_id}: stage history")
            records.extend(page)
            if start is None:
                break
        else:
            misconfigured(
                "history_too_long",
                f"bitrix24 deal {order_id}: stage history longer than "
                f"{MAX_HISTORY_PAGES * HISTORY_PAGE} records",
            )
        records.sort(key=lambda record: record.id)
        return [as_history(record) for record in records if record.owner_id == order_id]

    def card(self, order_id: int) -> OrderCard | None:
        try:
            deal = self.rest.deal(order_id)
        except RemoteRefused as error:
            if error.kind == "not_found":
                return None
            if error.kind == "unauthorized":  # "Access denied": the history read just worked
                raise OrderHidden(HIDDEN_RIGHT.format(deal_id=order_id), str(error)) from None
            self._refused(error, f"bitrix24 deal {order_id}")
        return OrderCard(deal.contact_id, {"deal_id": deal.id, "category_id": deal.category_id})

    def contact(self, contact_id: int) -> Contact:
        return self.rest.contact(contact_id)

    def sweep_start(self, since: datetime) -> dict[str, Any]:
        return {"since": int(since.timestamp()), "after": 0, "newest": None}

    def sweep_resume(self, cursor: str) -> dict[str, Any]:
        """A version 0 cursor is the last record ID read."""
        return {"since": None, "after": int(cursor), "newest": None}

    def sweep_page(self, position: Mapping[str, Any], now: datetime, overlap: timedelta) -> Page:
        """One page of the portal's stage history in ID order (`pipeline.crm.sweep`).

        A scan reads the records created from `since` whose ID is above `after`, the last one
        read: each page a fresh query (`>ID`, ID ascending, `start: -1`, Bitrix24's mode without
        a count), never an offset, so a record deleted meanwhile shifts nothing. A page short of
        HISTORY_PAGE ends the scan; the next starts `overlap` before the newest record it read,
        from the first ID again: a record that became visible late (committed after a later one
        was read, so with a smaller ID) is read then."""
        since, after, newest = position.get("since"), int(position.get("after") or 0), position.get("newest")
        filters: dict[str, Any] = {">ID": after}
        if since is not None:
            filters[">=CREATED_TIME"] = datetime.fromtimestamp(since, UTC).isoformat()
        records, _ = self.rest.stage_history(filters, start=-1)
        ordered = sorted(records, key=lambda record: record.id)
        changed = latest_changes((record.owner_id, history_ref(record)) for record in ordered)
        if ordered:
            last = max(int(record.created_time.timestamp()) for record in ordered)
            newest = last if newest is None else max(newest, last)
        if len(records) >= HISTORY_PAGE:  # more may follow
            read_to = datetime.fromtimestamp(newest, UTC) if newest is not None else None
            return Page(changed, {"since": since, "after": ordered[-1].id, "newest": newest}, read_to, False)
        if newest is not None:
            restart = newest - int(overlap.total_seconds())
            since = restart if since is None else max(since, restart)
        return Page(changed, {"since": since, "after": 0, "newest": newest}, now, True)

    def look_payload(self, order_id: int) -> dict[str, Any]:
        return LOOK_PAYLOADS["bitrix24"](order_id)

    def display_name(self, contact: Contact) -> str:
        return contact.display_name


def sync_deal(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the bitrix24 consumer (see the module docstring)."""

    deal_id = deal_id_of(envelope.payload)
    # A webhook code refused is re-read once past the cache: "put the new URL, redrive" works at once.
    return with_refreshed_secret(API_SECRET, lambda: sync_order(Bitrix24Source(portal()), deal_id, envelope))
