"""The whole pipeline, end to end, through its HTTP endpoint only (issues 5 and 6).

One local runtime serves every scenario (tests/e2e/conftest.py); each scenario uses ids of its
own (`Ids(n)`), leaves no fault behind and drains every queue. Assertions read what left the
pipeline: the fakes' `/_calls`, the tables, queues and journal in moto, the runtime's status JSON
and the functions' logs. The scenarios run in file order; the log scan comes last so that it
covers everything the run wrote.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import pytest
from aiogram.methods import AnswerCallbackQuery, SendMessage
from aiogram.types import Update

from local.policy_check import StackSynthesis, check_directory, read_recorded
from pipeline.registry import by_name, matches

# Scenarios whose calls the policy check at the end of this module must see: they run in this
# module's worker (`--dist loadfile` gives each worker its own session runtime).
from tests.e2e.broadcast_scenario import (  # noqa: F401
    test_an_operator_broadcast_reaches_each_subscriber_once_and_notes_the_one_who_blocked_the_bot,
)
from tests.e2e.support import (
    BOT_USERNAME,
    OTHER_PIPELINES,
    SENT_PHONES,
    Ids,
    Pipeline,
    answered,
    callback_query,
    contact_message,
    group_chat,
    http,
    message,
    order_status_changed,
    phone_number,
    private_chat,
    texts_to,
    user,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.minutes(6)]

# Scenario numbers: each scenario's update, user, chat and order ids and phone numbers are its own.
BURST = 1
CRM_OUTAGE = 2
CRM_REFUSAL = 3
SNS_FAILURE = 4
SNS_LOST_ANSWER = 5
SMS_HANG = 6
SMS_LOST_ANSWER = 7
LOG_SCAN = 8
SMS_NO_EVIDENCE = 9
CRM_TOKEN_PATH = 10
BITRIX24_DEAL = 11
BITRIX24_OUTAGE = 12
BITRIX24_UNMAPPED = 13
AMOCRM_BATCH = 14
RESTART = 15
TELEGRAM_CONSUMERS = ("store", "crm", "autoreply", "analytics", "ai")
METRIC = "TelegramUpdates"  # the analytics consumer's EMF metric, one per update


# -- updates and the side effects each one is owed ----------------------------------------------------
@dataclass(frozen=True)
class Sent:
    """One update and what the pipeline owes it (None: nothing of that kind)."""

    update: dict[str, Any]
    chat_id: int
    lead_user: int | None = None  # a user's first message: one CRM lead for that user
    reply_chat: int | None = None  # a command that has a reply: one sendMessage to this chat
    callback_id: str | None = None  # a button press: one answerCallbackQuery
    ai_text: str | None = None  # a message with text: one Bedrock converse call on this text

    @property
    def kind(self) -> str:
        return next(key for key in self.update if key != "update_id")

    @property
    def conversation_key(self) -> dict[str, str]:
        return {"pk": f"chat#{self.chat_id}", "sk": f"update#{self.update['update_id']:012d}"}


def start(ids: Ids, sender: dict[str, Any]) -> Sent:
    update_id = ids.update_id()
    text = f"/start ref{update_id}"  # a deep link: every text is unique
    update = {"update_id": update_id, "message": message(ids.number(), private_chat(sender), sender, text)}
    return Sent(update, sender["id"], lead_user=sender["id"], reply_chat=sender["id"], ai_text=text)


def text_message(ids: Ids, sender: dict[str, Any], first: bool = True, kind: str = "message") -> Sent:
    update_id = ids.update_id()
    text = f"Hello, how much is delivery for order {update_id}?"
    body = message(ids.number(), private_chat(sender), sender, text)
    if kind == "business_message":
        body["business_connection_id"] = f"bc-{update_id}"
    update = {"update_id": update_id, kind: body}
    return Sent(update, sender["id"], lead_user=sender["id"] if first else None, ai_text=text)


def help_command(ids: Ids, sender: dict[str, Any], chat: dict[str, Any]) -> Sent:
    update_id = ids.update_id()
    suffix = f"@{BOT_USERNAME}" if chat["type"] != "private" else ""
    text = f"/help{suffix} shipping {update_id}"
    update = {"update_id": update_id, "message": message(ids.number(), chat, sender, text)}
    return Sent(update, chat["id"], lead_user=sender["id"], reply_chat=chat["id"], ai_text=text)


def group_text(ids: Ids, sender: dict[str, Any]) -> Sent:
    update_id, chat = ids.update_id(), group_chat(ids.number())
    text = f"Hi all, question {update_id}"
    update = {"update_id": update_id, "message": message(ids.number(), chat, sender, text)}
    return Sent(update, chat["id"], lead_user=sender["id"], ai_text=text)


def shared_contact(ids: Ids, sender: dict[str, Any], phone: str) -> Sent:
    SENT_PHONES.add(phone)
    update = {"update_id": ids.update_id(), "message": contact_message(ids.number(), sender, phone)}
    return Sent(update, sender["id"], lead_user=sender["id"])


def button_press(ids: Ids, sender: dict[str, Any]) -> Sent:
    update_id = ids.update_id()
    query_id = f"{update_id}{sender['id']}"
    update = {"update_id": update_id, "callback_query": callback_query(query_id, sender, ids.number())}
    return Sent(update, sender["id"], callback_id=query_id)


def edited_text(ids: Ids, sender: dict[str, Any]) -> Sent:
    update_id = ids.update_id()
    edited = {
        **message(ids.number(), private_chat(sender), sender, f"edited {update_id}"),
        "edit_date": int(time.time()),
    }
    return Sent({"update_id": update_id, "edited_message": edited}, sender["id"])


def mixed_updates(ids: Ids, cycles: int, scenario: int) -> list[Sent]:
    """Ten kinds of update per cycle, from eight new users: what a busy bot receives."""
    sent: list[Sent] = []
    for cycle in range(cycles):
        ann = user(ids.number(), "Ann")

        def new_user() -> dict[str, Any]:
            return user(ids.number(), "Ben")

        sent += [
            start(ids, ann),
            help_command(ids, (ben := new_user()), private_chat(ben)),
            text_message(ids, new_user()),
            shared_contact(ids, new_user(), phone_number(scenario, cycle)),
            group_text(ids, new_user()),
            help_command(ids, new_user(), group_chat(ids.number())),
            button_press(ids, new_user()),
            edited_text(ids, new_user()),
            text_message(ids, ann, first=False),  # a known user writes again: no second lead
            text_message(ids, new_user(), kind="business_message"),
        ]
    return sent


def routed(sent: list[Sent], consumer: str) -> int:
    """How many of these updates the consumer's SNS filter policy (in the registry) lets through."""
    policy = by_name(consumer).filter_policy
    return sum(1 for item in sent if matches(policy, {"source": "telegram", "type": item.kind}))


