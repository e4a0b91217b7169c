"""The CRMs a lead can go to, behind one `LeadSink` interface, chosen by the `crm_api` secret.

The secret's SecretString is JSON:

- `{"kind": "webhook", "url": "https://...", "auth_header": "Bearer ..."}`: the lead is POSTed
  as JSON with `Authorization: <auth_header>` and `Idempotency-Key: <event_id>`, so a receiver
  that honours the key never creates the same lead twice even if we retry after a lost answer.
  A phone learnt later is `PATCH <url>/<lead id>` `{"event_id", "telegram_user_id", "phone"}`
  with `Idempotency-Key: update:<event_id>` (its own key: a replay of the update is dropped).
- `{"kind": "bitrix24", "url": "https://<portal>/rest/<user>/<code>/", "source_id": "OTHER"}`:
  Bitrix24's inbound webhook, method `crm.lead.add`. Bitrix has no idempotency key; the lead
  carries ORIGINATOR_ID/ORIGIN_ID ("telegram"/the user id) so a duplicate can be found.
  A phone learnt later is added with `crm.lead.update` after `crm.lead.get` shows the lead
  without it (so a replay adds no second copy; a phone already there is never replaced).

URLs and auth headers are secrets (a Bitrix webhook URL *is* the credential): they never appear
in an error reason or a log.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import quote

from crm.leads import Lead
from pipeline.errors import PermanentError
from pipeline.http import JsonHttpClient, JsonResponse, url_secrets
from pipeline.observability import mask_phones
from pipeline.validation import Fields, Invalid

if TYPE_CHECKING:  # imported by a Bitrix24 sink only (its module loads pydantic for its webhook models)
    from pipeline.crm.bitrix24 import Bitrix24Rest

_URL = re.compile(r"https?://\S+")
_NOT_BLANK = re.compile(r"\S")


class LeadSink(Protocol):
    def push(self, lead: Lead) -> str | None:
        """Create the lead; return the CRM's id for it when the CRM tells one."""
        ...

    def update(self, lead_id: str, lead: Lead) -> None:
        """Put `lead.phone` on the CRM's lead `lead_id`; safe to repeat for the same `lead.event_id`."""
        ...


@dataclass(frozen=True)
class WebhookConfig:
    kind: Literal["webhook"]
    url: str
    auth_header: str | None = None


@dataclass(frozen=True)
class Bitrix24Config:
    kind: Literal["bitrix24"]
    url: str
    # A value of the portal's SOURCE directory (crm.status.list, ENTITY_ID=SOURCE).
    source_id: str = "OTHER"


KINDS = ("webhook", "bitrix24")


def _url(value: str) -> str:
    if not _URL.fullmatch(value):
        raise ValueError("not an http(s) URL")
    return value


def _not_blank(value: str) -> str:
    if not _NOT_BLANK.search(value):
        raise ValueError("blank")
    return value


def parse_config(config: Any) -> WebhookConfig | Bitrix24Config:
    """The secret's JSON as a sink's configuration, or `Invalid` naming the fields (never their
    values: a Bitrix24 URL is a credential). Fields are located under their kind (`webhook.url`)."""
    kind = config.get("kind") if isinstance(config, Mapping) else None
    if kind not in KINDS:
        reason = "kind is not one of 'webhook', 'bitrix24'"
        raise Invalid("CrmConfig", [{"type": "union_tag_invalid", "loc": (), "msg": reason}])
    fields = Fields(kind, config)
    url = fields.checked("url", fields.text("url"), _url)
    if kind == "webhook":
        header = fields.text("auth_header", default=None)
        if header is not None:
            header = fields.checked("auth_header", header, _not_blank)
        parsed: WebhookConfig | Bitrix24Config = WebhookConfig("webhook", url, header)
    else:
        parsed = Bitrix24Config("bitrix24", url, fields.text("source_id", min_length=1, default="OTHER"))
    try:
        fields.done()
    except Invalid as error:
        located = [{**item, "loc": (kind, *item["loc"])} for item in error.errors()]
        raise Invalid("CrmConfig", located) from None
    return parsed


def _short(value: Any, limit: int = 200) -> str | None:
    return mask_phones(value[:limit]) if isinstance(value, str) and value else None


