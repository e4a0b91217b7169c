"""What the webhook does with one request: authenticate, validate, wrap in an envelope, publish.

Every request ends in exactly one `Outcome` and one metric: `EventsAccepted` (dimensions
`source`, `type`), `EventsRejected` (dimensions `source`, `reason`), or `EventsIgnored`
(dimensions `source`, `type`: an authenticated CRM event of a type the pipeline does not handle,
answered 200 and not published, so the CRM does not retry it). An amoCRM batch is counted per
lead: `EventsAccepted` for each lead published, `EventsRejected{reason=invalid}` with the number
of leads refused. Authentication always comes first (Bitrix24's token is inside its form, so its
form is read first), so an unauthenticated caller learns nothing about validation and never
causes a publish. A request is answered 200 only once SNS has the event; any failure to publish
answers 503 so the sender (Telegram, the CRM) retries and nothing is lost.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from botocore.exceptions import BotoCoreError, ClientError

# The secrets' reader at the init, not with the first request: Lambda runs the init at a full
# vCPU and the request at a share of one (`pipeline.aws`). No module here loads boto3: the
# webhook calls AWS through botocore's clients alone (tests/unit/test_cold_imports.py).
from pipeline import aws, coldstart, phones, publication, secrets, telegram
from pipeline.crm import contract, forms
from pipeline.envelope import (
    SNS_MAX_MESSAGE_BYTES,
    Envelope,
    Source,
    crm_event_id,
    fifo_keys,
    message_size,
    publish_request,
    sns_attributes,
    utc_now,
)
from pipeline.observability import service_tracer
from pipeline.validation import Refusals

T = TypeVar("T")

if TYPE_CHECKING:  # imported by the first amoCRM request (ingest_amocrm)
    from pipeline.crm.amocrm import RefusedEntry

logger = Logger(child=True)
tracer = service_tracer()
metrics = Metrics()

# The header name, set with setWebhook(secret_token=...); its value is the secret.
TELEGRAM_AUTH_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# The rejection reason of a CRM event refused only for its customer's phone (an alarm watches it).
INVALID_PHONE_REASON = "invalid_phone"
# A CRM webhook for an event this pipeline does not handle (a Bitrix24 lead event, an amoCRM
# webhook not subscribed to lead status changes): 422, so the sender's log shows the refusal.
UNSUPPORTED_EVENT_REASON = "unsupported_event"
# A body that is not the event it claims to be (a field missing or malformed): 400 or 422.
INVALID_REASON = "invalid"
# A body that is not what the route reads (JSON sent to a form route): 415, naming the form.
UNSUPPORTED_MEDIA_TYPE_REASON = "unsupported_media_type"
# A Content-Type quoted back to the sender: a media type, nothing more (a header may carry anything).
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}")
# How many refused leads of an amoCRM batch an answer and its log line itemise (all are counted):
# a batch of thousands of broken leads must not make an answer larger than Lambda can return.
REFUSED_LEADS_LISTED = 20
# The `type` dimension of an ignored CRM event: its type when it looks like one, else "other".
_IGNORED_TYPE_DIMENSION = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
IGNORED_OTHER_TYPE = "other"
BITRIX24_APP_TOKEN_ENV = "BITRIX24_APP_TOKEN_SECRET_ID"  # noqa: S105 - a variable name


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Settings:
    topic_arn: str
    telegram_secret_id: str
    crm_secret_id: str
    bot_id: str
    # The static token templated CRM senders present instead of a signature (`crm_auth`).
    crm_token_secret_id: str = ""
    crm_auth: contract.CrmAuth = contract.DEFAULT_CRM_AUTH
    # Networks Telegram webhook calls may come from; empty: any (the secret token still applies).
    telegram_ip_allowlist: tuple[IpNetwork, ...] = ()
    # Region national CRM phone forms are read in (validated at synth); None: international only.
    phone_default_region: str | None = None
    # Bitrix24's application token (`auth[application_token]` of its outgoing webhook); empty:
    # Bitrix24 is not connected (no route in the stack either).
    bitrix24_app_token_secret_id: str = ""

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            topic_arn=os.environ["EVENTS_TOPIC_ARN"],
            telegram_secret_id=os.environ["TELEGRAM_SECRET_ID"],
            crm_secret_id=os.environ["CRM_SECRET_ID"],
            bot_id=os.environ["TELEGRAM_BOT_ID"],
            crm_token_secret_id=os.environ.get("CRM_TOKEN_SECRET_ID", ""),
            crm_auth=contract.crm_auth_mode(os.environ.get(contract.CRM_AUTH_ENV, contract.DEFAULT_CRM_AUTH)),
            telegram_ip_allowlist=ip_allowlist(os.environ.get("TELEGRAM_IP_ALLOWLIST", "")),
            phone_default_region=os.environ.get(phones.DEFAULT_REGION_ENV, "").strip() or None,
            bitrix24_app_token_secret_id=os.environ.get(BITRIX24_APP_TOKEN_ENV, ""),
        )


@cache
def ip_allowlist(text: str) -> tuple[IpNetwork, ...]:
    """TELEGRAM_IP_ALLOWLIST: comma-separated CIDRs ("" = no IP check); a bad entry raises."""
    return tuple(ipaddress.ip_network(part.strip()) for part in text.split(",") if part.strip())


def ip_allowed(source_ip: str | None, allowlist: tuple[IpNetwork, ...]) -> bool:
    if not allowlist:
        return True
    try:
        address = ipaddress.ip_address(source_ip or "")
    except ValueError:
        return False
    return any(address in network for network in allowlist)


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request the webhook reads; headers are looked up case-insensitively."""

    headers: Mapping[str, str]
    body: str | None
    is_base64_encoded: bool
    correlation_id: str
    # requestContext.http.sourceIp: the caller as API Gateway saw it.
    source_ip: str | None = None

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.lower())
        return value if isinstance(value, str) else None

    def raw_body(self) -> bytes:
        """The body's bytes exactly as the sender sent them (what a signature is computed over)."""
        if not self.body:
            return b""
        try:
            if self.is_base64_encoded:
                return base64.b64decode(self.body, validate=True)
            return self.body.encode("utf-8")
        except ValueError:  # binascii.Error, UnicodeEncodeError (a lone surrogate) are ValueErrors
            _reject(400, INVALID_REASON, "body is not valid base64 or UTF-8")