# -- observing side effects -------------------------------------------------------------------------
@dataclass
class Effects:
    """Side effects per update identity, as counters (an exact-once check compares two of these)."""

    stored: Counter[str] = field(default_factory=Counter)  # event ids at the updates' conversation keys
    leads: Counter[int] = field(default_factory=Counter)  # CRM leads per Telegram user
    replies: Counter[int] = field(default_factory=Counter)  # sendMessage per chat
    callbacks: Counter[str] = field(default_factory=Counter)  # answerCallbackQuery per query id
    analytics: Counter[str] = field(default_factory=Counter)  # analytics log lines per event id
    ai: Counter[str] = field(default_factory=Counter)  # converse calls per message text

    def differences(self, other: Effects) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


def expected(pipeline: Pipeline, sent: list[Sent]) -> Effects:
    return Effects(
        stored=Counter(pipeline.event_id(item.update) for item in sent),
        leads=Counter(set(item.lead_user for item in sent if item.lead_user is not None)),
        replies=Counter(item.reply_chat for item in sent if item.reply_chat is not None),
        callbacks=Counter(item.callback_id for item in sent if item.callback_id is not None),
        analytics=Counter(pipeline.event_id(item.update) for item in sent),
        ai=Counter(item.ai_text for item in sent if item.ai_text is not None),
    )


def observed(pipeline: Pipeline, sent: list[Sent], *, leads: bool = True) -> Effects:
    """What happened for these updates (other scenarios' calls filtered out); `leads=False`: CRM not asked."""
    users = {item.update[item.kind]["from"]["id"] for item in sent}
    chats = {item.chat_id for item in sent}
    event_ids = {pipeline.event_id(item.update) for item in sent}
    texts = {item.ai_text for item in sent}
    telegram, bedrock = pipeline.fake("telegram"), pipeline.fake("bedrock")
    items = pipeline.items("conversations", [item.conversation_key for item in sent])
    created = [c["body"] for c in pipeline.fake("crm").calls("/leads") if c["fault"] is None] if leads else []
    replies = [call["body"] for call in telegram.calls("/sendMessage") if call["fault"] is None]
    answers = [call["body"] for call in telegram.calls("/answerCallbackQuery") if call["fault"] is None]
    prompts = [call["body"]["messages"][-1]["content"][0]["text"] for call in bedrock.calls("/converse")]
    return Effects(
        # `ai` may create the item (update_item) before `store` has written it: not stored yet.
        stored=Counter(item["event_id"] for item in items if "event_id" in item),
        leads=Counter(lead["telegram_user_id"] for lead in created if lead["telegram_user_id"] in users),
        replies=Counter(reply["chat_id"] for reply in replies if reply["chat_id"] in chats),
        callbacks=Counter(
            answer["callback_query_id"]
            for answer in answers
            if answer["callback_query_id"] in {i.callback_id for i in sent}
        ),
        analytics=Counter(
            record["event_id"]
            for record in pipeline.log_records("analytics")
            if record.get("message") == "analytics" and record.get("event_id") in event_ids
        ),
        ai=Counter(prompt for prompt in prompts if prompt in texts),
    )


def wait_for_effects(pipeline: Pipeline, sent: list[Sent], timeout: float, *, leads: bool = True) -> Effects:
    """Until every owed side effect happened (leads optional: the CRM may be down)."""
    owed = expected(pipeline, sent)
    if not leads:
        owed.leads = Counter()

    def settled() -> Effects | None:
        seen = observed(pipeline, sent, leads=leads)
        return seen if not seen.differences(owed) else None

    return wait_for(settled, timeout, f"side effects of {len(sent)} updates", interval=0.5)


def assert_exactly_once(pipeline: Pipeline, sent: list[Sent]) -> None:
    """After the queues drained: each owed side effect happened once, and nothing else for these updates."""
    assert pipeline.runtime.wait_until_drained(timeout=60)
    seen, owed = observed(pipeline, sent), expected(pipeline, sent)
    assert not seen.differences(owed), f"side effects differ from once per update in {seen.differences(owed)}"


def counters(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    """The functions' counters as the runtime last heard them (no queue depths: cheap to poll)."""
    return pipeline.runtime.status(refresh=False)


def delta(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], function: str, counter: str
) -> int:
    return int(after[function][counter]) - int(before[function][counter])


