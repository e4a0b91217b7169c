"""Issue 43 on the local runtime with the HTTP SMS gateway: a customer's STOP reply reaches the
gateway's stand-in, which calls the pipeline's inbound route back (the URL the runtime pasted into
its console, `POST /sms/inbound/<token>`); the customer's next order SMS ends `suppressed`, never
sent nor dead-lettered; START brings them back. A wrong token is 401."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.support import (
    SENT_PHONES,
    Pipeline,
    http,
    order_status_changed,
    phone_number,
    wait_for,
)

INBOUND_SCENARIO = 87


def _reply(pipeline: Pipeline, phone: str, text: str) -> dict[str, Any]:
    """The customer's reply reaching the gateway: it posts it to the pipeline and says what it got."""
    answer: dict[str, Any] = pipeline.fake("sms").control("/_inbound", {"from": phone, "text": text})
    return answer


def _records(pipeline: Pipeline, order_id: str) -> list[dict[str, Any]]:
    resources = pipeline.runtime.resources
    assert resources is not None
    items = pipeline.runtime.client("dynamodb").scan(TableName=resources.tables["journal"])["Items"]
    return [
        {name: next(iter(value.values())) for name, value in item.items()}
        for item in items
        if item["id"]["S"].startswith("sms#") and item.get("order_id", {}).get("S", "").endswith(order_id)
    ]


def _sends(pipeline: Pipeline, order_id: str) -> list[dict[str, Any]]:
    return [
        c
        for c in pipeline.fake("sms").calls("/messages")
        if c["method"] == "POST" and order_id in str(c["body"])
    ]


def test_a_customer_who_replies_stop_gets_no_order_sms_until_start(http_gateway_pipeline: Pipeline) -> None:
    pipeline = http_gateway_pipeline
    phone = phone_number(INBOUND_SCENARIO, 1)
    SENT_PHONES.add(phone)
    stopped, back = f"E2E-{INBOUND_SCENARIO}-1", f"E2E-{INBOUND_SCENARIO}-2"

    answer = _reply(pipeline, phone, "STOP")
    assert (answer["status"], answer["body"]["action"]) == (200, "opt_out")
    event = order_status_changed(f"evt-e2e-{INBOUND_SCENARIO}-1", stopped, "shipped", "paid", phone)
    assert pipeline.send_crm_event(event) == 200
    [record] = wait_for(
        lambda: [r for r in _records(pipeline, stopped) if r["state"] == "suppressed"], 30, "a suppressed SMS"
    )
    assert pipeline.runtime.wait_until_drained(timeout=30)
    assert _sends(pipeline, stopped) == [] and pipeline.dlq_depth("sms") == 0
    assert record["attempt_count"] == "0"

    answer = _reply(pipeline, phone, "start")
    assert (answer["status"], answer["body"]["action"]) == (200, "opt_in")
    event = order_status_changed(f"evt-e2e-{INBOUND_SCENARIO}-2", back, "shipped", "paid", phone)
    assert pipeline.send_crm_event(event) == 200
    wait_for(lambda: _sends(pipeline, back), 30, "the SMS after START")

    status, body = http(
        "POST",
        f"{pipeline.runtime.api_url}/sms/inbound/not-the-token",
        json.dumps({"from": phone, "text": "STOP"}).encode(),
        {"Content-Type": "application/json"},
    )
    assert (status, body["error"]) == (401, "unauthorized")