class WebhookSink:
    """A generic JSON webhook (Zapier, Make, n8n, a CRM's own endpoint)."""

    def __init__(self, config: WebhookConfig) -> None:
        self.url = config.url
        self.auth_header = config.auth_header
        # The header and its credential alone ("Bearer <token>" -> "<token>").
        header_secrets = (config.auth_header, config.auth_header.split()[-1]) if config.auth_header else ()
        self.http = JsonHttpClient("crm webhook", secrets=(*url_secrets(config.url), *header_secrets))

    def _headers(self, idempotency_key: str) -> dict[str, str]:
        headers = {"Idempotency-Key": idempotency_key}
        if self.auth_header:
            headers["Authorization"] = self.auth_header
        return headers

    def push(self, lead: Lead) -> str | None:
        response = self.http.post(self.url, lead.to_document(), self._headers(lead.event_id))
        self.http.check(response, detail=self._detail(response))
        body = response.body
        if isinstance(body, Mapping):
            lead_id = body.get("id", body.get("lead_id"))
            if isinstance(lead_id, str | int) and not isinstance(lead_id, bool):
                return str(lead_id)
        return None

    def update(self, lead_id: str, lead: Lead) -> None:
        url = f"{self.url.rstrip('/')}/{quote(lead_id, safe='')}"
        body = {"event_id": lead.event_id, "telegram_user_id": lead.telegram_user_id, "phone": lead.phone}
        response = self.http.patch(url, body, self._headers(f"update:{lead.event_id}"))
        self.http.check(response, detail=self._detail(response))

    @staticmethod
    def _detail(response: JsonResponse) -> str | None:
        """The receiver's own error message, short and with phone numbers masked."""
        if not isinstance(response.body, Mapping):
            return None
        for key in ("error", "message", "detail", "error_description"):
            if detail := _short(response.body.get(key)):
                return detail
        return None


class Bitrix24Sink:
    """Bitrix24 inbound webhook `crm.lead.add` (POST JSON `{"fields": ..., "params": ...}`).

    Errors are `Bitrix24Rest`'s: TransientError for limits and server errors, RemoteRefused
    (a PermanentError) for refusals, reasons "bitrix24 crm.lead.add: HTTP <status> <code>: ...".
    """

    def __init__(self, config: Bitrix24Config) -> None:
        from pipeline.crm.bitrix24 import Bitrix24Rest

        self.rest: Bitrix24Rest = Bitrix24Rest(config.url)
        self.source_id = config.source_id

    def request(self, lead: Lead) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "TITLE": f"Telegram: {lead.display_name}",
            "NAME": lead.first_name,
            "LAST_NAME": lead.last_name,
            "SOURCE_ID": self.source_id,
            "SOURCE_DESCRIPTION": "Telegram bot",
            "COMMENTS": self._comments(lead),
            "ORIGINATOR_ID": "telegram",
            "ORIGIN_ID": str(lead.telegram_user_id),
        }
        if lead.phone:
            fields["PHONE"] = [{"VALUE": lead.phone, "VALUE_TYPE": "WORK"}]
        return {
            "fields": {name: value for name, value in fields.items() if value is not None},
            "params": {"REGISTER_SONET_EVENT": "Y"},
        }

    @staticmethod
    def _comments(lead: Lead) -> str:
        # COMMENTS is shown as HTML in the lead card: the user's text is escaped.
        lines = [
            f"Telegram user id: {lead.telegram_user_id}",
            f"Username: @{lead.username}" if lead.username else None,
            f"Language: {lead.language_code}" if lead.language_code else None,
            f"Chat id: {lead.chat_id}",
            f"Event: {lead.event_id}",
            f"First message: {lead.text}" if lead.text else None,
        ]
        return html.escape("\n".join(line for line in lines if line), quote=False)

    def push(self, lead: Lead) -> str | None:
        result = self.rest.call("crm.lead.add", self.request(lead))
        return str(result) if isinstance(result, int | str) and not isinstance(result, bool) else None

    def update(self, lead_id: str, lead: Lead) -> None:
        """Add the phone unless the lead has it: PHONE is a multi-field, and a value sent without
        its ID is added, so a blind repeat would list the number twice."""
        if not lead.phone:
            return
        current = self.rest.call("crm.lead.get", {"id": lead_id})
        phones = current.get("PHONE") if isinstance(current, Mapping) else None
        known = {_digits(entry.get("VALUE")) for entry in phones or () if isinstance(entry, Mapping)}
        if _digits(lead.phone) in known:
            return
        self.rest.call(
            "crm.lead.update",
            {
                "id": lead_id,
                "fields": {"PHONE": [{"VALUE": lead.phone, "VALUE_TYPE": "WORK"}]},
                "params": {"REGISTER_SONET_EVENT": "Y"},
            },
        )


def _digits(value: Any) -> str:
    """A phone as its digits: Bitrix24 keeps a number as typed ("+49 170 1234567")."""
    return "".join(ch for ch in value if ch.isdigit()) if isinstance(value, str) else ""


def sink_from_config(config: Mapping[str, Any]) -> LeadSink:
    """The client the secret asks for; PermanentError naming the bad fields (never their values)."""
    try:
        parsed = parse_config(config)
    except Invalid as error:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "secret" for e in error.errors())
        raise PermanentError(f"CRM_API_SECRET_ID secret is invalid ({fields})") from None
    if isinstance(parsed, WebhookConfig):
        return WebhookSink(parsed)
    return Bitrix24Sink(parsed)
