"""The CRMs a lead can go to, behind one `LeadSink` interface, chosen by the `crm_api` secret.

The secret's SecretString is JSON:

- `{"kind": "webhook", "url": "https://...", "auth_header": "Bearer ..."}`: the lead is POSTed
  as JSON with `Authorization: <auth_header>` and `Idempotency-Key: <event_id>`, so a receiver
  that honours the key never creates the same lead twice even if we retry after a lost answer.
- `{"kind": "bitrix24", "url": "https://<portal>/rest/<user>/<code>/", "source_id": "OTHER"}`:
  Bitrix24's inbound webhook, method `crm.lead.add`. Bitrix has no idempotency key; the lead
  carries ORIGINATOR_ID/ORIGIN_ID ("telegram"/the user id) so a duplicate can be found.

URLs and auth headers are secrets (a Bitrix webhook URL *is* the credential): they never appear
in an error reason or a log.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from crm.leads import Lead
from pipeline.crm.bitrix24 import BITRIX_TRANSIENT_ERRORS as BITRIX_TRANSIENT_ERRORS
from pipeline.crm.bitrix24 import Bitrix24Rest
from pipeline.crm.bitrix24 import url_secrets as url_secrets
from pipeline.errors import PermanentError
from pipeline.http import JsonHttpClient, JsonResponse
from pipeline.observability import mask_phones

# BITRIX_TRANSIENT_ERRORS and url_secrets live in pipeline.crm.bitrix24 now; imported `as` themselves,
# they stay importable from here.
_URL_PATTERN = r"^https?://\S+$"


class LeadSink(Protocol):
    def push(self, lead: Lead) -> str | None:
        """Create the lead; return the CRM's id for it when the CRM tells one."""
        ...


class WebhookConfig(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: Literal["webhook"]
    url: str = Field(pattern=_URL_PATTERN)
    auth_header: str | None = Field(default=None, pattern=r"\S")


class Bitrix24Config(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: Literal["bitrix24"]
    url: str = Field(pattern=_URL_PATTERN)
    # A value of the portal's SOURCE directory (crm.status.list, ENTITY_ID=SOURCE).
    source_id: str = Field(default="OTHER", min_length=1)


CrmConfig = Annotated[WebhookConfig | Bitrix24Config, Field(discriminator="kind")]
_CONFIG: TypeAdapter[WebhookConfig | Bitrix24Config] = TypeAdapter(
    CrmConfig, config=ConfigDict(defer_build=True)
)


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

    def push(self, lead: Lead) -> str | None:
        headers = {"Idempotency-Key": lead.event_id}
        if self.auth_header:
            headers["Authorization"] = self.auth_header
        response = self.http.post(self.url, lead.model_dump(mode="json"), headers)
        self.http.check(response, detail=self._detail(response))
        body = response.body
        if isinstance(body, Mapping):
            lead_id = body.get("id", body.get("lead_id"))
            if isinstance(lead_id, str | int) and not isinstance(lead_id, bool):
                return str(lead_id)
        return None

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
        self.rest = Bitrix24Rest(config.url)
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


def sink_from_config(config: Mapping[str, Any]) -> LeadSink:
    """The client the secret asks for; PermanentError naming the bad fields (never their values)."""
    try:
        parsed = _CONFIG.validate_python(config)
    except ValidationError as error:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "secret" for e in error.errors())
        raise PermanentError(f"CRM_API_SECRET_ID secret is invalid ({fields})") from None
    if isinstance(parsed, WebhookConfig):
        return WebhookSink(parsed)
    return Bitrix24Sink(parsed)
