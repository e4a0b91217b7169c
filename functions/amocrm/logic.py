"""An amoCRM lead status webhook becomes the lead's transitions, read from the account's events.

amoCRM's "lead status changed" webhook names the lead and its new status, but a webhook can be
late, repeated, never sent, or collapse two moves into one: the lead's `lead_status_changed`
events (`GET /api/v4/events`, filtered by the lead) say what moved and when, each event one
transition with amoCRM's own id (`pipeline.crm.sync` publishes those not handled yet). The lead
(`GET /api/v4/leads/{id}?with=contacts`) gives its main contact, the contact
(`GET /api/v4/contacts/{id}`) the phone, with the account's long-lived token (the `amocrm_api`
secret, `{"base_url": "https://<subdomain>.amocrm.ru", "token": "..."}`).

Failures: see `pipeline.crm.sources` (ignored, misconfigured); the API's transient errors (429,
5xx, no answer) retry with the consumer's backoff.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from pipeline.crm.amocrm import AmoCrmApi, Contact, StatusEvent
from pipeline.crm.limits import AMOCRM_REQUESTS_PER_SECOND
from pipeline.crm.look import LOOK_PAYLOADS
from pipeline.crm.sources import OrderHidden, misconfigured, refused
from pipeline.crm.sweep import Page, latest_changes
from pipeline.crm.sync import HistoryRecord, OrderCard, sync_order
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, RemoteRefused
from pipeline.secrets import secret_json, with_refreshed_secret

SOURCE = "amocrm"
API_SECRET = "amocrm_api"  # noqa: S105 - the registry name of the secret, not a value
SETTING = "amocrm_statuses"
# What to check when amoCRM refuses the token.
UNAUTHORIZED_HINT = "the long-lived token in the amocrm_api secret was revoked or expired"
# The right a lead's 403 (the events read just worked with the same token) says is missing.
HIDDEN_RIGHT = (
    "the token's user may not see lead {lead_id}: give that user View on leads of the lead's "
    "pipeline (Settings > Users > rights: 'All', not only their own or their group's)"
)
# A lead with more status changes than this many pages is not a shop's order: refuse, not loop.
MAX_HISTORY_PAGES = 10


def lead_id_of(payload: Mapping[str, Any]) -> int:
    """`lead.id` of the event the webhook (or the sweep) published."""
    lead = payload.get("lead")
    value = lead.get("id") if isinstance(lead, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise PermanentError("amocrm event has no lead id")
    return int(value)


def history_ref(event: StatusEvent) -> str:
    return f"{SOURCE}:event:{event.id}"


def in_order(events: Iterable[StatusEvent]) -> list[StatusEvent]:
    """Events oldest first, each once (amoCRM lists newest first, and pages or windows of a read
    may overlap); ids, unique and time-ordered, break ties within one second."""
    unique = {event.id: event for event in events}
    return sorted(unique.values(), key=lambda event: (event.created_at, event.id))


def as_history(event: StatusEvent) -> HistoryRecord:
    pipeline, status = event.after
    before = (str(event.before[0]), str(event.before[1])) if event.before else None
    return HistoryRecord(history_ref(event), event.created_at, str(pipeline), str(status), before)


def account() -> AmoCrmApi:
    secret = secret_json(API_SECRET)
    base_url, token = secret.get("base_url"), secret.get("token")
    if (
        not isinstance(base_url, str)
        or not base_url.strip()
        or not isinstance(token, str)
        or not token.strip()
    ):
        misconfigured(
            "api_secret",
            'the amocrm_api secret needs {"base_url": "https://<subdomain>.amocrm.ru", "token": '
            '"<long-lived token>"}',
        )
    return AmoCrmApi(base_url.strip(), token.strip())


class AmoCrmSource:
    """`pipeline.crm.sync.CrmSource` for an amoCRM account."""

    name = SOURCE
    setting = SETTING
    noun = "lead"
    unauthorized_hint = UNAUTHORIZED_HINT
    requests_per_second = AMOCRM_REQUESTS_PER_SECOND

    def __init__(self, api: AmoCrmApi) -> None:
        self.api = api

    def _refused(self, error: RemoteRefused, what: str) -> NoReturn:
        refused(error, what, UNAUTHORIZED_HINT)

    def history(self, order_id: int) -> list[HistoryRecord]:
        events: list[StatusEvent] = []
        for page in range(1, MAX_HISTORY_PAGES + 1):
            try:
                found, more = self.api.status_events({"filter[entity_id][]": order_id}, page=page)
            except RemoteRefused as error:
                self._refused(error, f"amocrm lead {order_id}: status events")
            events.extend(found)
            if not more:
                break
        else:
            misconfigured(
                "history_too_long", f"amocrm lead {order_id}: more status events than the pages read"
            )
        return [as_history(event) for event in in_order(e for e in events if e.entity_id == order_id)]

    def card(self, order_id: int) -> OrderCard | None:
        try:
            lead = self.api.lead(order_id)
        except RemoteRefused as error:
            if error.kind == "not_found":
                return None
            if error.kind == "unauthorized":  # 403 for this lead: the events read just worked
                raise OrderHidden(HIDDEN_RIGHT.format(lead_id=order_id), str(error)) from None
            self._refused(error, f"amocrm lead {order_id}")
        return OrderCard(lead.main_contact_id, {"lead_id": lead.id, "pipeline_id": lead.pipeline_id})

    def contact(self, contact_id: int) -> Contact:
        return self.api.contact(contact_id)

    def sweep_start(self, since: datetime) -> dict[str, Any]:
        return {"low": int(since.timestamp()), "high": None}

    def sweep_resume(self, cursor: str) -> dict[str, Any]:
        """A version 0 cursor is the unix second to read from."""
        return {"low": int(cursor), "high": None}

    def sweep_page(self, position: Mapping[str, Any], now: datetime, overlap: timedelta) -> Page:
        """One page of the account's status events (`pipeline.crm.sweep`).

        amoCRM lists events newest first and pages by page number, an offset: an event deleted
        or written between two pages would shift the rest. So a pass reads `[low, high]` (high:
        the second the pass began) from the top down by keyset instead: each page is page 1 of
        `[low, upper]`, and the next one's `upper` is the oldest second the page reached, with
        the events already read in that second (`seen`) dropped by id. Only a second holding a
        whole page of events is read by page number (`page` > 1, `[upper, upper]`): there alone a
        deletion mid-read could shift one event past us. A pass done, the next reads from
        `overlap` before its `high`: an event that became visible late is read then."""
        low = int(position["low"])
        high = position.get("high")
        if high is None:  # a new pass, from low to now
            high = upper = int(now.timestamp())
            seen: set[str] = set()
            page = 1
        else:
            upper, seen, page = (
                int(position["upper"]),
                set(position.get("seen", ())),
                int(position.get("page", 1)),
            )
        first = upper if page > 1 else low
        found, more = self.api.status_events(
            {"filter[created_at][from]": first, "filter[created_at][to]": upper}, page=page
        )
        fresh = [event for event in found if event.id not in seen]
        changed = latest_changes((event.entity_id, history_ref(event)) for event in in_order(fresh))
        oldest = min((int(event.created_at.timestamp()) for event in found), default=upper)
        if more and oldest == upper:  # a whole page within one second: its next page by number
            following = {"page": page + 1, "upper": upper, "seen": sorted(seen | {e.id for e in found})}
        elif more:
            at_oldest = {e.id for e in found if int(e.created_at.timestamp()) == oldest}
            following = {"page": 1, "upper": oldest, "seen": sorted(at_oldest)}
        elif page > 1 and upper - 1 >= low:  # the crowded second is read; on below it
            following = {"page": 1, "upper": upper - 1, "seen": []}
        else:  # the pass is done
            restart = max(low, high - int(overlap.total_seconds()))
            return Page(changed, {"low": restart, "high": None}, datetime.fromtimestamp(high, UTC), True)
        return Page(changed, {"low": low, "high": high, **following}, None, False)

    def look_payload(self, order_id: int) -> dict[str, Any]:
        return LOOK_PAYLOADS["amocrm"](order_id)

    def display_name(self, contact: Contact) -> str:
        return contact.name or ""


def sync_lead(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the amocrm consumer (see the module docstring)."""

    lead_id = lead_id_of(envelope.payload)
    # A token refused is re-read once past the cache: "put the new token, redrive" works at once.
    return with_refreshed_secret(API_SECRET, lambda: sync_order(AmoCrmSource(account()), lead_id, envelope))