def send_all(pipeline: Pipeline, sent: list[Sent]) -> None:
    statuses = [pipeline.send_update(item.update) for item in sent]
    assert statuses == [200] * len(sent)


# -- scenarios ----------------------------------------------------------------------------------------
def test_two_hundred_updates_sent_three_times_each_have_every_side_effect_exactly_once(
    pipeline: Pipeline,
) -> None:
    sent = mixed_updates(Ids(BURST), cycles=20, scenario=BURST)
    assert len(sent) == 200
    for item in sent:
        Update.model_validate(item.update)  # real-shaped, by aiogram's reading of the Bot API
    before = counters(pipeline)
    copies = [item.update for item in sent for _ in range(3)]
    random.Random(5).shuffle(copies)  # copies of one update often arrive at the same time

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = Counter(pool.map(pipeline.send_update, copies))

    assert statuses == {200: 600}
    owed = {consumer: routed(sent, consumer) for consumer in TELEGRAM_CONSUMERS}

    def all_handled() -> bool:
        now = counters(pipeline)
        return all(delta(before, now, name, "processed") == count for name, count in owed.items())

    wait_for(all_handled, 240, "every update handled by each consumer", interval=1)
    assert pipeline.runtime.wait_until_drained(timeout=60)
    after = counters(pipeline)
    # The FIFO topic dropped the two copies of each update (same deduplication id, within five
    # minutes): no consumer ever saw one, so idempotency had nothing to skip.
    assert {name: delta(before, after, name, "duplicates") for name in owed} == dict.fromkeys(owed, 0)
    assert {name: delta(before, after, name, "dead_lettered") for name in owed} == dict.fromkeys(owed, 0)
    assert delta(before, after, "webhook", "requests") == 600
    # The burst kept the first workers busy while messages waited: more were started (Lambda's scaling).
    assert max(int(after[name]["workers"]) for name in owed) > 1
    assert_exactly_once(pipeline, sent)
    # The metric counts what the analytics lines count: one per unique update.
    records = pipeline.log_records("analytics")
    metric_total = sum(
        sum(r[METRIC]) if isinstance(r[METRIC], list) else r[METRIC] for r in records if METRIC in r
    )
    assert metric_total == sum(1 for r in records if r.get("message") == "analytics")
    for call in pipeline.fake("telegram").calls("/sendMessage"):
        SendMessage.model_validate(call["body"])
    for call in pipeline.fake("telegram").calls("/answerCallbackQuery"):
        AnswerCallbackQuery.model_validate(call["body"])


def test_crm_down_for_30_seconds_delays_only_the_leads_which_arrive_after_recovery(
    pipeline: Pipeline,
) -> None:
    ids, crm = Ids(CRM_OUTAGE), pipeline.fake("crm")
    sent = [start(ids, user(ids.number())) for _ in range(5)] + [
        text_message(ids, user(ids.number())) for _ in range(5)
    ]
    before = counters(pipeline)
    crm.inject(down_for=30)
    down_since, down_since_wall = time.monotonic(), time.time()
    wait_for(crm.is_down, 5, "the CRM to go down")

    send_all(pipeline, sent)

    # Every other consumer finishes while the CRM is still down.
    wait_for_effects(pipeline, sent, timeout=20, leads=False)
    assert crm.is_down(), "the other consumers were not faster than the CRM outage"
    assert time.monotonic() - down_since < 30
    # Then every lead arrives, once, after the CRM is back.
    wait_for(lambda: not crm.is_down(), 40, "the CRM to come back")
    wait_for_effects(pipeline, sent, timeout=120)
    assert_exactly_once(pipeline, sent)
    users = {item.lead_user for item in sent}
    lead_times = [c["time"] for c in crm.calls("/leads") if c["body"]["telegram_user_id"] in users]
    assert min(lead_times) >= down_since_wall + 29
    after = pipeline.status()
    assert delta(before, after, "crm", "retried") >= len(sent)
    assert delta(before, after, "crm", "dead_lettered") == 0
    assert after["crm"]["dlq_depth"] == 0