@dataclass(frozen=True)
class Outcome:
    status_code: int
    body: dict[str, Any]


class Rejection(Exception):
    """A refused request: `reason` is the metric dimension, `message` the client's, `detail` for the log."""

    def __init__(
        self,
        status_code: int,
        reason: str,
        message: str,
        errors: list[dict[str, Any]] | None = None,
        detail: str | None = None,
        count: int = 1,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason
        self.message = message
        self.errors = errors or []
        self.detail = detail
        # What EventsRejected counts: the request, or every lead of a batch refused whole.
        self.count = count

    def outcome(self) -> Outcome:
        body: dict[str, Any] = {"ok": False, "error": self.reason, "message": self.message}
        if self.errors:
            body["errors"] = self.errors
        return Outcome(self.status_code, body)


def _reject(
    status_code: int,
    reason: str,
    message: str,
    errors: list[dict[str, Any]] | None = None,
    detail: str | None = None,
    count: int = 1,
) -> NoReturn:
    raise Rejection(status_code, reason, message, errors, detail, count)


def field_errors(error: Refusals) -> list[dict[str, Any]]:
    """A refusal's fields (pydantic's or `pipeline.validation`'s) as `{loc, msg}`, without the
    offending input (it may be a phone number)."""
    return [{"loc": list(item["loc"]), "msg": item["msg"]} for item in error.errors(include_input=False)]


def listed_errors(error: ValueError) -> list[dict[str, Any]]:
    """`field_errors` of a ValueError that lists its fields, else none."""
    return field_errors(error) if isinstance(error, Refusals) else []


def _reject_constant(name: str) -> NoReturn:
    # NaN and Infinity are not JSON; accepting them would publish a payload other than the one received.
    raise ValueError(f"{name} is not valid JSON")


# A `\uD800`-`\uDFFF` escape: JSON allows an unpaired one, UTF-8 (and so SNS) cannot carry it.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes) -> Any:
    """The body's JSON value; JSON on the wire is UTF-8 (RFC 8259), and must stay encodable as such."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        _reject(400, INVALID_REASON, "body is not valid UTF-8 JSON")
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            _reject(400, INVALID_REASON, "body contains an unpaired UTF-16 surrogate escape")
    return value


def record_rejection(source: str, reason: str, count: int = 1) -> None:
    metrics.add_dimension(name="source", value=source)
    metrics.add_dimension(name="reason", value=reason)
    metrics.add_metric(name="EventsRejected", unit=MetricUnit.Count, value=count)


def _check_secret(
    secret_id: str, check: Callable[[tuple[str, ...]], Any], retry_if: Callable[[Any], bool]
) -> Any:
    try:
        return secrets.check_with_refresh(secret_id, check, retry_if)
    except secrets.SecretReadError:
        logger.exception(
            "Could not read the secret to authenticate the request", extra={"secret_id": secret_id}
        )
        _reject(503, "secret_unavailable", "cannot authenticate requests right now, retry later")


def _token_matches(token: str, candidates: tuple[str, ...]) -> bool:
    given = token.encode("utf-8", errors="surrogatepass")
    matched = False
    # Constant time per comparison and no early exit: timing tells nothing about the secret.
    for candidate in candidates:
        matched |= hmac.compare_digest(given, candidate.encode("utf-8"))
    return matched


def _require_secret_token(token: str | None, secret_id: str, what: str) -> None:
    """401 (naming `what`, never the value) unless `token` is the secret's current value, or its
    previous one within the rotation grace period."""
    if not token:
        _reject(401, "unauthorized", f"missing {what}", detail="missing")
    if not _check_secret(
        secret_id, lambda candidates: _token_matches(token, candidates), retry_if=lambda matched: not matched
    ):
        _reject(401, "unauthorized", f"wrong {what}", detail="mismatch")


@tracer.capture_method
def publish(envelope: Envelope, attributes: dict[str, str | None], topic_arn: str) -> Outcome:
    """Publish one envelope; 413 if SNS would refuse its size, 503 if SNS cannot be reached."""
    message = envelope.to_json()
    message_attributes = sns_attributes(attributes)
    size = message_size(message, message_attributes)
    log_fields = {"event_id": envelope.event_id, "source": envelope.source, "type": envelope.type}
    # The chat or order it belongs to (its FIFO group): the ops console filters events by it.
    log_fields["message_group"] = fifo_keys(envelope).group_id
    if size > SNS_MAX_MESSAGE_BYTES:
        logger.error("Event too large for SNS, not published", extra={**log_fields, "size_bytes": size})
        _reject(413, "oversized", f"event of {size} bytes exceeds the {SNS_MAX_MESSAGE_BYTES}-byte limit")
    try:
        response = aws.client("sns").publish(**publish_request(topic_arn, envelope, message_attributes))
    except (ClientError, BotoCoreError):
        logger.exception("Publishing to SNS failed; the sender will retry", extra=log_fields)
        _reject(503, "publish_failed", "could not queue the event, retry later")
    logger.info("Event published", extra={**log_fields, "message_id": response.get("MessageId")})
    metrics.add_dimension(name="source", value=envelope.source)
    metrics.add_dimension(name="type", value=envelope.type)
    metrics.add_metric(name="EventsAccepted", unit=MetricUnit.Count, value=1)
    return Outcome(200, {"ok": True, "event_id": envelope.event_id})


def ignored_crm_type(payload: Any) -> str | None:
    """The `type` of a CRM event the pipeline does not handle (a non-empty string other than
    `contract.HANDLED_TYPES`), as its metric dimension; None for a handled or a missing/broken type
    (validation judges those)."""
    kind = payload.get("type") if isinstance(payload, Mapping) else None
    if not isinstance(kind, str) or not kind.strip() or kind in contract.HANDLED_TYPES:
        return None
    return kind if _IGNORED_TYPE_DIMENSION.fullmatch(kind) else IGNORED_OTHER_TYPE


def ignore(source: Source, kind: str) -> Outcome:
    """Acknowledge an event of a type the pipeline does not handle: counted, logged, not published."""
    logger.info("Event type not handled: acknowledged, not published", extra={"source": source, "type": kind})
    metrics.add_dimension(name="source", value=source)
    metrics.add_dimension(name="type", value=kind)
    metrics.add_metric(name="EventsIgnored", unit=MetricUnit.Count, value=1)
    return Outcome(200, {"ok": True, "ignored": kind})


def _handle(source: Source, work: Callable[[], Outcome]) -> Outcome:
    try:
        return work()
    except Rejection as rejection:
        if rejection.status_code < 500:
            log_fields: dict[str, Any] = {
                "source": source,
                "reason": rejection.reason,
                "detail": rejection.detail,
            }
            if rejection.errors:
                log_fields["errors"] = rejection.errors  # field names and why, never values
            logger.warning("Request rejected", extra=log_fields)
        record_rejection(source, rejection.reason, rejection.count)
        return rejection.outcome()


def _validate(title: str, parse: Callable[[], T], status_code: int) -> T:
    """`parse()`, or the request refused with its fields' reasons (a ValueError that lists them:
    pydantic's `ValidationError`, `pipeline.validation.Invalid`)."""
    try:
        return parse()
    except ValueError as error:
        if not isinstance(error, Refusals):
            raise
        _reject(status_code, _rejection_reason(error), f"body is not a valid {title}", field_errors(error))


def _rejection_reason(error: Refusals) -> str:
    """`invalid_phone` when the customer's phone is all that is wrong (the CRM's data, which an
    alarm watches); `invalid` for any other broken event."""
    if all(item["type"] == contract.PHONE_ERROR_TYPE for item in error.errors(include_input=False)):
        return INVALID_PHONE_REASON
    return INVALID_REASON


def ingest_telegram(request: Request, settings: Settings) -> Outcome:
    """A Telegram webhook call: one update, authenticated by the secret token set with setWebhook."""

    def work() -> Outcome:
        if not ip_allowed(request.source_ip, settings.telegram_ip_allowlist):
            _reject(403, "forbidden_ip", "caller is outside Telegram's networks", detail=request.source_ip)
        _require_secret_token(
            request.header(TELEGRAM_AUTH_HEADER), settings.telegram_secret_id, "secret token"
        )
        payload = parse_json(request.raw_body())
        if not isinstance(payload, dict):
            _reject(400, INVALID_REASON, "body must be a JSON object (a Telegram Update)")
        update = _validate("TelegramUpdate", lambda: telegram.TelegramUpdate.parse(payload), 400)
        envelope, attributes = publication.publication(
            update, payload, bot_id=settings.bot_id, correlation_id=request.correlation_id
        )
        return publish(envelope, attributes, settings.topic_arn)

    return _handle("telegram", work)


def crm_token(request: Request, path_token: str | None) -> str | None:
    """The static token the request presents, if any: in the URL path, in `X-Crm-Token`, or as
    `Authorization: Bearer <token>` (first found wins); "" when one is presented empty."""
    if path_token is not None:
        return path_token
    header = request.header(contract.TOKEN_HEADER)
    if header is not None:
        return header.strip()
    authorization = request.header("Authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == contract.BEARER_SCHEME:
            return credentials.strip()
    return None


def _authenticate_crm(request: Request, raw: bytes, settings: Settings, path_token: str | None) -> None:
    """A signed request is judged by its signature (where signatures are accepted), one that
    presents a token by the token, any other as unsigned; a mode the deployment does not enable
    (`crm_auth`) refuses. No message or log field quotes the token."""
    header = request.header(contract.SIGNATURE_HEADER)
    token = crm_token(request, path_token)
    signed = header is not None and contract.accepts_signature(settings.crm_auth)
    if token is not None and not signed:
        if not contract.accepts_token(settings.crm_auth):
            _reject(401, "unauthorized", "token authentication is not enabled", detail="token_disabled")
        _require_secret_token(token, settings.crm_token_secret_id, "token")
        return
    if not contract.accepts_signature(settings.crm_auth):
        detail = "missing" if header is None else "signature_disabled"
        _reject(401, "unauthorized", "missing token", detail=detail)
    check = _check_secret(
        settings.crm_secret_id,
        lambda keys: contract.verify(header, raw, keys),
        retry_if=lambda result: result is contract.SignatureCheck.MISMATCH,
    )
    if check is not contract.SignatureCheck.VALID:
        _reject(401, "unauthorized", f"signature {check.value}", detail=check.value)


def ingest_crm(request: Request, settings: Settings, path_token: str | None = None) -> Outcome:
    """A CRM order-status event, authenticated by an HMAC signature over the raw body or, where
    the deployment accepts it, by a static token (`path_token`: the one in the URL path)."""
    # Imported by the first CRM request (with the phone numbers' rules): a Telegram webhook never loads it.
    with coldstart.paused("pipeline.crm.event_model"):  # the first CRM request: see pipeline.coldstart
        from pipeline.crm import event_model

    def work() -> Outcome:
        raw = request.raw_body()
        _authenticate_crm(request, raw, settings, path_token)
        payload = parse_json(raw)
        ignored = ignored_crm_type(payload)
        if ignored is not None:
            return ignore("crm", ignored)
        region = settings.phone_default_region or None
        event = _validate(
            "CrmEvent", lambda: event_model.CrmEvent.parse(payload, phone_default_region=region), 422
        )
        envelope = Envelope(
            event_id=crm_event_id(event.event_id),
            source="crm",
            type=event.type,
            correlation_id=request.correlation_id,
            received_at=utc_now(),
            # As received, but with the phone in E.164: the SMS consumer keys on it.
            payload=event.normalised_payload(payload),
        )
        attributes: dict[str, str | None] = {
            "source": "crm",
            "type": event.type,
            "status": event.order.status,
        }
        return publish(envelope, attributes, settings.topic_arn)

    return _handle("crm", work)


# -- CRMs that post their own webhooks ---------------------------------------------------------
def _form_body(request: Request) -> bytes:
    """The body of a form route (Bitrix24 and amoCRM post `application/x-www-form-urlencoded`):
    415 for any other Content-Type, so a JSON body is told what the route reads rather than
    refused for a token or an event it never carries. The type sent is quoted only when it
    looks like one."""
    content_type = request.header("Content-Type")
    if not forms.is_form(content_type):
        media_type = (content_type or "").partition(";")[0].strip() or "none"
        shown = media_type if media_type == "none" or _MEDIA_TYPE.fullmatch(media_type) else "unreadable"
        message = f"body must be {forms.CONTENT_TYPE} (the form Bitrix24 and amoCRM post), not {shown}"
        _reject(415, UNSUPPORTED_MEDIA_TYPE_REASON, message, detail=shown)
    return request.raw_body()


def _reject_form(error: forms.FormError) -> NoReturn:
    if isinstance(error, forms.FormTooLarge):
        _reject(413, "oversized", str(error))
    _reject(400, INVALID_REASON, f"body is not a form-encoded webhook: {error}")


def _form(request: Request) -> dict[str, Any]:
    """The form body as nested dicts (a Bitrix24 event: a few fields)."""
    raw = _form_body(request)
    try:
        return forms.parse_form(raw)
    except forms.FormError as error:
        _reject_form(error)


def _delivery_id(*parts: object) -> str:
    """An event id for one delivery. These CRMs give an event no id of their own, and a retried
    delivery is not told from a new change by its body: each delivery is its own event, and the
    consumer's read of the order's current state (and the sms consumer's history) makes a
    repeat harmless."""
    return ":".join(str(part) for part in (*parts, uuid.uuid4().hex))


def ingest_bitrix24(request: Request, settings: Settings) -> Outcome:
    """A Bitrix24 outgoing webhook (ONCRMDEALADD, ONCRMDEALUPDATE), authenticated by the
    portal's application token in the body (`auth[application_token]`): the form is parsed
    first, since the credential is in it. Published without the `auth` block's tokens."""

    # Imported by the first Bitrix24 request: the other routes never need its models or REST client.
    from pipeline.crm import bitrix24

    def work() -> Outcome:
        if not settings.bitrix24_app_token_secret_id:
            _reject(404, "not_found", "Bitrix24 is not connected (bitrix24_stages is not set)")
        form = _form(request)
        auth = form.get("auth")
        token = auth.get("application_token") if isinstance(auth, dict) else None
        _require_secret_token(
            token if isinstance(token, str) else None,
            settings.bitrix24_app_token_secret_id,
            "application token",
        )
        try:
            event = bitrix24.OutgoingEvent.from_form(form)
        except ValueError as error:
            errors = listed_errors(error)
            _reject(422, INVALID_REASON, "body is not a Bitrix24 deal event", errors)
        if event.event not in bitrix24.DEAL_EVENTS:
            _reject(
                422,
                UNSUPPORTED_EVENT_REASON,
                f"event {event.event[:64]!r} is not handled; subscribe the webhook to "
                f"{' and '.join(bitrix24.DEAL_EVENTS)} only",
            )
        payload: dict[str, Any] = {
            "event": event.event,
            "event_handler_id": event.event_handler_id,
            "data": {"FIELDS": {"ID": str(event.deal_id)}},
            "ts": str(event.ts) if event.ts is not None else None,
            "auth": {"domain": event.domain, "member_id": event.member_id},
        }
        envelope = Envelope(
            event_id=_delivery_id("bitrix24", event.domain or "-", "deal", event.deal_id),
            source="bitrix24",
            type=event.event,
            correlation_id=request.correlation_id,
            received_at=utc_now(),
            payload=payload,
        )
        return publish(envelope, {"source": "bitrix24", "type": event.event}, settings.topic_arn)

    return _handle("bitrix24", work)


AMOCRM_EVENT_TYPE = "lead.status_changed"


def _listed_errors(refused: Sequence[RefusedEntry]) -> list[dict[str, Any]]:
    """The field errors of the first REFUSED_LEADS_LISTED refused entries."""
    return [error for entry in refused[:REFUSED_LEADS_LISTED] for error in entry.errors]


def _record_refused_leads(source: Source, refused: Sequence[RefusedEntry]) -> list[dict[str, Any]]:
    """Log and count the leads of a batch refused while the rest was published (on a metric line
    of its own: the request's EventsAccepted has other dimensions); their listed errors."""
    count, errors = len(refused), _listed_errors(refused)
    logger.warning(
        "Leads refused, the rest of the batch published",
        extra={"source": source, "reason": INVALID_REASON, "refused": count, "errors": errors},
    )
    with single_metric(name="EventsRejected", unit=MetricUnit.Count, value=count) as metric:
        metric.add_dimension(name="source", value=source)
        metric.add_dimension(name="reason", value=INVALID_REASON)
    return errors


def ingest_amocrm(request: Request, settings: Settings, path_token: str) -> Outcome:
    """An amoCRM webhook (lead status changed), authenticated by the `crm_token` secret in its
    URL (`POST /crm/amocrm/<token>`: amoCRM cannot sign or set headers). Every lead of the batch
    is published as its own event; answered 200 only once all are published (a retried batch
    republishes the first ones, which their consumer reads as the repeats they are). A malformed
    lead is refused alone: the answer is 200 with the others' event ids and the refused leads'
    `errors` (a resend cannot mend them), 422 when no lead is valid."""
    # Imported by the first amoCRM request: the other routes never need its models or REST client.
    from pipeline.crm import amocrm

    def work() -> Outcome:
        _require_secret_token(path_token, settings.crm_token_secret_id, "token")
        raw = _form_body(request)
        try:
            webhook = amocrm.read_status_webhook(raw)
        except forms.FormError as error:
            _reject_form(error)
        except amocrm.NoStatusChanges as error:
            _reject(422, UNSUPPORTED_EVENT_REASON, str(error))
        except amocrm.AmoWebhookError as error:
            _reject(
                422, INVALID_REASON, f"body is not an amoCRM lead status webhook: {error}", [*error.errors]
            )
        refused = webhook.refused
        if not webhook.changes:
            message = "no lead of the webhook is a valid status change"
            _reject(422, INVALID_REASON, message, _listed_errors(refused), count=len(refused))
        account = webhook.account
        event_ids = []
        for change in webhook.changes:
            envelope = Envelope(
                event_id=_delivery_id("amocrm", account.id or "-", "lead", change.lead_id),
                source="amocrm",
                type=AMOCRM_EVENT_TYPE,
                correlation_id=request.correlation_id,
                received_at=utc_now(),
                # The lead as the webhook names its fields: id, status_id, pipeline_id, old_*.
                payload={
                    "account": account.to_payload(),
                    "lead": change.to_payload(),
                },
            )
            publish(envelope, {"source": "amocrm", "type": AMOCRM_EVENT_TYPE}, settings.topic_arn)
            event_ids.append(envelope.event_id)
        body: dict[str, Any] = {"ok": True, "event_ids": event_ids}
        if refused:
            body |= {"refused": len(refused), "errors": _record_refused_leads("amocrm", refused)}
        return Outcome(200, body)

    return _handle("amocrm", work)
