"""POST /crm/bitrix24 and POST /crm/amocrm/<token>: CRMs that post their own form-encoded webhooks.

Bitrix24 authenticates with its application token inside the body (`auth[application_token]`),
amoCRM with the `crm_token` in the URL path. Both are answered as soon as the event is published
(the consumers read the deal or lead later); the tokens are never published, logged or echoed.
"""

from __future__ import annotations

import urllib.parse
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pipeline import aws
from pipeline.crm import forms
from tests.support import amocrm_webhooks
from tests.unit.webhook.support import (
    CRM_TOKEN,
    FIXTURES,
    CapturedOutput,
    Invoke,
    Pipeline,
    http_event,
    leaked,
    metrics_emitted,
    response_json,
)

BITRIX24_FIXTURES = FIXTURES / "crm" / "bitrix24"
AMOCRM_FIXTURES = FIXTURES / "crm" / "amocrm"
# The token in the Bitrix24 fixtures (what the portal shows for its outgoing webhook).
BITRIX24_TOKEN = "localBitrixAppToken0123456789"
FORM = "application/x-www-form-urlencoded"


def form_body(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def with_field(body: str, key: str, value: str) -> str:
    """`body` with form field `key` set to `value` (replaced where present, else added)."""
    fields = [(k, v) for k, v in urllib.parse.parse_qsl(body, keep_blank_values=True) if k != key]
    return urllib.parse.urlencode([*fields, (key, value)])


def bitrix24_request(body: str) -> dict[str, Any]:
    event = http_event("/crm/bitrix24", body=body, headers={"content-type": FORM})
    event["routeKey"] = event["requestContext"]["routeKey"] = "POST /crm/bitrix24"
    return event


def amocrm_request(body: str, token: str = CRM_TOKEN) -> dict[str, Any]:
    event = http_event(f"/crm/amocrm/{token}", body=body, headers={"content-type": FORM})
    event["routeKey"] = event["requestContext"]["routeKey"] = "POST /crm/amocrm/{token}"
    event["pathParameters"] = {"token": token}
    return event


@pytest.fixture
def bitrix24_connected(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> str:
    """Bitrix24 connected (`bitrix24_stages` set): the application token's secret, as the stack gives it."""
    secret = aws.client("secretsmanager").create_secret(
        Name=f"bitrix24-app-token-{uuid.uuid4().hex[:12]}", SecretString=BITRIX24_TOKEN
    )
    monkeypatch.setenv("BITRIX24_APP_TOKEN_SECRET_ID", secret["ARN"])
    return str(secret["ARN"])


def assert_refused(
    response: dict[str, Any],
    pipeline: Pipeline,
    output: CapturedOutput,
    status: int,
    source: str,
    reason: str,
) -> None:
    assert response["statusCode"] == status
    assert response_json(response)["error"] == reason
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": source, "reason": reason}) in metrics_emitted(output.lines())


# -- both: what a form route reads ------------------------------------------------------------------
JSON_EVENT = '{"event": "ONCRMDEALUPDATE", "data": {"FIELDS": {"ID": "759"}}, "leads": {"status": []}}'


@pytest.mark.parametrize(
    ("source", "content_type", "named"),
    [
        ("bitrix24", "application/json", "application/json"),
        ("amocrm", "application/json; charset=utf-8", "application/json"),
        ("bitrix24", "text/plain", "text/plain"),
        ("amocrm", None, "none"),
        ("amocrm", f"{CRM_TOKEN} +375291234567", "unreadable"),
    ],
    # Not the values: the last one carries a token and a phone number.
    ids=["bitrix24-json", "amocrm-json-charset", "bitrix24-text", "amocrm-none", "amocrm-unreadable"],
)
def test_a_body_that_is_not_a_form_is_415_naming_the_form_and_publishes_nothing(
    invoke: Invoke,
    pipeline: Pipeline,
    bitrix24_connected: str,
    output: CapturedOutput,
    source: str,
    content_type: str | None,
    named: str,
) -> None:
    """Bitrix24 answered a JSON body 401 "missing application token", amoCRM 422 "is it
    subscribed...": neither said what the route reads."""
    request = bitrix24_request(JSON_EVENT) if source == "bitrix24" else amocrm_request(JSON_EVENT)
    if content_type is None:
        del request["headers"]["content-type"]
    else:
        request["headers"]["content-type"] = content_type

    response = invoke(request)

    assert_refused(response, pipeline, output, 415, source, "unsupported_media_type")
    message = response_json(response)["message"]
    assert message.startswith("body must be application/x-www-form-urlencoded") and message.endswith(named)
    assert leaked(response["body"], token=CRM_TOKEN, phone="375291234567") == []


def test_an_amocrm_body_that_is_not_a_form_is_judged_after_the_token(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    """An unauthenticated caller learns nothing about what the route reads."""
    request = amocrm_request(JSON_EVENT, token="crmWrongToken0000000000000000000000000000000000")
    request["headers"]["content-type"] = "application/json"

    assert_refused(invoke(request), pipeline, output, 401, "amocrm", "unauthorized")


# -- Bitrix24 -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("event", "deal_id", "ts"),
    [("ONCRMDEALUPDATE", "759", "1704784507"), ("ONCRMDEALADD", "760", "1704780000")],
)
def test_a_bitrix24_deal_event_is_published_without_its_tokens(
    invoke: Invoke,
    pipeline: Pipeline,
    bitrix24_connected: str,
    output: CapturedOutput,
    event: str,
    deal_id: str,
    ts: str,
) -> None:
    body = form_body(BITRIX24_FIXTURES / f"{event}.form")

    response = invoke(bitrix24_request(body))

    assert response["statusCode"] == 200, response["body"]
    [published] = pipeline.published()
    envelope = published.envelope
    assert published.attributes == {"source": "bitrix24", "type": event}
    assert (envelope["source"], envelope["type"]) == ("bitrix24", event)
    assert envelope["payload"]["data"] == {"FIELDS": {"ID": deal_id}}
    assert envelope["payload"]["ts"] == ts
    assert envelope["payload"]["auth"] == {
        "domain": "example-shop.bitrix24.by",
        "member_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    }
    assert response_json(response)["event_id"] == envelope["event_id"]
    assert envelope["event_id"].startswith(f"bitrix24:example-shop.bitrix24.by:deal:{deal_id}:")
    assert leaked(str(published) + response["body"] + output.text(), token=BITRIX24_TOKEN) == []


def test_a_resent_bitrix24_event_is_a_delivery_of_its_own(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str
) -> None:
    """Bitrix24 gives an event no id, and two changes in one second post the same body: each
    delivery is published under its own id (the consumer reads the deal's state, which makes a
    repeat harmless), so no change can be taken for another's duplicate."""
    body = form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form")

    assert invoke(bitrix24_request(body))["statusCode"] == 200
    assert invoke(bitrix24_request(body))["statusCode"] == 200

    ids = [p.envelope["event_id"] for p in pipeline.published()]
    assert len(ids) == 2 and len(set(ids)) == 2


@pytest.mark.parametrize(
    ("token", "detail"), [("wrongBitrixAppToken0123456789", "mismatch"), ("", "missing"), (None, "missing")]
)
def test_a_bitrix24_event_without_the_application_token_is_401_and_publishes_nothing(
    invoke: Invoke,
    pipeline: Pipeline,
    bitrix24_connected: str,
    output: CapturedOutput,
    token: str | None,
    detail: str,
) -> None:
    body = form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form")
    if token is None:
        fields = urllib.parse.parse_qsl(body, keep_blank_values=True)
        body = urllib.parse.urlencode([(k, v) for k, v in fields if k != "auth[application_token]"])
    else:
        body = with_field(body, "auth[application_token]", token)

    response = invoke(bitrix24_request(body))

    assert response["statusCode"] == 401
    message = "missing application token" if detail == "missing" else "wrong application token"
    assert response_json(response) == {"ok": False, "error": "unauthorized", "message": message}
    lines = output.lines()
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert warning["detail"] == detail
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": "bitrix24", "reason": "unauthorized"}) in metrics_emitted(lines)


def test_the_previous_bitrix24_token_is_accepted_during_the_grace_period(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str
) -> None:
    """The operator saves a new outgoing webhook (a new token) and pastes it: the portal's queued
    events with the old one still go through for SECRET_ROTATION_GRACE_SECONDS."""
    pipeline.rotate(bitrix24_connected, "newBitrixAppToken9876543210")
    old = form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form")
    new = with_field(old, "auth[application_token]", "newBitrixAppToken9876543210")

    assert invoke(bitrix24_request(new))["statusCode"] == 200
    assert invoke(bitrix24_request(old))["statusCode"] == 200
    assert len(pipeline.published()) == 2


def test_a_bitrix24_event_other_than_a_deal_event_is_422_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str, output: CapturedOutput
) -> None:
    body = with_field(form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form"), "event", "ONCRMLEADADD")

    response = invoke(bitrix24_request(body))

    assert_refused(response, pipeline, output, 422, "bitrix24", "unsupported_event")
    assert "ONCRMDEALADD and ONCRMDEALUPDATE" in response_json(response)["message"]


def test_a_bitrix24_deal_event_without_a_deal_id_is_422_naming_the_field(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str, output: CapturedOutput
) -> None:
    body = with_field(
        form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form"), "data[FIELDS][ID]", "not-a-number"
    )

    response = invoke(bitrix24_request(body))

    assert_refused(response, pipeline, output, 422, "bitrix24", "invalid")
    assert ["data[FIELDS][ID]"] in [error["loc"][:1] for error in response_json(response)["errors"]] or any(
        "data[FIELDS][ID]" in str(error["loc"]) for error in response_json(response)["errors"]
    )


def test_a_bitrix24_body_that_is_not_a_form_is_400(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str, output: CapturedOutput
) -> None:
    response = invoke(bitrix24_request("a=1&a=2"))

    assert_refused(response, pipeline, output, 400, "bitrix24", "invalid")


def test_without_bitrix24_connected_its_route_is_404(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BITRIX24_APP_TOKEN_SECRET_ID", raising=False)

    response = invoke(bitrix24_request(form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form")))

    assert_refused(response, pipeline, output, 404, "bitrix24", "not_found")


# -- amoCRM ---------------------------------------------------------------------------------------
def test_an_amocrm_batch_publishes_one_event_per_lead_in_order(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    response = invoke(amocrm_request(form_body(AMOCRM_FIXTURES / "lead_status_two_leads.form")))

    assert response["statusCode"] == 200, response["body"]
    published = pipeline.published()
    leads = [p.envelope["payload"]["lead"] for p in published]
    assert [(lead["id"], lead["old_status_id"], lead["status_id"]) for lead in leads] == [
        (21804135, 61482546, 61482550),
        (21804177, 61482550, 142),
    ]
    assert {lead["pipeline_id"] for lead in leads} == {7391542}
    assert all(p.attributes == {"source": "amocrm", "type": "lead.status_changed"} for p in published)
    assert published[0].envelope["payload"]["account"]["subdomain"] == "exampleshop"
    assert response_json(response)["event_ids"] == [p.envelope["event_id"] for p in published]
    assert leaked(str(published) + response["body"] + output.text(), token=CRM_TOKEN) == []


def test_an_amocrm_webhook_with_a_wrong_token_in_its_url_is_401_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    wrong = "crmWrongToken0000000000000000000000000000000000"

    response = invoke(amocrm_request(form_body(AMOCRM_FIXTURES / "lead_status_two_leads.form"), token=wrong))

    assert_refused(response, pipeline, output, 401, "amocrm", "unauthorized")
    assert leaked(output.text() + response["body"], token=wrong) == []


@pytest.mark.parametrize("source", ["bitrix24", "amocrm"])
def test_a_malformed_event_is_labelled_invalid_alike_on_both_crm_routes(
    invoke: Invoke, pipeline: Pipeline, bitrix24_connected: str, output: CapturedOutput, source: str
) -> None:
    """A field that is not a number: the same reason in the answer, the metric and the log, and
    the same `errors` naming the form field (amoCRM's was `unsupported_event`, errors-less)."""
    if source == "bitrix24":
        field = "data[FIELDS][ID]"
        body = with_field(form_body(BITRIX24_FIXTURES / "ONCRMDEALUPDATE.form"), field, "not-a-number")
        request = bitrix24_request(body)
    else:
        field = "leads[status][0][status_id]"
        pairs = amocrm_webhooks.status_batch_pairs(leads=1, custom_fields_per_lead=3)
        request = amocrm_request(
            amocrm_webhooks.form([(k, "not-a-number" if k == field else v) for k, v in pairs])
        )

    response = invoke(request)

    assert response["statusCode"] == 422
    body = response_json(response)
    assert (body["error"], [error["loc"] for error in body["errors"]]) == ("invalid", [[field]])
    assert "not-a-number" not in response["body"]
    assert pipeline.published() == []
    lines = output.lines()
    assert metrics_emitted(lines) == [("EventsRejected", {"source": source, "reason": "invalid"})]
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert (warning["message"], warning["source"], warning["reason"]) == (
        "Request rejected",
        source,
        "invalid",
    )
    assert [error["loc"] for error in warning["errors"]] == [[field]]


def test_an_amocrm_webhook_not_about_status_changes_is_422_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    body = "leads%5Badd%5D%5B0%5D%5Bid%5D=1&account%5Bid%5D=31415926&account%5Bsubdomain%5D=exampleshop"

    response = invoke(amocrm_request(body))

    assert_refused(response, pipeline, output, 422, "amocrm", "unsupported_event")
    assert "lead status changed" in response_json(response)["message"]


def test_an_amocrm_batch_whose_second_publish_fails_is_503_so_amocrm_resends_it(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    sns = aws.client("sns")
    real_publish = sns.publish
    calls: list[int] = []

    def publish(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "InternalError", "Message": "down"}}, "Publish")
        return real_publish(**kwargs)

    monkeypatch.setattr(sns, "publish", publish)

    response = invoke(amocrm_request(form_body(AMOCRM_FIXTURES / "lead_status_two_leads.form")))

    assert response["statusCode"] == 503
    assert [p.envelope["payload"]["lead"]["id"] for p in pipeline.published()] == [21804135]


# -- batches: every lead of a realistic batch, custom fields unread --------------------------------
def test_an_amocrm_batch_of_100_leads_with_50_custom_fields_each_publishes_every_lead(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    """24 leads with 10 custom fields each were refused whole (over a 1,000-field form limit)."""
    body = amocrm_webhooks.status_batch(leads=100, custom_fields_per_lead=50)

    response = invoke(amocrm_request(body))

    assert response["statusCode"] == 200, response["body"][:300]
    leads = [p.envelope["payload"]["lead"] for p in pipeline.published()]
    first = amocrm_webhooks.FIRST_LEAD_ID
    assert [lead["id"] for lead in leads] == list(range(first, first + 100))
    assert leads[0] == {
        "id": first,
        "status_id": amocrm_webhooks.STATUS_ID,
        "pipeline_id": amocrm_webhooks.PIPELINE_ID,
        "old_status_id": amocrm_webhooks.OLD_STATUS_ID,
        "old_pipeline_id": amocrm_webhooks.PIPELINE_ID,
    }
    assert len(response_json(response)["event_ids"]) == 100
    accepted = [m for m in metrics_emitted(output.lines()) if m[0] == "EventsAccepted"]
    assert accepted and all(m[1] == {"source": "amocrm", "type": "lead.status_changed"} for m in accepted)


def test_an_amocrm_lead_that_is_malformed_is_refused_alone_and_the_rest_of_the_batch_is_published(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    pairs = amocrm_webhooks.status_batch_pairs(leads=3, custom_fields_per_lead=5)
    broken = [(k, "soon" if k == "leads[status][1][status_id]" else v) for k, v in pairs]

    response = invoke(amocrm_request(amocrm_webhooks.form(broken)))

    assert response["statusCode"] == 200, response["body"]
    first = amocrm_webhooks.FIRST_LEAD_ID
    assert [p.envelope["payload"]["lead"]["id"] for p in pipeline.published()] == [first, first + 2]
    body = response_json(response)
    assert body["refused"] == 1
    assert [error["loc"] for error in body["errors"]] == [["leads[status][1][status_id]"]]
    assert "soon" not in response["body"]
    lines = output.lines()
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert (warning["source"], warning["reason"], warning["refused"]) == ("amocrm", "invalid", 1)
    assert ("EventsRejected", {"source": "amocrm", "reason": "invalid"}) in metrics_emitted(lines)
    assert ("EventsAccepted", {"source": "amocrm", "type": "lead.status_changed"}) in metrics_emitted(lines)


def rejected_counts(lines: list[dict[str, Any]]) -> list[float]:
    """The values of every EventsRejected{source=amocrm, reason=invalid} metric in `lines`."""
    return [
        value
        for line in CapturedOutput.metric_lines(lines)
        if "EventsRejected" in line and (line.get("source"), line.get("reason")) == ("amocrm", "invalid")
        for value in (
            line["EventsRejected"] if isinstance(line["EventsRejected"], list) else [line["EventsRejected"]]
        )
    ]


def test_an_amocrm_batch_without_a_valid_lead_is_422_counting_every_lead(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    pairs = amocrm_webhooks.status_batch_pairs(leads=3, custom_fields_per_lead=2)
    broken = [(k, "" if k.endswith("[pipeline_id]") and "old_" not in k else v) for k, v in pairs]

    response = invoke(amocrm_request(amocrm_webhooks.form(broken)))

    assert response["statusCode"] == 422
    assert response_json(response)["error"] == "invalid"
    assert pipeline.published() == []
    assert rejected_counts(output.lines()) == [3.0]


def test_an_amocrm_answer_itemises_the_first_refused_leads_and_counts_them_all(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, webhook: ModuleType
) -> None:
    """A batch of many broken leads cannot grow the answer (or the log line) without bound."""
    listed = webhook.ingest.REFUSED_LEADS_LISTED
    pairs = amocrm_webhooks.lead_fields(0, amocrm_webhooks.FIRST_LEAD_ID, 1)
    for index in range(1, listed * 3 + 1):
        pairs += [(f"leads[status][{index}][id]", str(amocrm_webhooks.FIRST_LEAD_ID + index))]

    response = invoke(amocrm_request(amocrm_webhooks.form(pairs + amocrm_webhooks.account_fields())))

    assert response["statusCode"] == 200, response["body"][:300]
    assert len(pipeline.published()) == 1
    body = response_json(response)
    assert body["refused"] == listed * 3
    named = {error["loc"][0].split("]")[1] for error in body["errors"]}
    assert named == {f"[{index}" for index in range(1, listed + 1)}
    assert rejected_counts(output.lines()) == [listed * 3.0]


def test_an_amocrm_body_over_the_api_gateway_bound_is_413_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    body = form_body(AMOCRM_FIXTURES / "lead_status_two_leads.form")
    body += "&padding=" + "x" * (forms.MAX_BODY_BYTES - len(body))

    response = invoke(amocrm_request(body))

    assert_refused(response, pipeline, output, 413, "amocrm", "oversized")
    assert f"{forms.MAX_BODY_BYTES}-byte limit" in response_json(response)["message"]