def test_a_lead_the_crm_refuses_waits_in_the_dlq_with_an_alarm_until_redriven(pipeline: Pipeline) -> None:
    ids, crm = Ids(CRM_REFUSAL), pipeline.fake("crm")
    refused = start(ids, user(ids.number()))
    crm.inject(fail_next=1, status=400, match="/leads")

    send_all(pipeline, [refused])

    wait_for(lambda: pipeline.dlq_depth("crm") == 1, 30, "the refused lead in the crm DLQ")
    assert pipeline.status()["crm"]["alarm"] is True
    assert [line.split()[0] for line in pipeline.runtime.status_lines() if "ALARM" in line] == ["crm"]
    [dead] = pipeline.dlq_messages("crm")
    assert pipeline.event_id(refused.update) in dead["Body"]
    assert "400" in dead["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    # Everything else is fine: the refused user's other side effects, and other users' leads.
    others = [start(ids, user(ids.number())) for _ in range(3)]
    send_all(pipeline, others)
    wait_for_effects(pipeline, others, timeout=30)
    wait_for_effects(pipeline, [refused], timeout=30, leads=False)
    assert observed(pipeline, [refused]).leads == Counter()

    crm.clear_faults()
    redrive = pipeline.ops("dlq", "redrive", "crm", "--yes")

    assert redrive.returncode == 0, redrive.stderr
    assert "moved 1 message(s)" in redrive.stdout
    wait_for_effects(pipeline, [refused], timeout=60)
    assert_exactly_once(pipeline, [refused, *others])
    status = pipeline.status()
    assert status["crm"]["dlq_depth"] == 0
    assert status["crm"]["alarm"] is False


def test_a_failed_sns_publish_answers_503_and_the_resend_is_processed_once(pipeline: Pipeline) -> None:
    ids, sns = Ids(SNS_FAILURE), pipeline.fake("sns")
    refused_by_sns, sns_unreachable = start(ids, user(ids.number())), start(ids, user(ids.number()))
    before = counters(pipeline)

    sns.inject(fail_next=100, status=500, match="Publish")
    assert pipeline.send_update(refused_by_sns.update) == 503
    sns.clear_faults()
    sns.inject(down_for=6)
    wait_for(sns.is_down, 5, "the SNS proxy to go down")
    assert pipeline.send_update(sns_unreachable.update) == 503
    wait_for(lambda: not sns.is_down(), 15, "the SNS proxy to come back")

    # Telegram resends what was not answered 200.
    send_all(pipeline, [refused_by_sns, sns_unreachable])

    assert_exactly_once(pipeline, [refused_by_sns, sns_unreachable])
    after = counters(pipeline)
    assert after["webhook"]["statuses"].get("503", 0) - before["webhook"]["statuses"].get("503", 0) == 2
    publishes = [
        call for call in sns.calls() if pipeline.event_id(refused_by_sns.update) in str(call["body"])
    ]
    assert [call["fault"] for call in publishes][-1] is None
    assert {call["fault"] for call in publishes[:-1]} == {"fail"}


def test_a_publish_whose_answer_is_lost_is_published_again_and_delivered_once(pipeline: Pipeline) -> None:
    ids, sns = Ids(SNS_LOST_ANSWER), pipeline.fake("sns")
    update = start(ids, user(ids.number()))
    before = counters(pipeline)
    sns.inject(drop_answer_next=1, match="Publish")

    send_all(pipeline, [update])  # the webhook's SNS client retries after the lost answer

    publishes = [call for call in sns.calls() if pipeline.event_id(update.update) in str(call["body"])]
    assert [call["fault"] for call in publishes] == ["drop_answer", None]
    assert_exactly_once(pipeline, [update])
    assert pipeline.runtime.wait_until_drained(timeout=60)
    after = counters(pipeline)
    # The retry carried the same deduplication id: the FIFO topic delivered the event once.
    for consumer in TELEGRAM_CONSUMERS:
        assert (
            delta(before, after, consumer, "processed"),
            delta(before, after, consumer, "duplicates"),
        ) == (1, 0)


@dataclass(frozen=True)
class SmsGateway:
    """How a scenario sees one SMS gateway's stand-in: its fake, its sends, what reached phones."""

    name: str  # the `sms_gateway` setting
    fake: str  # the stand-in's name in `Runtime.fakes`
    match: str  # a fault's `match` that aims at sends

    def sends(self, pipeline: Pipeline, text: str) -> list[dict[str, Any]]:
        if self.name == "http":
            calls = pipeline.fake(self.fake).calls("/messages")
            return [c for c in calls if c["method"] == "POST" and text in c["body"]["text"]]
        calls = pipeline.fake(self.fake).calls()
        return [c for c in calls if text in (c["body"] or {}).get("MessageBody", "")]

    def key(self, send: dict[str, Any]) -> str:
        body = send["body"]
        return str(body["client_reference"] if self.name == "http" else body["Context"]["notification_key"])

    def calls(self, pipeline: Pipeline, key: str) -> list[dict[str, Any]]:
        """Every call about this notification key: sends, and (HTTP) lookups."""
        calls = pipeline.fake(self.fake).calls()
        if self.name == "http":
            return [c for c in calls if key in str(c["body"]) or c["query"].get("client_reference") == key]
        return [c for c in calls if (c["body"] or {}).get("Context", {}).get("notification_key") == key]

    def reached_phones(self, pipeline: Pipeline, key: str) -> list[dict[str, Any]]:
        """The stand-in's messages that "reached a phone" under this notification key."""
        status, messages = http("GET", f"{pipeline.fake(self.fake).url}/_messages")
        assert status == 200
        if self.name == "http":
            return [m for m in messages if m["client_reference"] == key]
        return [m for m in messages if m["context"].get("notification_key") == key]


END_USER_MESSAGING = SmsGateway("end_user_messaging", "end_user_messaging", "SendTextMessage")
HTTP_GATEWAY = SmsGateway("http", "sms", "/messages")
# The default gateway (the stack's) runs in the session's pipeline; the HTTP one in a small one of its own.
GATEWAYS = [pytest.param(END_USER_MESSAGING, id="end_user_messaging"), pytest.param(HTTP_GATEWAY, id="http")]


@pytest.fixture
def on_gateway(request: pytest.FixtureRequest, pipeline: Pipeline) -> tuple[Pipeline, SmsGateway]:
    gateway: SmsGateway = request.param
    if gateway.name == pipeline.deployment.sms_gateway:
        return pipeline, gateway
    other: Pipeline = request.getfixturevalue("http_gateway_pipeline")
    return other, gateway


def sms_scenario(
    pipeline: Pipeline, gateway: SmsGateway, scenario: int, settled_by: str = "accepted", **fault: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Send an order event that owes one SMS while the gateway misbehaves; the journal record once
    in state `settled_by`, and every call the gateway got about it."""
    phone = phone_number(scenario, 1)
    SENT_PHONES.add(phone)
    order_id = f"E2E-{scenario}-1"
    event = order_status_changed(f"evt-e2e-{scenario}-{gateway.name}", order_id, "shipped", "paid", phone)
    pipeline.fake(gateway.fake).inject(**fault, match=gateway.match)

    assert pipeline.send_crm_event(event) == 200

    [first] = wait_for(lambda: gateway.sends(pipeline, order_id), 20, "the SMS worker's send")
    key = gateway.key(first)

    def settled() -> dict[str, Any] | None:
        record = pipeline.item("journal", {"id": f"sms#{key}"})
        return record if record is not None and record["state"] == settled_by else None

    record = wait_for(settled, 60, f"the SMS to be {settled_by}")
    # The CRM resends the same event, then the same change under a new id with the number written
    # as a person would: one customer, one transition, never a second SMS.
    assert pipeline.send_crm_event(event) == 200
    written = f"{phone[:3]} ({phone[3:7]}) {phone[7:9]}-{phone[9:]}"
    retried = {
        **event,
        "event_id": f"{event['event_id']}-retried",
        "customer": {**event["customer"], "phone": written},
    }
    assert pipeline.send_crm_event(retried) == 200
    assert pipeline.runtime.wait_until_drained(timeout=30)
    return record, gateway.calls(pipeline, key)


def sends(calls: list[dict[str, Any]], gateway: SmsGateway) -> list[dict[str, Any]]:
    return [c for c in calls if c["method"] == "POST"] if gateway.name == "http" else calls


def assert_closed_by_what_the_gateway_offers(
    pipeline: Pipeline, gateway: SmsGateway, record: dict[str, Any]
) -> None:
    """HTTP: the reconciler's lookup finds the message. End User Messaging has no lookup API:
    its delivery event (`sms_events`) proves the send, and then its delivery."""
    if gateway.name == "http":
        assert record["resolved_by"] == "lookup"
        return
    assert record["resolved_by"] == "delivery_event:TEXT_SUCCESSFUL"
    key = record["id"]
    delivered = wait_for(
        lambda: (
            (item := pipeline.item("journal", {"id": key}))
            and item.get("delivery_status") == "delivered"
            and item
        ),
        20,
        "the TEXT_DELIVERED event",
    )
    assert delivered["state"] == "accepted"


@pytest.mark.parametrize("on_gateway", GATEWAYS, indirect=True)
def test_an_sms_whose_answer_is_lost_is_unknown_then_reconciled_without_a_second_send(
    on_gateway: tuple[Pipeline, SmsGateway],
) -> None:
    pipeline, gateway = on_gateway
    record, calls = sms_scenario(pipeline, gateway, SMS_LOST_ANSWER, drop_answer_next=1)

    assert record["attempts"][0]["outcome"] == "unknown"
    assert "unknown_since" in record
    assert_closed_by_what_the_gateway_offers(pipeline, gateway, record)
    assert [c["fault"] for c in sends(calls, gateway)] == ["drop_answer"]  # never resent
    if gateway.name == "http":
        assert any(c["method"] == "GET" for c in calls), "the reconciler asked"
    assert len(gateway.reached_phones(pipeline, record["id"].removeprefix("sms#"))) == 1


@pytest.mark.parametrize("on_gateway", GATEWAYS, indirect=True)
def test_an_sms_gateway_hanging_past_the_timeout_is_unknown_then_reconciled_once(
    on_gateway: tuple[Pipeline, SmsGateway],
) -> None:
    pipeline, gateway = on_gateway
    # Past the client's timeout: the HTTP gateway gives up after 5 s, End User Messaging's after 10 s.
    hang_seconds = 8 if gateway.name == "http" else 12
    record, calls = sms_scenario(pipeline, gateway, SMS_HANG, hang_next=1, seconds=hang_seconds)

    assert record["attempts"][0]["outcome"] == "unknown"
    assert "unknown_since" in record
    key = record["id"].removeprefix("sms#")
    # The hung call completes at the gateway after the client gave up. HTTP: the reconciler
    # trusts a miss only after SMS_LOOKUP_SETTLE_SECONDS, so it finds the message there; End User
    # Messaging: the reconciler cannot look it up and never resends; the delivery event closes it.
    assert_closed_by_what_the_gateway_offers(pipeline, gateway, record)
    assert len(sends(calls, gateway)) == 1
    assert len(gateway.reached_phones(pipeline, key)) == 1


def test_an_sms_whose_answer_and_delivery_events_are_lost_stays_unknown_and_is_never_resent(
    pipeline: Pipeline,
) -> None:
    """End User Messaging without its evidence: nothing can prove the send, so the reconciler
    leaves the record `unknown` for a person, run after run, and never sends it again."""
    gateway = END_USER_MESSAGING
    pipeline.fake(gateway.fake).inject(drop_events_next=1)
    record, calls = sms_scenario(pipeline, gateway, SMS_NO_EVIDENCE, settled_by="unknown", drop_answer_next=1)
    key = record["id"]
    runs = counters(pipeline)["reconciler"]["invocations"]

    wait_for(lambda: counters(pipeline)["reconciler"]["invocations"] >= runs + 3, 30, "three reconciler runs")

    assert (pipeline.item("journal", {"id": key}) or {}).get("state") == "unknown"
    assert [c["fault"] for c in calls] == ["drop_answer"]
    assert len(gateway.calls(pipeline, key.removeprefix("sms#"))) == 1
    assert len(gateway.reached_phones(pipeline, key.removeprefix("sms#"))) == 1
    [message] = gateway.reached_phones(pipeline, key.removeprefix("sms#"))
    status, events = http("GET", f"{pipeline.fake(gateway.fake).url}/_events")
    assert status == 200
    assert [e.get("dropped") for e in events if e["message_id"] == message["message_id"]] == [True]


def test_a_crm_event_with_the_token_in_the_url_path_sends_its_sms(pipeline: Pipeline) -> None:
    """Templated senders (issue 11): `POST /crm/events/<token>`, no signature, no header; a wrong
    token is 401 and sends nothing."""
    assert pipeline.deployment.crm_auth == "signature_or_token"
    phone = phone_number(CRM_TOKEN_PATH, 1)
    SENT_PHONES.add(phone)
    refused_order, order_id = f"E2E-{CRM_TOKEN_PATH}-0", f"E2E-{CRM_TOKEN_PATH}-1"
    wrong = pipeline.settings.crm_token[:-1] + ("x" if not pipeline.settings.crm_token.endswith("x") else "y")

    refused = order_status_changed(
        f"evt-e2e-{CRM_TOKEN_PATH}-0", refused_order, "ready_for_pickup", "paid", phone
    )
    assert pipeline.send_crm_event_with_path_token(refused, token=wrong) == 401
    event = order_status_changed(f"evt-e2e-{CRM_TOKEN_PATH}-1", order_id, "ready_for_pickup", "paid", phone)
    assert pipeline.send_crm_event_with_path_token(event) == 200

    gateway = END_USER_MESSAGING
    [sms] = wait_for(lambda: answered(gateway.sends(pipeline, order_id)), 30, "the order SMS")
    assert sms
    assert pipeline.runtime.wait_until_drained(timeout=30)
    assert gateway.sends(pipeline, order_id) == [sms], "exactly one SMS"
    assert gateway.sends(pipeline, refused_order) == []


# -- CRMs that post their own webhooks (issue 11) -------------------------------------------------
def portal_customer(pipeline: Pipeline, scenario: int) -> tuple[int, str]:
    """A contact in the Bitrix24 stand-in with a phone as a manager types it; (its id, E.164)."""
    phone = phone_number(scenario, 1)
    SENT_PHONES.add(phone)
    written = f"{phone[:3]} {phone[3:7]} {phone[7:10]}-{phone[10:]}"
    return pipeline.runtime.bitrix24.create_contact(f"Customer{scenario}", written), phone


def test_a_bitrix24_deal_moved_to_ready_texts_once_and_edits_and_resends_text_nothing(
    pipeline: Pipeline,
) -> None:
    portal = pipeline.runtime.bitrix24
    contact, phone = portal_customer(pipeline, BITRIX24_DEAL)
    created = portal.create_deal(f"Order {BITRIX24_DEAL}", contact_id=contact)
    assert created.status == 200, created.body
    assert pipeline.runtime.wait_until_drained(timeout=30)
    assert texts_to(pipeline, phone) == [], "a new deal (stage NEW, no SMS rule) texts nobody"

    moved = portal.move_deal(created.deal_id, "EXECUTING")  # mapped to ready_for_pickup

    assert moved.status == 200, moved.body
    [sms] = wait_for(lambda: answered(texts_to(pipeline, phone)), 30, "the ready-for-pickup SMS")
    # A German phone: the shipped rules' German text (team/sms_rules.json language_by_country).
    assert f"Ihre Bestellung {created.deal_id} ist abholbereit" in sms["body"]["MessageBody"]
    # A manager edits the deal five times (ONCRMDEALUPDATE each time, no stage change), then
    # the portal's move event arrives again.
    edits = [portal.edit_deal(created.deal_id, COMMENTS=f"call first ({n})") for n in range(5)]
    assert [edit.status for edit in edits] == [200] * 5
    assert portal.resend_last().status == 200
    assert pipeline.runtime.wait_until_drained(timeout=60)
    assert texts_to(pipeline, phone) == [sms], "exactly one SMS"
    assert pipeline.dlq_depth("bitrix24") == 0
    # The deal's stage history read on each event: the history decides, not the event.
    reads = [
        c
        for c in pipeline.fake("bitrix24").calls("crm.stagehistory.list")
        if (c["body"] or {}).get("filter") == {"OWNER_ID": created.deal_id}
    ]
    assert len(reads) >= 8


def test_a_bitrix24_portal_down_for_a_minute_texts_once_after_it_recovers(pipeline: Pipeline) -> None:
    portal = pipeline.runtime.bitrix24
    contact, phone = portal_customer(pipeline, BITRIX24_OUTAGE)
    created = portal.create_deal(f"Order {BITRIX24_OUTAGE}", contact_id=contact)
    assert pipeline.runtime.wait_until_drained(timeout=30)
    pipeline.fake("bitrix24").inject(down_for=60)
    down_since = time.monotonic()
    wait_for(pipeline.fake("bitrix24").is_down, 5, "the portal to go down")

    moved = portal.move_deal(created.deal_id, "EXECUTING")

    assert moved.status == 200, "the webhook answers at once; the portal's REST API is what is down"
    [sms] = wait_for(lambda: answered(texts_to(pipeline, phone)), 240, "the SMS after the portal recovered")
    assert time.monotonic() - down_since >= 60
    # The catch-up sweep may bring the SMS before the webhook's own event comes back from its
    # backoff (5 s doubling, at most the consumer's max delay): drained once that retry ran too.
    backoff = by_name("bitrix24").retry.max_delay_seconds
    assert pipeline.runtime.wait_until_drained(timeout=backoff + 60)
    assert texts_to(pipeline, phone) == [sms], "exactly one SMS"
    retries = [r for r in pipeline.log_records("bitrix24") if r.get("message") == "record will be retried"]
    assert retries and all("bitrix24 crm." in r["reason"] for r in retries)
    assert pipeline.dlq_depth("bitrix24") == 0


def test_a_bitrix24_stage_missing_from_the_map_waits_in_the_dlq_with_the_reason(pipeline: Pipeline) -> None:
    portal = pipeline.runtime.bitrix24
    contact, phone = portal_customer(pipeline, BITRIX24_UNMAPPED)
    created = portal.create_deal(f"Order {BITRIX24_UNMAPPED}", contact_id=contact)
    assert pipeline.runtime.wait_until_drained(timeout=30)
    before = pipeline.dlq_depth("bitrix24")

    moved = portal.move_deal(created.deal_id, "UC_NOT_MAPPED")

    assert moved.status == 200, "answered: the portal never retries what a person must fix"
    # The catch-up sweep (every CRM_SWEEP_EVERY_SECONDS here) may read the move from the deal's
    # history before the webhook's event is dead-lettered, and dead-letter its own copy of the same
    # move with the same reason: one or two messages, each naming the deal and the setting to fix
    # (once fixed, the redriven copies text once: the journal keys the move, not the message).
    wait_for(lambda: pipeline.dlq_depth("bitrix24") > before, 30, "the dead-lettered event")
    reasons = [
        m["MessageAttributes"]["dead_letter_reason"]["StringValue"] for m in pipeline.dlq_messages("bitrix24")
    ]
    this_move = [r for r in reasons if f"deal {created.deal_id}: stage 'UC_NOT_MAPPED'" in r]
    assert 1 <= len(this_move) <= 2 and all("bitrix24_stages" in r for r in this_move)
    assert any(r.get("message") == "CRM source misconfigured" for r in pipeline.log_records("bitrix24"))
    assert texts_to(pipeline, phone) == []


def test_an_amocrm_webhook_carrying_two_leads_texts_each_customer_once(pipeline: Pipeline) -> None:
    account = pipeline.runtime.amocrm
    phones = [phone_number(AMOCRM_BATCH, index) for index in (1, 2)]
    SENT_PHONES.update(phones)
    pipeline_id, processing, ready, shipped = 7001, 70012, 70013, 70014  # local.overlay's demo pipeline
    # Fifty custom fields each, as a real account's leads carry them (the webhook reads none).
    custom_fields = {f"Field {k}": f"value {k}" for k in range(50)}
    leads = [
        account.create_lead(
            f"Order {AMOCRM_BATCH}-{n}",
            pipeline_id,
            processing,
            account.create_contact(f"Buyer{n}", phone),
            custom_fields=custom_fields,
        )
        for n, phone in enumerate(phones, start=1)
    ]

    delivery = account.change_statuses([(leads[0], ready), (leads[1], shipped)])

    assert delivery.status == 200, delivery.body
    first = wait_for(lambda: texts_to(pipeline, phones[0]), 30, "the first lead's SMS")
    second = wait_for(lambda: texts_to(pipeline, phones[1]), 30, "the second lead's SMS")
    assert "ist abholbereit" in first[0]["body"]["MessageBody"]  # German phones: the de text
    assert "wurde versandt" in second[0]["body"]["MessageBody"]
    assert account.resend_last().status == 200  # amoCRM retrying the same webhook
    assert pipeline.runtime.wait_until_drained(timeout=60)
    assert [len(texts_to(pipeline, phone)) for phone in phones] == [1, 1]


def test_functions_restarted_on_request_answer_the_next_update_from_fresh_processes(
    pipeline: Pipeline,
) -> None:
    runtime, ids = pipeline.runtime, Ids(RESTART)
    names = ("webhook", "autoreply")
    old_pids = {name: runtime.children[name].process.pid for name in names}  # type: ignore[union-attr]
    heard: list[dict[str, Any]] = []
    runtime.on_status("autoreply", heard.append)
    before = counters(pipeline)

    init_seconds = runtime.restart_functions(*names)

    assert set(init_seconds) == set(names) and all(seconds > 0 for seconds in init_seconds.values())
    after_restart = counters(pipeline)
    for name in names:
        assert runtime.children[name].process.pid != old_pids[name]  # type: ignore[union-attr]
        assert after_restart[name]["state"] == "ready"
        # Replaced on request: not a crash, not counted as a restart.
        assert delta(before, after_restart, name, "restarts") == 0
    sent = [start(ids, user(ids.number()))]
    send_all(pipeline, sent)
    wait_for_effects(pipeline, sent, timeout=30)
    assert_exactly_once(pipeline, sent)
    # The listener heard the new process: its batch, with when SQS took each record.
    busy = [message for message in heard if message["event"] == "busy"]
    assert busy and all(len(message["sent_at"]) == message["records"] for message in busy)
    # Each says which worker and whose (`local.chaos.inflight` reads the function from it).
    assert all(message["function"] == "autoreply" and message["worker"] for message in busy)
    assert all(0 < message["time"] - sent_at < 30 for message in busy for sent_at in message["sent_at"])


def test_no_secret_and_no_full_phone_number_appears_in_any_log(pipeline: Pipeline) -> None:
    """Issue 6: no log of the run (functions, moto, runtime, ops CLI, status) holds a secret or phone.

    Runs last, so it covers every scenario before it; its own traffic (a shared contact, an order
    SMS) makes it meaningful when run alone.
    """
    ids = Ids(LOG_SCAN)
    contact = shared_contact(ids, user(ids.number()), phone_number(LOG_SCAN, 1))
    phone = phone_number(LOG_SCAN, 2)
    SENT_PHONES.add(phone)
    order_id = f"E2E-{LOG_SCAN}-1"
    send_all(pipeline, [contact])
    assert (
        pipeline.send_crm_event(
            order_status_changed(f"evt-e2e-{LOG_SCAN}-1", order_id, "ready_for_pickup", "paid", phone)
        )
        == 200
    )
    wait_for_effects(pipeline, [contact], timeout=30)
    gateway = END_USER_MESSAGING
    assert pipeline.deployment.sms_gateway == gateway.name, "the session runs the stack's default gateway"
    [sms] = wait_for(lambda: answered(gateway.sends(pipeline, order_id)), 30, "the order SMS")
    key = f"sms#{gateway.key(sms)}"
    wait_for(
        lambda: (pipeline.item("journal", {"id": key}) or {}).get("delivery_status") == "delivered",
        30,
        "its delivery event",
    )
    assert pipeline.runtime.wait_until_drained(timeout=30)

    # Every log of the run: this pipeline's, and the HTTP-gateway one's when it ran.
    logs = pipeline.all_logs()
    for other in OTHER_PIPELINES:
        logs.update(
            {f"{other.runtime.state_dir.name}/{name}": text for name, text in other.all_logs().items()}
        )

    # The logs hold the run: every function wrote, and phone numbers went through them, masked.
    for function in ("webhook", *TELEGRAM_CONSUMERS, "sms", "reconciler", "sms_events"):
        assert pipeline.log_records(function), f"{function} logged nothing"
    recipients = [r["recipient"] for r in pipeline.log_records("sms") if isinstance(r.get("recipient"), str)]
    assert any(r.endswith(phone[-2:]) and r != phone for r in recipients), (
        "no masked recipient in the sms log"
    )
    settings = pipeline.settings
    needles = {
        "the Telegram secret token": settings.telegram_secret,
        "the CRM signing key": settings.crm_signing_key,
        "the CRM token": settings.crm_token,
        "the bot token": settings.telegram_bot_token,
        "the bot token's secret part": settings.telegram_bot_token.split(":", 1)[1],
        "the CRM auth header": settings.crm_auth_header,
        "the CRM auth header's credential": settings.crm_auth_header.split()[-1],
        "the SMS gateway token": settings.sms_gateway_token,
        "the SMS inbound token (in the inbound route's path)": settings.sms_inbound_token,
        "the Bitrix24 application token": settings.bitrix24_application_token,
        "the Bitrix24 inbound webhook code": settings.bitrix24_webhook_code,
        "the amoCRM token": settings.amocrm_token,
    }
    for index, number in enumerate(sorted(SENT_PHONES)):
        needles[f"phone number {index}"] = number
        needles[f"phone number {index} without +"] = number.removeprefix("+")
    # Names of what leaked where, never the values themselves.
    leaks = sorted(
        f"{label} in {name}"
        for name, text in logs.items()
        for label, needle in needles.items()
        if needle in text
    )
    assert leaks == []


@pytest.mark.after_scenarios
def test_every_aws_call_of_every_function_is_allowed_by_its_role_in_the_synthesized_stack(
    pipeline: Pipeline, deployed_stack: StackSynthesis
) -> None:
    """Issue 10: each call the function processes made during the scenarios before this one
    (`local.aws_calls`), as IAM authorizes it, is allowed by the function's role in the template
    of the same deployment (`local.policy_check`). Issue 23: and the roles grant nothing no call
    used, each (function, action) left unused being explained in `local.policy_grants`."""
    runtime = pipeline.runtime
    assert runtime.resources is not None
    started = time.monotonic()
    template = deployed_stack.template()
    synthesized = time.monotonic()
    recorded = read_recorded(runtime.aws_calls_dir)
    report = check_directory(
        template,
        runtime.aws_calls_dir,
        runtime.function_environments(runtime.resources),
        region=runtime.settings.region,
        stack_name=runtime.settings.stack_name,
    )
    timing = (
        f"(waited {synthesized - started:.1f} s for the synthesis, evaluated in "
        f"{time.monotonic() - synthesized:.1f} s)"
    )
    (runtime.state_dir / "policy-check.txt").write_text(f"{report.text()}\n{timing}\n")
    print(report.text(), timing, sep="\n")

    assert report.ok, report.text()
    # Every function the runtime runs made calls, and so did the event source mapping on its role.
    assert report.functions == sorted(runtime.functions)
    assert report.silent == []
    lambda_receives = {
        c.function for c in recorded.checks if c.by == "lambda" and c.action == "sqs:ReceiveMessage"
    }
    assert lambda_receives == {c.name for c in runtime.resources.consumers}
    # The recordings hold identifiers, never a secret or a phone number.
    settings = pipeline.settings
    recordings = "".join(path.read_text() for path in runtime.aws_calls_dir.glob("*.jsonl"))
    secrets = [
        settings.telegram_secret,
        settings.crm_signing_key,
        settings.crm_token,
        settings.telegram_bot_token,
        settings.sms_gateway_token,
    ]
    assert not [s for s in [*secrets, *SENT_PHONES] if s in recordings]
    # Nothing granted that no call needed (or explained: local.policy_grants.ALLOWED_UNUSED).
    assert report.unexplained(sorted(runtime.functions)) == [], report.text()
